"""The git side of the reconciler: resolve a branch to a commit, check a commit out.

``resolve_revision`` asks the remote which commit a branch points at (``git ls-remote``);
``checkout`` makes a directory a working tree at exactly one commit, reusing the clone that
is already there; ``program_dir`` finds ``spec.repoDir`` inside a checkout. The first two run
the real ``git`` CLI.

Guarantees:
- Every git call is an argument list (never a shell) with a timeout (by default
  ``LS_REMOTE_TIMEOUT_SECONDS`` for ``resolve_revision``, ``CHECKOUT_TIMEOUT_SECONDS`` for
  ``checkout``); when it expires the whole process group (git, its remote helper, ssh) is
  killed. A stalled HTTP transfer ends sooner (``STALL_TIMEOUT_SECONDS``), an SSH connection
  that does not open or goes silent too (``SSH_CONNECT_TIMEOUT_SECONDS``, keep-alives).
- git sees no system or global configuration, a private ``HOME`` (a fresh 0700 temp dir,
  removed when the call returns), no terminal (``GIT_TERMINAL_PROMPT=0``), ``LC_ALL=C`` (so
  that its messages can be classified), only a whitelisted part of the operator's
  environment (``INHERITED_ENV``), and only the transports in ``ALLOWED_PROTOCOLS`` (no
  ``file://``, which would let one Stack clone another Stack's work directory).
- Credentials are never on a command line (argv is world-readable in /proc) and never in an
  exception message or log line. HTTP credentials reach git through ``GIT_ASKPASS``, a
  script that prints them from environment variables (``/proc/<pid>/environ`` is readable
  only by the same user); an SSH key is a 0600 file in the private ``HOME`` used through
  ``GIT_SSH_COMMAND``, its passphrase is handed over by an ``SSH_ASKPASS`` script. A password
  embedded in an http(s) URL is moved out of the URL the same way (a lone user name, often a
  token, too), so neither git's argv nor ``.git/config`` holds it. Messages and logs are
  scrubbed of every secret value, and every URL in them has its user information masked
  (``redact_url``), git's own stderr included.
- Failures raise ``SourceError`` with a ``reason`` and a ``transient`` flag, classified from
  git's exit status and stderr: a URL git refuses outright (a blocked host name, a transport
  it does not allow, a malformed URL) is not transient; network failures, timeouts and HTTP
  5xx/429 are.
- ``checkout`` never leaves a half-written ``work_dir`` that a later call could take for a
  good clone: a first clone is built in a sibling staging directory and renamed into place;
  an existing clone is updated with git's own atomic fetch, and a clone that git cannot use
  is replaced.

Left to others: when to poll (the reconciler), Git LFS and submodules (not fetched), and
serialising calls for one ``work_dir`` (one worker per Stack key does that).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import glob
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

import structlog

log = structlog.get_logger(__name__)

# Transports git may use (GIT_ALLOW_PROTOCOL). file:// and plain paths are refused on purpose.
ALLOWED_PROTOCOLS = ("https", "http", "ssh", "git")

LS_REMOTE_TIMEOUT_SECONDS: Final = 20.0
"""Default limit of ``resolve_revision`` (one ``git ls-remote``, run on every resync).

It sends one ref pattern and reads one line; a remote that has not answered in 20 s is
treated as unavailable (transient), so a silent remote holds a worker 20 s, not 60.
"""

CHECKOUT_TIMEOUT_SECONDS: Final = 300.0
"""Default limit of ``checkout``: every git command of it together (a first clone included)."""

STALL_TIMEOUT_SECONDS: Final = 15
"""An HTTP(S) transfer below ``STALL_MIN_BYTES_PER_SECOND`` for this long is aborted.

Git's ``http.lowSpeedTime``: it also cuts off a server that accepts the connection and
never answers, before the overall limit.
"""

STALL_MIN_BYTES_PER_SECOND: Final = 1
"""Git's ``http.lowSpeedLimit``: slower than this is a stall (any progress is not)."""

SSH_CONNECT_TIMEOUT_SECONDS: Final = 10
"""ssh's ``ConnectTimeout``; an open connection whose server stops answering keep-alives
(every ``SSH_CONNECT_TIMEOUT_SECONDS``, twice) is closed too."""

# The only variables git inherits from the operator: how to find programs, proxies, CAs.
# Everything else (cloud credentials, PULUMI_ACCESS_TOKEN, GIT_DIR, SSH_AUTH_SOCK) stays out.
INHERITED_ENV = (
    "PATH",
    "TMPDIR",
    "TZ",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
)

# Configuration passed through GIT_CONFIG_COUNT/KEY_n/VALUE_n (environment, not argv).
GIT_CONFIG = (
    ("credential.helper", ""),  # no credential store: askpass is the only source
    ("protocol.version", "2"),  # v2 servers send any reachable commit by id
    ("gc.autoDetach", "false"),  # auto-gc runs inside our timeout, never as an orphan
    ("maintenance.autoDetach", "false"),
    ("advice.detachedHead", "false"),
    ("init.defaultBranch", "main"),  # silences git init's hint
)

# Environment variables the askpass scripts read the secrets from.
USERNAME_VAR = "PSO_GIT_USERNAME"
PASSWORD_VAR = "PSO_GIT_PASSWORD"  # noqa: S105 - a variable name, not a password
PASSPHRASE_VAR = "PSO_SSH_PASSPHRASE"  # noqa: S105 - a variable name, not a passphrase

# git asks "Username for 'https://host': " and then "Password for 'https://user@host': ".
_GIT_ASKPASS = f"""#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "${USERNAME_VAR}" ;;
  *) printf '%s\\n' "${PASSWORD_VAR}" ;;
esac
"""
_SSH_ASKPASS = f"""#!/bin/sh
printf '%s\\n' "${PASSPHRASE_VAR}"
"""

_MASK = "***"
_COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")
_BRANCH = re.compile(r"[^-./\x00-\x20\x7f~^:?*\[\\][^\x00-\x20\x7f~^:?*\[\\]*")
# scheme://userinfo@ anywhere in a text; userinfo ends at the first "/", "@" or blank.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")
_SHORTEST_SCRUBBED_USERNAME = 8


class SourceFailure(enum.StrEnum):
    """Why a source could not be fetched; the reconciler maps it to a condition reason."""

    AUTHENTICATION_FAILED = "AuthenticationFailed"
    REVISION_NOT_FOUND = "RevisionNotFound"
    SOURCE_UNAVAILABLE = "SourceUnavailable"


class SourceError(Exception):
    """Fetching the source failed.

    ``reason`` names the failure; ``transient`` is True when retrying later may succeed
    without any change (network failures, timeouts, HTTP 5xx/429) and False when it will not
    (credentials refused, unknown branch or commit, missing repository, a URL git refuses).
    The message is scrubbed of every credential and of URL user information.
    """

    def __init__(self, message: str, *, reason: SourceFailure, transient: bool) -> None:
        """Record the message, reason and whether a retry may succeed."""
        super().__init__(message)
        self.reason = reason
        self.transient = transient


class ProgramDirError(ValueError):
    """``spec.repoDir`` does not name a directory inside the checkout (see ``program_dir``).

    Terminal, like an invalid spec (the Stack's reason is ``InvalidSpec``): only a new
    ``spec.repoDir`` or a new commit fixes it. The message starts with ``spec.repoDir``.
    Not a ``SourceError``: fetching the source succeeded.
    """


class _UnclassifiedError(SourceError):
    """git failed talking to the remote and its message matched no known pattern."""


class _BrokenRepositoryError(Exception):
    """A local git command failed: the work directory is not a usable clone."""


@dataclass(frozen=True, slots=True, repr=False)
class GitCredentials:
    """Credentials for one repository, as resolved from a Stack's ``gitAuth``.

    HTTP(S): ``token`` is sent as the password of HTTP basic authentication, with
    ``username`` (default ``git``); without a token, ``username`` + ``password``. SSH:
    ``ssh_private_key`` (OpenSSH or PEM text) with an optional ``ssh_passphrase``;
    ``ssh_known_hosts`` (an extension: known_hosts lines) pins host keys, otherwise the first
    key a host presents is accepted. Every method given is configured at once and git uses
    the one its URL's transport needs. ``repr()`` masks every value.
    """

    token: str | None = None
    username: str | None = None
    password: str | None = None
    ssh_private_key: str | None = None
    ssh_passphrase: str | None = None
    ssh_known_hosts: str | None = None

    def __repr__(self) -> str:
        """Show which fields are set, never their values."""
        shown = (
            f"{f.name}={_MASK!r}" if getattr(self, f.name) is not None else f"{f.name}=None"
            for f in dataclasses.fields(self)
        )
        return f"GitCredentials({', '.join(shown)})"

    def http_login(self) -> tuple[str, str] | None:
        """The (username, password) git should answer an HTTP 401 with, if any."""
        if self.token is not None:
            return self.username or "git", self.token
        if self.password is not None:
            return self.username or "", self.password
        return None

    def secrets(self) -> list[str]:
        """Every secret value, for scrubbing: token, password, passphrase, key and key lines.

        Key lines shorter than 16 characters (the armour, a short last line) are left out:
        they reveal nothing and would mask ordinary words in git's messages.
        """
        values = [self.token, self.password, self.ssh_passphrase, self.ssh_private_key]
        key_lines = [
            line.strip()
            for line in (self.ssh_private_key or "").splitlines()
            if len(line.strip()) >= 16 and not line.startswith("-----")
        ]
        return [v for v in [*values, *key_lines] if v]


def resolve_revision(
    url: str, branch: str, credentials: GitCredentials | None, *, timeout: float | None = None
) -> str:
    """Return the commit SHA that ``branch`` (``main`` or ``refs/heads/main``) points at.

    ``timeout`` bounds the call (default ``LS_REMOTE_TIMEOUT_SECONDS``).

    Raises:
        SourceError: ``RevisionNotFound`` if the remote has no such branch, otherwise as
            classified from git (see ``SourceError``); not transient for a URL that cannot
            be parsed.
        ValueError: ``branch`` is malformed, or ``url`` is empty, starts with ``-`` or holds
            control characters.
    """
    ref = _branch_ref(branch)
    url, login = _split_userinfo(_checked_url(url), credentials)
    limit = LS_REMOTE_TIMEOUT_SECONDS if timeout is None else timeout
    with git_environment(login.credentials) as env:
        git = _Git(env, url, login, limit)
        listing = git.remote(["ls-remote", "--", url, ref], Path(env["HOME"]))
    for line in listing.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    msg = f"branch {ref.removeprefix('refs/heads/')!r} not found in {redact_url(url)}"
    raise SourceError(msg, reason=SourceFailure.REVISION_NOT_FOUND, transient=False)


def checkout(  # noqa: PLR0913 - the reconciler's one call; all but two are keyword-only
    url: str,
    work_dir: Path,
    *,
    commit: str | None = None,
    branch: str | None = None,
    credentials: GitCredentials | None = None,
    timeout: float | None = None,
    keep: Sequence[str] = (),
) -> str:
    """Make ``work_dir`` a clean working tree of ``url`` at one commit; return its SHA.

    Exactly one of ``commit`` (a full or abbreviated SHA) and ``branch`` (its current tip)
    is given. An existing clone of the same URL is reused and only missing objects are
    fetched, shallowly (``--depth 1``); a pinned commit already present is not fetched at
    all. If the server refuses to send a commit by id, every branch and tag is fetched and
    the commit looked up there. A directory that is not a usable clone of ``url`` is
    replaced. Afterwards HEAD is detached at the commit, tracked files are as committed, and
    everything git does not track is deleted except the relative paths in ``keep`` (e.g. a
    virtualenv), which also survive a replacement of the clone. ``timeout`` bounds the call
    (default ``CHECKOUT_TIMEOUT_SECONDS``).

    Raises:
        SourceError: ``RevisionNotFound`` for an unknown branch or commit, otherwise as
            classified from git (see ``SourceError``); not transient for a URL that cannot
            be parsed.
        ValueError: the other arguments are malformed, or ``url`` is empty, starts with
            ``-`` or holds control characters.
        OSError: the local file system failed (disk full, permissions).
    """
    target = _Target.parse(commit, branch)
    excludes = _clean_excludes(keep)
    url, login = _split_userinfo(_checked_url(url), credentials)
    work_dir = work_dir.resolve()
    limit = CHECKOUT_TIMEOUT_SECONDS if timeout is None else timeout
    with git_environment(login.credentials) as env:
        git = _Git(env, url, login, limit)
        if _is_clone_of(git, work_dir, url):
            try:
                return _update(git, work_dir, target, excludes)
            except (_BrokenRepositoryError, _UnclassifiedError) as err:
                log.warning(
                    "Clone is unusable; cloning again", work_dir=str(work_dir), error=str(err)
                )
        try:
            return _clone(git, work_dir, target, keep)
        except _BrokenRepositoryError as err:
            msg = f"cannot prepare {work_dir}: {err}"
            raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True) from err


def program_dir(checkout: Path, repo_dir: str | None) -> Path:
    """The directory ``spec.repoDir`` names inside ``checkout``, symlinks resolved.

    ``repo_dir`` is relative to the top of the checkout (None or "" or "." is the top). The
    result is the real path, so the program runs where the check was made.

    Raises:
        ProgramDirError: the path leaves the checkout (through ``..`` or a symlink, which
            is a property of the commit), does not exist, is not a directory, or is a
            symlink loop. The message names ``spec.repoDir`` and the fix.
    """
    root = checkout.resolve()
    relative = PurePosixPath(repo_dir or ".")
    try:
        target = (root / relative).resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise _invalid_repo_dir(relative, "is a symlink loop") from None
    if relative.is_absolute() or not target.is_relative_to(root):
        raise _invalid_repo_dir(relative, "leads outside the repository (through .. or a symlink)")
    if not target.is_dir():
        problem = "does not exist in the repository at this commit, or is not a directory"
        raise _invalid_repo_dir(relative, problem)
    return target


def _invalid_repo_dir(relative: PurePosixPath, problem: str) -> ProgramDirError:
    return ProgramDirError(
        f"spec.repoDir {str(relative)!r} {problem}: point spec.repoDir at a directory inside"
        " the repository that holds Pulumi.yaml (or commit that directory)"
    )


def redact_url(text: str) -> str:
    """``text`` with the user information of every URL in it masked.

    ``https://user:token@host/r`` and ``https://token@host/r`` both become
    ``https://***@host/r``; text without ``scheme://...@`` is returned unchanged.
    """
    return _USERINFO.sub(rf"\g<scheme>{_MASK}@", text)


@contextlib.contextmanager
def git_environment(credentials: GitCredentials | None = None) -> Iterator[dict[str, str]]:
    """Yield the environment for git calls with ``credentials``; its files go on exit.

    The environment points ``HOME`` at a fresh private directory holding everything the
    credentials need: the ``GIT_ASKPASS`` script (HTTP), the SSH key (mode 0600),
    known_hosts and the ``SSH_ASKPASS`` script. The secrets themselves are environment
    values (``USERNAME_VAR``, ``PASSWORD_VAR``, ``PASSPHRASE_VAR``) that the scripts print;
    the key is the only secret written to disk. The directory is removed on exit, also when
    the body raises.
    """
    home = Path(tempfile.mkdtemp(prefix="git-home-"))
    try:
        env = _base_environment(home)
        if credentials is not None:
            env.update(_http_environment(credentials, home))
            env.update(_ssh_environment(credentials, home))
        yield env
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _base_environment(home: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        # Empty, not unset: otherwise git would fall back to SSH_ASKPASS for HTTP prompts.
        GIT_ASKPASS="",
        GIT_ALLOW_PROTOCOL=":".join(ALLOWED_PROTOCOLS),
        GIT_SSH_COMMAND=shlex.join(_ssh_argv(home, key=None, strict=False, batch=True)),
        GIT_SSH_VARIANT="ssh",
        LC_ALL="C",
        LANGUAGE="",
    )
    config = [
        *GIT_CONFIG,
        ("http.lowSpeedLimit", str(STALL_MIN_BYTES_PER_SECOND)),
        ("http.lowSpeedTime", str(STALL_TIMEOUT_SECONDS)),
    ]
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def _http_environment(credentials: GitCredentials, home: Path) -> dict[str, str]:
    login = credentials.http_login()
    if login is None:
        return {}
    script = _write_private(home / "git-askpass", _GIT_ASKPASS, mode=0o700)
    return {"GIT_ASKPASS": str(script), USERNAME_VAR: login[0], PASSWORD_VAR: login[1]}


def _ssh_environment(credentials: GitCredentials, home: Path) -> dict[str, str]:
    if credentials.ssh_private_key is None:
        return {}
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    key_text = credentials.ssh_private_key.replace("\r\n", "\n")
    # OpenSSH refuses a key file whose last line has no newline.
    key = _write_private(ssh_dir / "id", key_text.rstrip("\n") + "\n", mode=0o600)
    strict = credentials.ssh_known_hosts is not None
    if strict:
        _write_private(ssh_dir / "known_hosts", credentials.ssh_known_hosts or "", mode=0o600)
    passphrase = credentials.ssh_passphrase
    env = {
        "GIT_SSH_COMMAND": shlex.join(_ssh_argv(home, key, strict=strict, batch=passphrase is None))
    }
    if passphrase is not None:
        script = _write_private(home / "ssh-askpass", _SSH_ASKPASS, mode=0o700)
        env |= {"SSH_ASKPASS": str(script), "SSH_ASKPASS_REQUIRE": "force"}
        env[PASSPHRASE_VAR] = passphrase
    return env


def _ssh_argv(home: Path, key: Path | None, *, strict: bool, batch: bool) -> list[str]:
    """The ssh command git runs: no user or system ssh config, key auth only, no prompts.

    ``batch`` (BatchMode) is off only when a passphrase must be read through SSH_ASKPASS.
    Password and keyboard-interactive authentication are off, so SSH_ASKPASS is asked for
    the key's passphrase and nothing else.
    """
    argv = ["ssh", "-F", os.devnull]
    if key is not None:
        argv += ["-i", str(key)]
    options = [
        "IdentitiesOnly=yes",
        f"StrictHostKeyChecking={'yes' if strict else 'accept-new'}",
        f"UserKnownHostsFile={home / '.ssh' / 'known_hosts'}",
        "PasswordAuthentication=no",
        "KbdInteractiveAuthentication=no",
        f"ConnectTimeout={SSH_CONNECT_TIMEOUT_SECONDS}",
        f"ServerAliveInterval={SSH_CONNECT_TIMEOUT_SECONDS}",
        "ServerAliveCountMax=2",
        f"BatchMode={'yes' if batch else 'no'}",
    ]
    for option in options:
        argv += ["-o", option]
    return argv


def _write_private(path: Path, text: str, *, mode: int) -> Path:
    """Create ``path`` with ``mode`` from the start (never briefly readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path


class _Git:
    """Runs the git commands of one operation: one environment, deadline and scrubber."""

    def __init__(self, env: dict[str, str], url: str, login: _Login, timeout: float) -> None:
        self._env = env
        self.url = url
        self._secrets = [*login.secrets, *login.extra_secrets]
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout

    def run(self, args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run ``git <args>`` in ``cwd``; raise a transient SourceError when time runs out."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._timed_out(args)
        argv = ["git", *args]
        # git never looks above cwd for a repository: a broken work_dir is not "inside" a
        # repository that happens to contain it.
        env = {**self._env, "GIT_CEILING_DIRECTORIES": str(cwd.resolve().parent)}
        log.debug("Running git", argv=self.scrub(shlex.join(argv)), cwd=str(cwd))
        with subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,  # its own process group, so a timeout kills helpers too
        ) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=remaining)
            except subprocess.TimeoutExpired as err:
                _kill_group(proc)
                raise self._timed_out(args) from err
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def local(self, args: Sequence[str], cwd: Path) -> str:
        """Run a command that does not touch the network; failure means a broken clone."""
        proc = self.run(args, cwd)
        if proc.returncode != 0:
            msg = f"git {args[0]} failed: {_summary(self.scrub(proc.stderr))}"
            raise _BrokenRepositoryError(msg)
        return proc.stdout

    def remote(self, args: Sequence[str], cwd: Path) -> str:
        """Run a command that talks to the remote; failure raises a classified SourceError."""
        proc = self.run(args, cwd)
        if proc.returncode == 0:
            return proc.stdout
        stderr = self.scrub(proc.stderr)
        msg = f"git {args[0]} {self.scrub(self.url)} failed: {_summary(stderr)}"
        known = _classify(stderr)
        if known is None:
            raise _UnclassifiedError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
        raise SourceError(msg, reason=known[0], transient=known[1])

    def scrub(self, text: str) -> str:
        """``text`` with every secret (plain or URL-encoded) and URL user information masked."""
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, _MASK).replace(urllib.parse.quote(secret, ""), _MASK)
        return redact_url(text)

    def _timed_out(self, args: Sequence[str]) -> SourceError:
        msg = f"git {args[0]} {self.scrub(self.url)} timed out (limit {self._timeout:g}s)"
        return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    # The pipes close once every process of the group is gone; don't wait forever anyway.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)


# Ordered: the first match wins. Patterns are git's, curl's and ssh's messages under LC_ALL=C.
_CLASSES: tuple[tuple[re.Pattern[str], SourceFailure, bool], ...] = (
    (
        re.compile(
            r"repository not exported|no such repository|repository '[^']*' not found"
            r"|repository not found"
            r"|does not appear to be a git repository|returned error: 404"
            r"|transport '[^']*' not allowed|unable to find remote helper"
            # URLs git or ssh refuse outright: an option-like host or user, a malformed URL
            r"|strange (hostname|username|pathname|port)|hostname contains invalid characters"
            r"|url using bad/illegal format|unsupported protocol|protocol \S+ not supported"
            r"|port number was not a decimal number|no host part in the url"
            r"|ssl certificate problem|certificate verify failed",  # a CA does not fix itself
            re.IGNORECASE,
        ),
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    ),
    (
        re.compile(
            r"authentication failed|could not read (username|password)|permission denied \("
            r"|access denied|returned error: 40[13]|host key verification failed"
            r"|passphrase|load key|invalid username or password",
            re.IGNORECASE,
        ),
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    ),
    (
        re.compile(
            r"couldn't find remote ref|not our ref|unadvertised object|no such ref",
            re.IGNORECASE,
        ),
        SourceFailure.REVISION_NOT_FOUND,
        False,
    ),
    (
        re.compile(
            r"could not resolve|connection refused|connection timed out|connection reset"
            r"|timed out|too slow|failed to connect|unable to connect|early eof"
            r"|hung up unexpectedly|rpc failed|returned error: (5\d\d|429)|temporary failure"
            r"|network is unreachable|no route to host|ssh: connect to host|ssl|tls|gnutls"
            r"|broken pipe",
            re.IGNORECASE,
        ),
        SourceFailure.SOURCE_UNAVAILABLE,
        True,
    ),
)


def _classify(stderr: str) -> tuple[SourceFailure, bool] | None:
    """(reason, transient) for git's stderr, or None when no known pattern matches."""
    for pattern, reason, transient in _CLASSES:
        if pattern.search(stderr):
            return reason, transient
    return None


def _summary(stderr: str) -> str:
    """The last few lines of git's stderr on one line, at most 600 characters."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return "; ".join(lines[-4:])[-600:] or "no output"


@dataclass(frozen=True, slots=True)
class _Target:
    """What to check out: a branch's tip (``branch_ref``) or one ``commit``."""

    branch_ref: str | None
    commit: str | None

    @classmethod
    def parse(cls, commit: str | None, branch: str | None) -> _Target:
        if (commit is None) == (branch is None):
            raise ValueError("give exactly one of commit and branch")
        if branch is not None:
            return cls(_branch_ref(branch), None)
        if commit is None or not _COMMIT.fullmatch(commit):
            msg = f"not a commit id: {commit!r}"
            raise ValueError(msg)
        return cls(None, commit.lower())


def _branch_ref(branch: str) -> str:
    """``refs/heads/<name>`` for ``name`` or ``refs/heads/name``, checked like git would."""
    name = branch.removeprefix("refs/heads/")
    bad = ("..", "//", "/.", "@{")
    malformed = not _BRANCH.fullmatch(name) or any(s in name for s in bad)
    if malformed or name.endswith((".", "/", ".lock")):
        msg = f"not a branch name: {branch!r}"
        raise ValueError(msg)
    return f"refs/heads/{name}"


def _checked_url(url: str) -> str:
    # A leading "-" would be read as an option; control characters have no place in a URL.
    if not url or url.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ValueError("not a repository URL")
    return url


@dataclass(frozen=True, slots=True, repr=False)
class _Login:
    """What one operation authenticates with, and every value to scrub from its messages."""

    credentials: GitCredentials | None
    extra_secrets: tuple[str, ...] = ()

    @property
    def secrets(self) -> list[str]:
        """The credentials' secret values (see ``GitCredentials.secrets``)."""
        return self.credentials.secrets() if self.credentials is not None else []


def _split_userinfo(url: str, credentials: GitCredentials | None) -> tuple[str, _Login]:
    """Move user information out of an http(s) URL into credentials (explicit ones win).

    ``user:password@`` becomes that login; a lone ``user@`` (often a token) becomes user name
    ``user`` with an empty password, and is scrubbed from messages like a secret when it is
    long enough to be one (a short name would mask ordinary words).

    Raises:
        SourceError: ``SourceUnavailable``, not transient: ``url`` is malformed.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        msg = f"the repository URL is malformed ({err}): fix spec.projectRepo"
        raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False) from None
    if parts.scheme not in {"http", "https"} or "@" not in parts.netloc:
        return url, _Login(credentials)
    clean = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    username = urllib.parse.unquote(parts.username or "")
    extra = (username,) if len(username) >= _SHORTEST_SCRUBBED_USERNAME else ()
    if credentials is not None and credentials.http_login() is not None:
        return clean, _Login(credentials, extra)
    login = {"username": username, "password": urllib.parse.unquote(parts.password or "")}
    return clean, _Login(dataclasses.replace(credentials or GitCredentials(), **login), extra)


def _clean_excludes(keep: Sequence[str]) -> list[str]:
    """``git clean`` arguments that spare each relative path in ``keep``."""
    args = []
    for relative in keep:
        path = PurePosixPath(relative)
        if path.is_absolute() or not path.parts or ".." in path.parts or path.parts[0] == ".git":
            msg = f"keep paths are relative paths inside the work tree: {relative!r}"
            raise ValueError(msg)
        # Anchored at the top ("/"), glob characters taken literally.
        args += ["-e", "/" + re.sub(r"([*?\[\\])", r"\\\1", str(path))]
    return args


def _is_clone_of(git: _Git, work_dir: Path, url: str) -> bool:
    """True if ``work_dir`` is the top of a git repository whose origin is ``url``."""
    if work_dir.is_symlink() or not (work_dir / ".git").is_dir():
        return False
    top = git.run(["rev-parse", "--show-toplevel"], work_dir)
    if top.returncode != 0 or top.stdout.strip() != os.path.realpath(work_dir):
        return False
    origin = git.run(["config", "--get", "remote.origin.url"], work_dir)
    return origin.returncode == 0 and origin.stdout.strip() == url


def _update(git: _Git, repo: Path, target: _Target, excludes: list[str]) -> str:
    sha = _fetch(git, repo, target)
    _sync_tree(git, repo, sha, excludes)
    return sha


def _clone(git: _Git, work_dir: Path, target: _Target, keep: Sequence[str]) -> str:
    """Clone into a staging directory beside ``work_dir``, then swap it in."""
    work_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(work_dir)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(work_dir), dir=work_dir.parent))
    try:
        git.local(["init", "--quiet"], staging)
        git.local(["remote", "add", "origin", git.url], staging)
        sha = _fetch(git, staging, target)
        _sync_tree(git, staging, sha, [])
        _carry_over(work_dir, staging, keep)
        _swap_in(staging, work_dir)
    except BaseException:
        _remove(staging)
        raise
    return sha


def _fetch(git: _Git, repo: Path, target: _Target) -> str:
    """Fetch what ``target`` needs into ``repo``; return the full commit SHA."""
    if target.branch_ref is not None:
        tracking = "refs/remotes/origin/" + target.branch_ref.removeprefix("refs/heads/")
        refspec = f"+{target.branch_ref}:{tracking}"
        git.remote(["fetch", "--quiet", "--no-tags", "--depth=1", "origin", refspec], repo)
        return git.local(["rev-parse", "--verify", f"{tracking}^{{commit}}"], repo).strip()
    assert target.commit is not None  # noqa: S101 - _Target.parse guarantees one of the two
    return _fetch_commit(git, repo, target.commit)


def _fetch_commit(git: _Git, repo: Path, commit: str) -> str:
    """Fetch one commit by id; fall back to all branches and tags if the server refuses."""
    found = _local_commit(git, repo, commit)
    if found is not None:
        return found  # a commit never changes: nothing to fetch
    if len(commit) in {40, 64}:
        try:
            git.remote(["fetch", "--quiet", "--no-tags", "--depth=1", "origin", commit], repo)
        except SourceError as err:
            if err.reason is not SourceFailure.REVISION_NOT_FOUND and not isinstance(
                err, _UnclassifiedError
            ):
                raise
            log.debug("Server refused a commit by id; fetching all refs", error=str(err))
            _fetch_all(git, repo)
    else:
        _fetch_all(git, repo)  # an abbreviated id can only be found among fetched commits
    found = _local_commit(git, repo, commit)
    if found is None:
        msg = f"commit {commit} not found in {git.scrub(git.url)}"
        raise SourceError(msg, reason=SourceFailure.REVISION_NOT_FOUND, transient=False)
    return found


def _fetch_all(git: _Git, repo: Path) -> None:
    shallow = git.local(["rev-parse", "--is-shallow-repository"], repo).strip() == "true"
    args = ["fetch", "--quiet", "--no-tags", *(["--unshallow"] if shallow else []), "origin"]
    git.remote([*args, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"], repo)


def _local_commit(git: _Git, repo: Path, commit: str) -> str | None:
    proc = git.run(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], repo)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _sync_tree(git: _Git, repo: Path, sha: str, excludes: list[str]) -> None:
    """Detach HEAD at ``sha``, reset tracked files, delete everything untracked."""
    git.local(["checkout", "--quiet", "--force", "--detach", sha], repo)
    git.local(["reset", "--quiet", "--hard", sha], repo)
    git.local(["clean", "-ffdxq", *excludes], repo)


def _carry_over(old: Path, new: Path, keep: Sequence[str]) -> None:
    """Move each ``keep`` path from the clone being replaced into the new one.

    A path is moved only if it is really inside ``old`` (no symlinked parent directory
    pointing elsewhere) and the new tree has nothing at that path; one that cannot be moved
    is dropped with a warning (the caller rebuilds it, as after a first clone).
    """
    if old.is_symlink() or not old.is_dir():
        return
    root = Path(os.path.realpath(old))
    for relative in keep:
        source, destination = old / relative, new / relative
        if not os.path.lexists(source) or os.path.lexists(destination):
            continue
        if Path(os.path.realpath(source.parent)) != root / PurePosixPath(relative).parent:
            continue
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            source.rename(destination)
        except OSError as err:
            log.warning("Cannot keep a path across a new clone", path=relative, error=str(err))


def _swap_in(staging: Path, work_dir: Path) -> None:
    """Replace ``work_dir`` by ``staging``; a crash in between leaves no ``work_dir``."""
    if os.path.lexists(work_dir):
        old = work_dir.with_name(f"{_staging_prefix(work_dir)}old-{secrets.token_hex(4)}")
        work_dir.rename(old)
        staging.rename(work_dir)
        _remove(old)
    else:
        staging.rename(work_dir)


def _staging_prefix(work_dir: Path) -> str:
    return f".{work_dir.name}.partial-"


def _remove_leftovers(work_dir: Path) -> None:
    """Delete staging directories an interrupted earlier clone left behind."""
    pattern = glob.escape(_staging_prefix(work_dir)) + "*"
    for leftover in work_dir.parent.glob(pattern):
        _remove(leftover)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
