"""Parse and validate a Stack's ``spec`` into frozen values the reconciler can trust.

Role: the one place that reads ``Stack.spec`` as the API returns it (plain ``dict``/``list``
from the client, or read-only ``MappingProxyType``/``tuple`` from the informer cache) and
turns it into a ``StackSpec``. Field names and meanings follow the Pulumi Kubernetes Operator
(PKO), so PKO manifests parse unchanged.

Guarantees:

- ``parse_spec`` returns a fully validated ``StackSpec`` or raises ``SpecError``, whose message
  starts with the field path (``spec.gitAuth.basicAuth.password: ...``) and says what to do.
  A ``SpecError`` is terminal: it does not go away until the spec changes.
- The input is never mutated, and the result shares nothing mutable with it: mappings are
  read-only copies, sequences are tuples.
- Secret values are never read here: refs hold Secret names only, and ``repr`` masks literal
  values, so a ``StackSpec`` is safe to log.
- Empty strings, empty lists and ``null`` mean "unset", as Go's ``omitempty`` does for PKO.
- Refused on purpose: ``Env``/``FS`` refs (they read the operator's own environment and
  filesystem), cross-namespace Secret refs, PKO's deprecated fields (the error names the
  replacement), ``fluxSource`` and ``programRef`` (not supported yet).
- Refused because they could only fail at run time: a ``projectRepo`` git cannot or must not
  fetch (a scheme other than https, http, ssh, git or scp-like ``user@host:path``, a local
  path or ``file://``, a host or user starting with ``-``, credentials in the URL), a config
  key Pulumi cannot parse, an unknown ``secretsProvider``, an organisation other than
  ``organization`` on a self-managed (DIY) ``backend``, config values over the size budget.
  Messages never repeat a URL's user information.

Left to others: reading Secrets (``reconcile.refs``), reaching the git remote, checking that
prerequisite Stacks exist, checking ``repoDir`` inside the checkout
(``reconcile.source.program_dir``), and checking ``stack`` against the operator's default
backend when ``backend`` is unset (``check_stack_for_backend``).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

MIN_RESYNC_SECONDS: Final = 60
"""Floor of ``resyncFrequencySeconds``: 0, unset and 1-59 all mean 60 (as PKO does)."""

DEFAULT_RETRY_MAX_BACKOFF_SECONDS: Final = 86400
"""Default cap on the delay between retries of a failed update (24 h, as PKO v2)."""

MAX_CONFIG_VALUE_BYTES: Final = 64 * 1024
"""Largest ``config`` value (UTF-8 bytes, JSON-encoded if not a string) a Stack may set.

Config travels through the Stack object (etcd limits it to about 1.5 MiB) and reaches the
program through the language host, which passes all of a stack's config, secret values
included, in one environment variable (``PULUMI_CONFIG``): Linux refuses a variable over
128 KiB ("argument list too long"). Larger data belongs in the repository.
"""

MAX_CONFIG_TOTAL_BYTES: Final = 96 * 1024
"""Largest sum of the sizes of every ``config`` key and value of one Stack (UTF-8 bytes).

Below the 128 KiB of ``PULUMI_CONFIG`` (see ``MAX_CONFIG_VALUE_BYTES``), leaving room for
the project prefix of each key, JSON quoting and ``secretsRef`` values.
"""

DIY_ORGANIZATION: Final = "organization"
"""The only organisation a self-managed (DIY) backend knows: ``organization/project/stack``."""

SECRETS_PROVIDER_KINDS: Final = ("awskms", "azurekeyvault", "gcpkms", "hashivault")
"""Secrets providers given as ``<kind>://<key>`` URLs (besides ``default`` and ``passphrase``).

The kinds ``pulumi stack init --secrets-provider`` accepts.
"""

_SUPPORTED: Final = frozenset(
    {
        "stack",
        "backend",
        "projectRepo",
        "commit",
        "branch",
        "repoDir",
        "gitAuth",
        "config",
        "secretsRef",
        "envRefs",
        "secretsProvider",
        "refresh",
        "expectNoRefreshChanges",
        "preview",
        "targets",
        "useLocalStackOnly",
        "destroyOnFinalize",
        "prerequisites",
        "resyncFrequencySeconds",
        "continueResyncOnCommitMatch",
        "retryOnUpdateConflict",
        "retryMaxBackoffDurationSeconds",
        "suspend",
        "timeoutSeconds",
    }
)

# Deprecated PKO fields → what to use instead.
_DEPRECATED: Final = MappingProxyType(
    {
        "accessTokenSecret": "envRefs.PULUMI_ACCESS_TOKEN with type: Secret",
        "envs": "envRefs (one entry per variable)",
        "envSecrets": "envRefs with type: Secret (one entry per variable)",
        "secrets": "secretsRef with type: Secret (plaintext secrets in a Stack are refused)",
        "gitAuthSecret": "gitAuth",
    }
)

_NOT_YET: Final = frozenset({"fluxSource", "programRef"})

SPEC_FIELDS: Final = _SUPPORTED | _DEPRECATED.keys() | _NOT_YET
"""Every spec field the parser knows (supported, deprecated, not yet supported).

The CRD declares exactly these, so that none is pruned silently.
"""

_STACK_NAME = re.compile(r"(?:[A-Za-z0-9_.][A-Za-z0-9_.-]*/){0,2}[A-Za-z0-9_.][A-Za-z0-9_.-]*")
# The CRD's pattern asks for a full SHA (40 or 64 hex digits); the parser only insists on hex,
# which is all that safety needs (the value reaches git's command line).
_COMMIT = re.compile(r"[0-9a-fA-F]{1,64}")
# A simplified `git check-ref-format --branch`: no control characters, spaces or ~^:?*[\,
# no "..", no "@{", does not start with "-" or "/" (it is passed to git on a command line).
_BRANCH = re.compile(r"(?!-)(?!/)(?!.*\.\.)(?!.*@\{)(?!.*//)[^\x00-\x20\x7f~^:?*\[\\]+(?<![/.])")
_REMOTE_HELPER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")
_URL_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
# git's scp-like syntax: [user@]host:path, with the ":" before any "/" (else it is a path).
_SCP_LIKE = re.compile(r"(?:(?P<user>[^@/:]*)@)?(?P<host>\[[^\]/]*\]|[^@/:\[\]]*):(?P<path>.*)")
_PORT = re.compile(r"[0-9]{1,5}")
_GIT_SCHEMES: Final = ("https", "http", "ssh", "git")
_USE_GIT_URL: Final = (
    "use https://host/path, ssh://[user@]host/path, git://host/path or user@host:path"
)
_DIY_SCHEMES: Final = ("file", "s3", "azblob", "gs")
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")

_DURATION_PART = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<unit>[^0-9.]+)")
_DURATION_UNITS: Final = MappingProxyType(
    {
        "ns": 1e-9,
        "us": 1e-6,
        "\u00b5s": 1e-6,  # Go accepts both the micro sign
        "\u03bcs": 1e-6,  # and the Greek small letter mu
        "ms": 1e-3,
        "s": 1.0,
        "m": 60.0,
        "h": 3600.0,
    }
)


class SpecError(ValueError):
    """A Stack spec the operator refuses.

    ``str(err)`` is ``"<path>: <problem and fix>"``; ``path`` and ``problem`` hold the parts.
    Terminal: retrying does not help until the spec changes.
    """

    def __init__(self, path: str, problem: str) -> None:
        """Refuse the field at ``path`` (``spec.envRefs[HOME].type``) because of ``problem``."""
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


# -- values -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """One key of a Secret in the Stack's own namespace."""

    name: str
    key: str


@dataclass(frozen=True, slots=True, repr=False)
class ResourceRef:
    """Where a value comes from: exactly one of a Secret key or a literal.

    ``repr`` masks literal values (they are often credentials).
    """

    secret: SecretKeyRef | None = None
    literal: str | None = None

    def __post_init__(self) -> None:
        """Enforce "exactly one source"."""
        if (self.secret is None) == (self.literal is None):
            msg = "a ResourceRef holds exactly one of secret or literal"
            raise ValueError(msg)

    def __repr__(self) -> str:
        """Show the Secret reference, never a literal value."""
        if self.secret is not None:
            return f"ResourceRef(secret={self.secret!r})"
        return "ResourceRef(literal='***')"


@dataclass(frozen=True, slots=True, kw_only=True)
class GitAuth:
    """Credentials for the git remote, reduced to the one method PKO would use.

    When a spec sets several methods the precedence is ssh > token > basic (as PKO's
    ``resolveGitAuth``); only the winner's refs are kept. ``ssh_password`` is optional;
    ``username`` and ``password`` come together.
    """

    access_token: ResourceRef | None = None
    ssh_private_key: ResourceRef | None = None
    ssh_password: ResourceRef | None = None
    username: ResourceRef | None = None
    password: ResourceRef | None = None

    def __post_init__(self) -> None:
        """Enforce "exactly one complete method"."""
        ssh = self.ssh_private_key is not None
        token = self.access_token is not None
        basic = self.username is not None and self.password is not None
        partial = (self.username is None) != (self.password is None)
        if ssh + token + basic != 1 or partial or (self.ssh_password is not None and not ssh):
            msg = (
                "GitAuth holds exactly one method: ssh key (+ password), token, or user + password"
            )
            raise ValueError(msg)

    @property
    def method(self) -> Literal["ssh", "token", "basic"]:
        """Which method these credentials use."""
        if self.ssh_private_key is not None:
            return "ssh"
        if self.access_token is not None:
            return "token"
        return "basic"

    def refs(self) -> tuple[ResourceRef, ...]:
        """Every ref these credentials hold."""
        candidates = (
            self.access_token,
            self.ssh_private_key,
            self.ssh_password,
            self.username,
            self.password,
        )
        return tuple(ref for ref in candidates if ref is not None)


@dataclass(frozen=True, slots=True)
class Prerequisite:
    """A Stack in the same namespace that must be Ready, optionally recently successful."""

    name: str
    succeeded_within: float | None = None
    """Seconds: the prerequisite's last success may be at most this old (None: any age)."""


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    """A validated Stack spec (see ``parse_spec``).

    Mappings are read-only copies. ``resync_frequency_seconds`` is the effective period
    (at least 60), ``retry_max_backoff_duration_seconds`` the effective cap (default 86400),
    ``timeout_seconds`` the per-run deadline the spec asks for (None: the operator's default).
    """

    stack: str
    backend: str | None = None
    project_repo: str | None = None
    commit: str | None = None
    branch: str | None = None
    repo_dir: str | None = None
    git_auth: GitAuth | None = None
    config: Mapping[str, str] = field(default_factory=_empty, hash=False)
    secrets_ref: Mapping[str, ResourceRef] = field(default_factory=_empty, hash=False)
    env_refs: Mapping[str, ResourceRef] = field(default_factory=_empty, hash=False)
    secrets_provider: str | None = None
    refresh: bool = False
    expect_no_refresh_changes: bool = False
    preview: bool = False
    use_local_stack_only: bool = False
    destroy_on_finalize: bool = False
    continue_resync_on_commit_match: bool = False
    retry_on_update_conflict: bool = False
    suspend: bool = False
    targets: tuple[str, ...] = ()
    prerequisites: tuple[Prerequisite, ...] = ()
    resync_frequency_seconds: int = MIN_RESYNC_SECONDS
    retry_max_backoff_duration_seconds: int = DEFAULT_RETRY_MAX_BACKOFF_SECONDS
    timeout_seconds: int | None = None
    """Deadline of one run in seconds, overriding the operator's default (None: the default)."""

    def __post_init__(self) -> None:
        """Keep the mappings read-only even when a caller passes plain dicts."""
        for name in ("config", "secrets_ref", "env_refs"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def tracks_branch(self) -> bool:
        """True when the Stack follows a branch (polled every resync), not a pinned commit."""
        return self.branch is not None


# -- entry points -----------------------------------------------------------------------


def parse_spec(spec: Mapping[str, Any], namespace: str) -> StackSpec:
    """Validate ``spec`` of a Stack in ``namespace`` and return its typed form.

    Raises:
        SpecError: the spec is invalid or asks for something this operator refuses.
    """
    root = _object(spec, _SPEC, SPEC_FIELDS)
    _refuse_unsupported(root)
    repo, commit, branch = _source(root)
    config = _config(root)
    secrets_ref = _refs(root, "secretsRef", namespace, _config_key)
    _no_overlap(config, secrets_ref)
    stack, backend = _stack_and_backend(root)
    return StackSpec(
        stack=stack,
        backend=backend,
        project_repo=repo,
        commit=commit,
        branch=branch,
        repo_dir=_repo_dir(root),
        git_auth=_git_auth(root.get("gitAuth"), _SPEC / "gitAuth", namespace),
        config=config,
        secrets_ref=secrets_ref,
        env_refs=_refs(root, "envRefs", namespace, _env_name),
        secrets_provider=_secrets_provider(root),
        targets=_strings(root, _SPEC, "targets"),
        prerequisites=_prerequisites(root),
        resync_frequency_seconds=_resync_frequency(root),
        retry_max_backoff_duration_seconds=_retry_max_backoff(root),
        timeout_seconds=_timeout(root),
        **_flags(root),
    )


def referenced_secrets(spec: StackSpec) -> frozenset[str]:
    """Names of the Secrets (in the Stack's namespace) that a run of ``spec`` reads.

    Every ``type: Secret`` ref of ``envRefs``, ``secretsRef`` and ``gitAuth`` (the method that
    wins PKO's precedence; the others are never read). ``config`` holds values, not refs.
    """
    refs = [*spec.secrets_ref.values(), *spec.env_refs.values()]
    if spec.git_auth is not None:
        refs.extend(spec.git_auth.refs())
    return frozenset(ref.secret.name for ref in refs if ref.secret is not None)


def check_stack_for_backend(stack: str, backend: str | None) -> str | None:
    """Why ``stack`` cannot work on ``backend`` (a message naming ``spec.stack``), or None.

    Self-managed (DIY) backends (``file://``, ``s3://``, ``azblob://``, ``gs://`` or a local
    path) know one organisation, ``organization``: ``org/stack`` and ``org/project/stack``
    with any other ``org`` fail in the Pulumi CLI. ``backend`` is the effective backend:
    ``spec.backend``, else the operator's default; None (the CLI's default, Pulumi Cloud)
    accepts any organisation. The message names the backend's kind, never its URL.
    """
    kind = _diy_kind(backend)
    parts = stack.split("/")
    if kind is None or len(parts) == 1 or parts[0] == DIY_ORGANIZATION:
        return None
    name = "/".join([DIY_ORGANIZATION, *parts[1:]])
    return (
        f"{_SPEC / 'stack'}: organization {parts[0]!r} does not exist on a self-managed"
        f" {kind} backend, whose only organization is {DIY_ORGANIZATION!r}: use {name!r}"
        f" or {parts[-1]!r}, or a Pulumi Cloud backend"
    )


def _diy_kind(backend: str | None) -> str | None:
    """``"file://"`` etc. when ``backend`` is a self-managed backend, else None."""
    if backend is None:
        return None
    scheme = _URL_SCHEME.match(backend)
    if scheme is None:
        # No scheme: the CLI reads a path (``pulumi login ./state``) as a local backend.
        return "local-path" if backend.startswith(("/", ".", "~")) else None
    name = scheme["scheme"].lower()
    return f"{name}://" if name in _DIY_SCHEMES else None


def parse_go_duration(text: str) -> float:
    """Seconds in a Go ``time.ParseDuration`` string (``1h30m``, ``1.5h``, ``300ms``, ``-2s``).

    Raises:
        ValueError: ``text`` is not a Go duration.
    """
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    if not body:
        msg = f"invalid duration {text!r}"
        raise ValueError(msg)
    total, pos = 0.0, 0
    while pos < len(body):
        seconds, pos = _duration_part(text, body, pos)
        total += seconds
    return sign * total


def _duration_part(text: str, body: str, pos: int) -> tuple[float, int]:
    """One ``<number><unit>`` of ``body`` at ``pos``: its seconds and where the next begins."""
    part = _DURATION_PART.match(body, pos)
    if part is None or not (part["int"] or part["frac"]):
        msg = f"invalid duration {text!r}: expected a number at {body[pos:]!r}"
        raise ValueError(msg)
    unit = _DURATION_UNITS.get(part["unit"])
    if unit is None:
        msg = f"invalid duration {text!r}: unknown unit {part['unit']!r} (use ns, us, ms, s, m, h)"
        raise ValueError(msg)
    return float(f"{part['int'] or '0'}.{part['frac'] or '0'}") * unit, part.end()


# -- field paths ------------------------------------------------------------------------


class _Path(str):
    """A field path for error messages, built like a ``PurePath``.

    ``_SPEC / "envRefs"`` is ``spec.envRefs``; ``.entry("HOME")`` then adds ``[HOME]``.
    """

    __slots__ = ()

    def __truediv__(self, name: str) -> _Path:
        return _Path(f"{self}.{name}")

    def entry(self, key: object) -> _Path:
        """The path of a map entry or list item."""
        return _Path(f"{self}[{key}]")


_SPEC: Final = _Path("spec")

_KeyCheck: TypeAlias = Callable[[str, _Path], str]
"""Validates one key of the map at a path and returns it."""


# -- top-level sections -----------------------------------------------------------------


def _refuse_unsupported(root: Mapping[str, Any]) -> None:
    for name, replacement in _DEPRECATED.items():
        if _is_set(root.get(name)):
            problem = f"deprecated Pulumi Kubernetes Operator field, refused: use {replacement}"
            raise SpecError(_SPEC / name, problem)
    for name in sorted(_NOT_YET):
        if _is_set(root.get(name)):
            problem = "not supported yet: use projectRepo with a commit or a branch"
            raise SpecError(_SPEC / name, problem)


def _source(root: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    repo = _string(root, _SPEC, "projectRepo")
    commit = _string(root, _SPEC, "commit")
    branch = _string(root, _SPEC, "branch")
    if repo is None:
        problem = "a program source is required: set projectRepo with a commit or a branch"
        raise SpecError(_SPEC / "projectRepo", problem)
    if commit is not None and branch is not None:
        problem = "commit and branch are mutually exclusive: set only one of them"
        raise SpecError(_SPEC / "branch", problem)
    _check_repo_url(repo)
    if commit is not None:
        return repo, _commit(commit), None
    if branch is not None:
        return repo, None, _branch(branch)
    problem = "projectRepo requires a commit or a branch: set exactly one of them"
    raise SpecError(_SPEC / "projectRepo", problem)


def _check_repo_url(repo: str) -> None:
    """Refuse a ``projectRepo`` git would reject, could misuse, or that holds credentials.

    The URL reaches git's command line (no option look-alikes, no remote helpers: "ext::sh
    -c ..." runs commands) and the operator's messages. Problems never quote the URL: it may
    hold credentials.
    """
    problem: str | None = None
    url = _URL_SCHEME.fullmatch(repo)
    if repo.startswith("-") or _CONTROL_OR_SPACE.search(repo):
        problem = f"not a git URL (no spaces, no leading -): {_USE_GIT_URL}"
    elif _REMOTE_HELPER.match(repo):
        problem = "git remote-helper URLs (<transport>::<address>) are refused: use https://"
    elif url is not None:
        problem = _url_problem(url["scheme"], url["rest"])
    else:
        problem = _scp_problem(repo)
    if problem is not None:
        raise SpecError(_SPEC / "projectRepo", problem)


def _url_problem(scheme: str, rest: str) -> str | None:
    """What is wrong with ``<scheme>://<rest>`` as a git remote, or None."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, hostport = authority.rpartition("@")
    return (
        _scheme_problem(scheme)
        or (_userinfo_problem(scheme, userinfo) if at else None)
        or _host_problem(scheme, userinfo, hostport)
    )


def _scheme_problem(scheme: str) -> str | None:
    if scheme.lower() == "file":
        return (
            "file:// is refused (it would read the operator's own disk, such as another"
            f" Stack's checkout): serve the repository over git; {_USE_GIT_URL}"
        )
    if scheme.lower() in _GIT_SCHEMES and scheme not in _GIT_SCHEMES:
        return f"git reads URL schemes in lower case only: write {scheme.lower() + '://'!r}"
    if scheme not in _GIT_SCHEMES:
        return f"unsupported scheme {scheme + '://'!r}: {_USE_GIT_URL}"
    return None


def _userinfo_problem(scheme: str, userinfo: str) -> str | None:
    """Credentials never go in a URL; only ssh:// takes a user name (not a secret)."""
    if scheme in {"http", "https"}:
        return (
            "credentials in the URL are refused (they would show in messages, Events and"
            " git's configuration): remove user@ from projectRepo and set spec.gitAuth"
            " (accessToken or basicAuth from a Secret)"
        )
    if scheme == "git":
        return "git:// takes no user name: remove user@ from projectRepo"
    if not userinfo:
        return "empty user name before '@': name the user (ssh://git@host/path) or remove the @"
    if ":" in userinfo:
        return (
            "a password in an ssh:// URL is refused: remove it and set"
            " spec.gitAuth.sshAuth (a private key from a Secret)"
        )
    return None


def _host_problem(scheme: str, user: str, hostport: str) -> str | None:
    """What is wrong with the user and ``host[:port]`` of a git URL, or None."""
    host, port = hostport, ""
    if hostport.startswith("["):
        host, bracket, after = hostport.partition("]")
        host, port = host + bracket, after.removeprefix(":")
        if not bracket or (after and not after.startswith(":")):
            return f"malformed IPv6 host (use [address] or [address]:port): {_USE_GIT_URL}"
    elif ":" in hostport:
        host, _, port = hostport.partition(":")
    if not host.strip("[]"):
        return f"the URL has no host: {_USE_GIT_URL}"
    if _is_option(host) or _is_option(user):
        return "a host or user name starting with - is refused (git would take it for an option)"
    if port and (not _PORT.fullmatch(port) or int(port) > 65535):
        return f"the port of a {scheme}:// URL must be a number from 0 to 65535"
    return None


def _is_option(name: str) -> bool:
    """True if git could pass ``name`` (percent-decoded, as git does) to ssh as an option."""
    return urllib.parse.unquote(name).startswith("-")


def _scp_problem(repo: str) -> str | None:
    """What is wrong with a remote without ``://``: it must be scp-like ``user@host:path``."""
    scp = _SCP_LIKE.fullmatch(repo)
    if scp is None:
        return (
            "local paths are refused (they would read the operator's own disk, such as"
            f" another Stack's checkout): {_USE_GIT_URL}"
        )
    if scp["host"].lower() in {*_GIT_SCHEMES, "file"}:
        return f"{scp['host'] + ':'!r} is not a scheme without '//': {_USE_GIT_URL}"
    if scp["user"] == "":
        return "empty user name before '@': name the user (git@host:path) or remove the @"
    if not scp["path"]:
        return "user@host:path needs a repository path after the ':'"
    return _host_problem("ssh", scp["user"] or "", scp["host"])


def _commit(commit: str) -> str:
    if not _COMMIT.fullmatch(commit):
        problem = "must be a commit SHA (40 hex digits, as git rev-parse <rev> prints)"
        raise SpecError(_SPEC / "commit", problem)
    return commit.lower()


def _branch(branch: str) -> str:
    name = branch.removeprefix("refs/heads/")
    if name.startswith("refs/"):
        problem = "only branches can be tracked (main or refs/heads/main): pin tags with commit"
        raise SpecError(_SPEC / "branch", problem)
    if not _BRANCH.fullmatch(name) or name.endswith(".lock"):
        raise SpecError(_SPEC / "branch", f"{branch!r} is not a valid git branch name")
    return name


def _stack_and_backend(root: Mapping[str, Any]) -> tuple[str, str | None]:
    stack = _stack_name(root)
    backend = _string(root, _SPEC, "backend")
    message = check_stack_for_backend(stack, backend)
    if message is not None:
        raise SpecError(_SPEC / "stack", message.removeprefix(f"{_SPEC / 'stack'}: "))
    return stack, backend


def _stack_name(root: Mapping[str, Any]) -> str:
    stack = _required_string(root, _SPEC, "stack")
    if not _STACK_NAME.fullmatch(stack):
        problem = (
            f"{stack!r} is not a stack name: use stack or org/project/stack"
            " (letters, digits, -, _ and .; no leading -)"
        )
        raise SpecError(_SPEC / "stack", problem)
    return stack


def _secrets_provider(root: Mapping[str, Any]) -> str | None:
    provider = _string(root, _SPEC, "secretsProvider")
    if provider is None or provider in {"default", "passphrase"}:
        return provider
    kind, sep, key = provider.partition("://")
    if not (sep and kind in SECRETS_PROVIDER_KINDS and key):
        urls = ", ".join(f"{k}://..." for k in SECRETS_PROVIDER_KINDS)
        problem = f"unknown secrets provider: use default, passphrase, {urls}"
        raise SpecError(_SPEC / "secretsProvider", problem)
    return provider


def _repo_dir(root: Mapping[str, Any]) -> str | None:
    raw = _string(root, _SPEC, "repoDir")
    if raw is None:
        return None
    if raw.startswith("/"):
        problem = "must be relative to the repository root: remove the leading /"
        raise SpecError(_SPEC / "repoDir", problem)
    path = PurePosixPath(raw)
    if ".." in path.parts or "\x00" in raw:
        problem = "must stay inside the repository: remove the .. components"
        raise SpecError(_SPEC / "repoDir", problem)
    return None if str(path) == "." else str(path)


def _config(root: Mapping[str, Any]) -> Mapping[str, str]:
    path = _SPEC / "config"
    entries = _map(root, _SPEC, "config")
    config = {_config_key(k, path): _config_value(v, path.entry(k)) for k, v in entries.items()}
    total = sum(len(k.encode()) + len(v.encode()) for k, v in config.items())
    if total > MAX_CONFIG_TOTAL_BYTES:
        problem = (
            f"keys and values total {total} bytes, more than {MAX_CONFIG_TOTAL_BYTES}:"
            " move large data into the repository and read it from the program"
        )
        raise SpecError(path, problem)
    return config


def _config_value(value: object, path: _Path) -> str:
    if value is None:
        raise SpecError(path, "null is not a config value: set a value or remove the key")
    # Structured values (PKO v2 accepts any JSON) travel JSON-encoded.
    text = value if isinstance(value, str) else json.dumps(_thaw(value), separators=(",", ":"))
    size = len(text.encode())
    if size > MAX_CONFIG_VALUE_BYTES:
        problem = (
            f"the value is {size} bytes, more than {MAX_CONFIG_VALUE_BYTES}:"
            " move large data into the repository and read it from the program"
        )
        raise SpecError(path, problem)
    return text


def _config_key(key: str, path: _Path) -> str:
    """A key ``pulumi config set`` accepts: ``name`` or ``namespace:name``, no other ``:``."""
    if not key:
        raise SpecError(path.entry(key), "config keys must not be empty")
    namespace, colon, name = key.partition(":")
    if ":" in name:
        old = name.partition(":")
        fix = f"{namespace}:{old[2]}" if old[0] == "config" else "namespace:name"
        problem = f"not a Pulumi config key (at most one ':'): use {fix}"
        raise SpecError(path.entry(key), problem)
    if colon and not (namespace and name):
        problem = "not a Pulumi config key (empty namespace or name): use name or namespace:name"
        raise SpecError(path.entry(key), problem)
    return key


def _env_name(key: str, path: _Path) -> str:
    if not _ENV_NAME.fullmatch(key):
        problem = "not an environment variable name: use letters, digits and _ (no leading digit)"
        raise SpecError(path.entry(key), problem)
    return key


def _no_overlap(config: Mapping[str, str], secrets_ref: Mapping[str, ResourceRef]) -> None:
    for key in secrets_ref:
        if key in config:
            problem = "also set in spec.config: a key is either plain or secret, remove one"
            raise SpecError((_SPEC / "secretsRef").entry(key), problem)


def _prerequisites(root: Mapping[str, Any]) -> tuple[Prerequisite, ...]:
    path = _SPEC / "prerequisites"
    items = _list(root, _SPEC, "prerequisites")
    result = tuple(_prerequisite(item, path.entry(i)) for i, item in enumerate(items))
    names = [p.name for p in result]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError(path.entry(i) / "name", f"{name!r} is listed twice: remove one")
    return result


def _prerequisite(raw: object, path: _Path) -> Prerequisite:
    item = _object(raw, path, frozenset({"name", "requirement"}))
    name = _required_string(item, path, "name")
    if not _is_set(item.get("requirement")):
        return Prerequisite(name)
    req_path = path / "requirement"
    req = _object(item["requirement"], req_path, frozenset({"succeededWithinDuration"}))
    text = _string(req, req_path, "succeededWithinDuration")
    if text is None:
        return Prerequisite(name)
    return Prerequisite(name, _positive_duration(text, req_path / "succeededWithinDuration"))


def _positive_duration(text: str, path: _Path) -> float:
    try:
        seconds = parse_go_duration(text)
    except ValueError as err:
        problem = f'{err}: use a Go duration such as "90s", "30m" or "1h30m"'
        raise SpecError(path, problem) from None
    if seconds <= 0:
        raise SpecError(path, f'{text!r} is not a positive duration: use e.g. "30m"')
    return seconds


def _resync_frequency(root: Mapping[str, Any]) -> int:
    seconds = _int(root, _SPEC, "resyncFrequencySeconds")
    if seconds is not None and seconds < 0:
        problem = "must not be negative (0 or unset means 60 seconds)"
        raise SpecError(_SPEC / "resyncFrequencySeconds", problem)
    # As PKO: values below 60, including 0 and unset, mean 60.
    return max(seconds or 0, MIN_RESYNC_SECONDS)


def _retry_max_backoff(root: Mapping[str, Any]) -> int:
    seconds = _int(root, _SPEC, "retryMaxBackoffDurationSeconds")
    if seconds is None:
        return DEFAULT_RETRY_MAX_BACKOFF_SECONDS
    if seconds < 1:
        raise SpecError(_SPEC / "retryMaxBackoffDurationSeconds", "must be at least 1 (seconds)")
    return seconds


def _timeout(root: Mapping[str, Any]) -> int | None:
    seconds = _int(root, _SPEC, "timeoutSeconds")
    if seconds is not None and seconds < 1:
        problem = "must be at least 1 (seconds): unset it to use the operator's default"
        raise SpecError(_SPEC / "timeoutSeconds", problem)
    return seconds


_FLAGS: Final = MappingProxyType(
    {
        "refresh": "refresh",
        "expect_no_refresh_changes": "expectNoRefreshChanges",
        "preview": "preview",
        "use_local_stack_only": "useLocalStackOnly",
        "destroy_on_finalize": "destroyOnFinalize",
        "continue_resync_on_commit_match": "continueResyncOnCommitMatch",
        "retry_on_update_conflict": "retryOnUpdateConflict",
        "suspend": "suspend",
    }
)


def _flags(root: Mapping[str, Any]) -> dict[str, bool]:
    return {attr: _bool(root, _SPEC, key) for attr, key in _FLAGS.items()}


# -- git auth and refs ------------------------------------------------------------------

_REF_FIELDS: Final = frozenset({"type", "secret", "literal", "env", "filesystem"})
_SELECTORS: Final = MappingProxyType(
    {"Secret": "secret", "Literal": "literal", "Env": "env", "FS": "filesystem"}
)
_REFUSED: Final = MappingProxyType(
    {
        "Env": "type Env reads an environment variable of the operator's own process",
        "FS": "type FS reads a file from the operator's own filesystem",
    }
)


def _git_auth(raw: object, path: _Path, namespace: str) -> GitAuth | None:
    if not _is_set(raw):
        return None
    auth = _object(raw, path, frozenset({"accessToken", "sshAuth", "basicAuth"}))
    # Every method given is validated; the winner follows PKO's precedence ssh > token > basic.
    ssh = _ssh_auth(auth.get("sshAuth"), path / "sshAuth", namespace)
    token = _optional_ref(auth, path, "accessToken", namespace)
    basic = _basic_auth(auth.get("basicAuth"), path / "basicAuth", namespace)
    if ssh is not None:
        return ssh
    if token is not None:
        return GitAuth(access_token=token)
    return basic


def _ssh_auth(raw: object, path: _Path, namespace: str) -> GitAuth | None:
    if not _is_set(raw):
        return None
    ssh = _object(raw, path, frozenset({"sshPrivateKey", "password"}))
    key = _required_ref(ssh, path, "sshPrivateKey", namespace)
    return GitAuth(
        ssh_private_key=key, ssh_password=_optional_ref(ssh, path, "password", namespace)
    )


def _basic_auth(raw: object, path: _Path, namespace: str) -> GitAuth | None:
    if not _is_set(raw):
        return None
    basic = _object(raw, path, frozenset({"userName", "password"}))
    username = _required_ref(basic, path, "userName", namespace)
    return GitAuth(username=username, password=_required_ref(basic, path, "password", namespace))


def _refs(
    root: Mapping[str, Any], name: str, namespace: str, check_key: _KeyCheck
) -> Mapping[str, ResourceRef]:
    path = _SPEC / name
    entries = _map(root, _SPEC, name)
    return {check_key(k, path): _ref(v, path.entry(k), namespace) for k, v in entries.items()}


def _required_ref(obj: Mapping[str, Any], path: _Path, key: str, namespace: str) -> ResourceRef:
    ref = _optional_ref(obj, path, key, namespace)
    if ref is None:
        raise SpecError(path / key, "is required: set a ResourceRef (type: Secret)")
    return ref


def _optional_ref(
    obj: Mapping[str, Any], path: _Path, key: str, namespace: str
) -> ResourceRef | None:
    raw = obj.get(key)
    return _ref(raw, path / key, namespace) if _is_set(raw) else None


def _ref(raw: object, path: _Path, namespace: str) -> ResourceRef:
    ref = _object(raw, path, _REF_FIELDS)
    kind = _required_string(ref, path, "type")
    if kind in _REFUSED:
        problem = f"{_REFUSED[kind]} and is refused: put the value in a Secret, use type: Secret"
        raise SpecError(path / "type", problem)
    if kind not in _SELECTORS:
        raise SpecError(path / "type", f"unknown type {kind!r}: use Secret or Literal")
    for other in sorted(set(_SELECTORS.values()) - {_SELECTORS[kind]}):
        if _is_set(ref.get(other)):
            raise SpecError(path / other, f"does not go with type {kind}: remove it")
    if kind == "Literal":
        return ResourceRef(literal=_literal(ref.get("literal"), path / "literal"))
    return ResourceRef(secret=_secret_key_ref(ref.get("secret"), path / "secret", namespace))


def _literal(raw: object, path: _Path) -> str:
    if raw is None:
        raise SpecError(path, "is required for type Literal: set literal.value")
    literal = _object(raw, path, frozenset({"value"}))
    value = literal.get("value")
    if not isinstance(value, str):
        raise SpecError(path / "value", f"must be a string, not {_kind(value)}")
    return value


def _secret_key_ref(raw: object, path: _Path, namespace: str) -> SecretKeyRef:
    if raw is None:
        raise SpecError(path, "is required for type Secret: set secret.name and secret.key")
    secret = _object(raw, path, frozenset({"name", "key", "namespace"}))
    name = _required_string(secret, path, "name")
    key = _required_string(secret, path, "key")
    other = _string(secret, path, "namespace")
    if other is not None and other != namespace:
        problem = (
            f"cross-namespace references are refused: copy the Secret into namespace"
            f" {namespace!r} and remove secret.namespace"
        )
        raise SpecError(path / "namespace", problem)
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise SpecError(path / "name", f"{name!r} is not a Secret name (a DNS subdomain)")
    if len(key) > 253 or not _SECRET_KEY.fullmatch(key):
        raise SpecError(path / "key", f"{key!r} is not a Secret key (letters, digits, -, _, .)")
    return SecretKeyRef(name, key)


# -- readers: obj is the mapping at path; errors name path / key -------------------------


def _object(value: object, path: _Path, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object, not {_kind(value)}")
    for key in value:
        if key not in allowed:
            raise SpecError(path / str(key), "unknown field: remove it (check its spelling)")
    return value


def _map(obj: Mapping[str, Any], path: _Path, key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path / key, f"must be an object, not {_kind(value)}")
    return value


def _list(obj: Mapping[str, Any], path: _Path, key: str) -> Sequence[object]:
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise SpecError(path / key, f"must be a list, not {_kind(value)}")
    return value


def _strings(obj: Mapping[str, Any], path: _Path, key: str) -> tuple[str, ...]:
    items = _list(obj, path, key)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise SpecError((path / key).entry(i), f"must be a non-empty string, not {item!r}")
    return tuple(str(item) for item in items)


def _string(obj: Mapping[str, Any], path: _Path, key: str) -> str | None:
    """``obj[key]`` as a string; absent, null and "" are None (Go's omitempty)."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(path / key, f"must be a string, not {_kind(value)}")
    return value or None


def _required_string(obj: Mapping[str, Any], path: _Path, key: str) -> str:
    value = _string(obj, path, key)
    if value is None:
        raise SpecError(path / key, "is required and must not be empty")
    return value


def _bool(obj: Mapping[str, Any], path: _Path, key: str) -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SpecError(path / key, f"must be true or false, not {_kind(value)}")
    return value


def _int(obj: Mapping[str, Any], path: _Path, key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path / key, f"must be an integer, not {_kind(value)}")
    return value


def _is_set(value: object) -> bool:
    """Go's omitempty: None, "", empty lists and empty objects mean unset."""
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return value is not None


def _thaw(value: object) -> object:
    """A JSON-serialisable copy of a value that may hold read-only mappings and tuples."""
    if isinstance(value, Mapping):
        return {str(k): _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


_KINDS: Final = (
    (bool, "a boolean"),  # before int: bool is an int
    (int | float, "a number"),
    (str, "a string"),
    (Mapping, "an object"),
    (list | tuple, "a list"),
)


def _kind(value: object) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)
