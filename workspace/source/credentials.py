"""Credentials for one repository, and the environment that hands them to git safely.

Neither a command line nor a config file ever holds a credential.

HTTP credentials reach git through ``GIT_ASKPASS``, a script that prints them from
environment variables (``/proc/<pid>/environ`` is readable only by the same user, argv by
everyone); an SSH key is a 0600 file in a private ``HOME`` used through ``GIT_SSH_COMMAND``,
its passphrase is handed over by an ``SSH_ASKPASS`` script. git sees no system or global
configuration, no terminal, ``LC_ALL=C`` (so that its messages can be classified), only
``INHERITED_ENV`` of the operator's environment and only the transports in
``ALLOWED_PROTOCOLS``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MASK: Final = "***"
"""What a secret, or the user information of a URL, is replaced with wherever it is shown."""

ALLOWED_PROTOCOLS: Final = ("https", "http", "ssh", "git")
"""Transports git may use (GIT_ALLOW_PROTOCOL).

``file://`` and plain paths are refused on purpose: they would let one Stack clone another
Stack's work directory.
"""

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

INHERITED_ENV: Final = (
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
"""The only variables git inherits from the operator: how to find programs, proxies, CAs.

Everything else (cloud credentials, PULUMI_ACCESS_TOKEN, GIT_DIR, SSH_AUTH_SOCK) stays out.
"""

GIT_CONFIG: Final = (
    ("credential.helper", ""),  # no credential store: askpass is the only source
    ("protocol.version", "2"),  # v2 servers send any reachable commit by id
    ("gc.autoDetach", "false"),  # auto-gc runs inside our timeout, never as an orphan
    ("maintenance.autoDetach", "false"),
    ("advice.detachedHead", "false"),
    ("init.defaultBranch", "main"),  # silences git init's hint
)
"""Configuration passed through GIT_CONFIG_COUNT/KEY_n/VALUE_n (environment, not argv)."""

# Environment variables the askpass scripts read the secrets from.
USERNAME_VAR: Final = "PSO_GIT_USERNAME"
PASSWORD_VAR: Final = "PSO_GIT_PASSWORD"  # noqa: S105 - a variable name, not a password
PASSPHRASE_VAR: Final = "PSO_SSH_PASSPHRASE"  # noqa: S105 - a variable name, not a passphrase

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


@dataclass(frozen=True, slots=True, repr=False)
class GitCredentials:
    """Credentials for one repository, as resolved from a Stack's ``gitAuth``.

    HTTP(S): ``token`` is sent as the password of HTTP basic authentication, with
    ``username`` (default ``git``); without a token, ``username`` + ``password``. SSH:
    ``ssh_private_key`` (OpenSSH or PEM text) with an optional ``ssh_passphrase``; the
    first key a host presents is accepted. Every method given is configured at once and git
    uses the one its URL's transport needs. ``repr()`` masks every value.
    """

    token: str | None = None
    username: str | None = None
    password: str | None = None
    ssh_private_key: str | None = None
    ssh_passphrase: str | None = None

    def __repr__(self) -> str:
        """Show which fields are set, never their values."""
        shown = (
            f"{f.name}={MASK!r}" if getattr(self, f.name) is not None else f"{f.name}=None"
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


@contextlib.contextmanager
def git_environment(credentials: GitCredentials | None = None) -> Iterator[dict[str, str]]:
    """Yield the environment for git calls with ``credentials``; its files go on exit.

    The environment points ``HOME`` at a fresh private (0700) directory holding everything
    the credentials need: the ``GIT_ASKPASS`` script (HTTP), the SSH key (mode 0600), the
    known_hosts file ssh fills and the ``SSH_ASKPASS`` script. The secrets themselves are
    environment values (``USERNAME_VAR``, ``PASSWORD_VAR``, ``PASSPHRASE_VAR``) that the
    scripts print; the key is the only secret written to disk. The directory is removed on
    exit, also when the body raises.
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
        GIT_SSH_COMMAND=shlex.join(_ssh_argv(home, key=None, batch=True)),
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
    passphrase = credentials.ssh_passphrase
    env = {"GIT_SSH_COMMAND": shlex.join(_ssh_argv(home, key, batch=passphrase is None))}
    if passphrase is not None:
        script = _write_private(home / "ssh-askpass", _SSH_ASKPASS, mode=0o700)
        env |= {"SSH_ASKPASS": str(script), "SSH_ASKPASS_REQUIRE": "force"}
        env[PASSPHRASE_VAR] = passphrase
    return env


def _ssh_argv(home: Path, key: Path | None, *, batch: bool) -> list[str]:
    """The ssh command git runs: no user or system ssh config, key auth only, no prompts.

    ``batch`` (BatchMode) is off only when a passphrase must be read through SSH_ASKPASS.
    Password and keyboard-interactive authentication are off, so SSH_ASKPASS is asked for
    the key's passphrase and nothing else. A host's first key is accepted and remembered in
    the private ``HOME`` (which lives for one operation).
    """
    argv = ["ssh", "-F", os.devnull]
    if key is not None:
        argv += ["-i", str(key)]
    options = [
        "IdentitiesOnly=yes",
        "StrictHostKeyChecking=accept-new",
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
