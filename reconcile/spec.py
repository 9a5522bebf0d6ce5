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

Left to others: reading Secrets (``reconcile.refs``), reaching the git remote, and checking
that prerequisite Stacks exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

MIN_RESYNC_SECONDS: Final = 60
"""Floor of ``resyncFrequencySeconds``: 0, unset and 1-59 all mean 60 (as PKO does)."""

DEFAULT_RETRY_MAX_BACKOFF_SECONDS: Final = 86400
"""Default cap on the delay between retries of a failed update (24 h, as PKO v2)."""

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
    (at least 60), ``retry_max_backoff_duration_seconds`` the effective cap (default 86400).
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
    return StackSpec(
        stack=_stack_name(root),
        backend=_string(root, _SPEC, "backend"),
        project_repo=repo,
        commit=commit,
        branch=branch,
        repo_dir=_repo_dir(root),
        git_auth=_git_auth(root.get("gitAuth"), _SPEC / "gitAuth", namespace),
        config=config,
        secrets_ref=secrets_ref,
        env_refs=_refs(root, "envRefs", namespace, _env_name),
        secrets_provider=_string(root, _SPEC, "secretsProvider"),
        targets=_strings(root, _SPEC, "targets"),
        prerequisites=_prerequisites(root),
        resync_frequency_seconds=_resync_frequency(root),
        retry_max_backoff_duration_seconds=_retry_max_backoff(root),
        **_flags(root),
    )


def referenced_secrets(spec: StackSpec) -> frozenset[str]:
    """Names of the Secrets (in the Stack's namespace) that ``spec`` reads.

    The reconciler watches them: a change to one of them may unblock or change the Stack.
    """
    refs = [*spec.secrets_ref.values(), *spec.env_refs.values()]
    if spec.git_auth is not None:
        refs.extend(spec.git_auth.refs())
    return frozenset(ref.secret.name for ref in refs if ref.secret is not None)


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
    # The URL reaches git's command line: no option look-alikes, no remote helpers
    # ("ext::sh -c ..." runs commands).
    if repo.startswith("-") or _CONTROL_OR_SPACE.search(repo):
        problem = "not a git URL (no spaces, no leading -): use https://, ssh:// or git://"
        raise SpecError(_SPEC / "projectRepo", problem)
    if _REMOTE_HELPER.match(repo):
        problem = "git remote-helper URLs (<transport>::<address>) are refused: use https://"
        raise SpecError(_SPEC / "projectRepo", problem)


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


def _stack_name(root: Mapping[str, Any]) -> str:
    stack = _required_string(root, _SPEC, "stack")
    if not _STACK_NAME.fullmatch(stack):
        problem = (
            f"{stack!r} is not a stack name: use stack or org/project/stack"
            " (letters, digits, -, _ and .; no leading -)"
        )
        raise SpecError(_SPEC / "stack", problem)
    return stack


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
    return {_config_key(k, path): _config_value(v, path.entry(k)) for k, v in entries.items()}


def _config_value(value: object, path: _Path) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        raise SpecError(path, "null is not a config value: set a value or remove the key")
    # Structured values (PKO v2 accepts any JSON) travel JSON-encoded.
    return json.dumps(_thaw(value), separators=(",", ":"))


def _config_key(key: str, path: _Path) -> str:
    if not key:
        raise SpecError(path.entry(key), "config keys must not be empty")
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
