"""The values a parsed Stack spec is made of, and the error that refuses one.

Role: the typed, frozen result of ``reconcile.spec.parse_spec`` (``StackSpec`` and its parts)
and ``SpecError``. Nothing here reads a raw spec.

Guarantees: every value is immutable (frozen dataclasses, read-only mappings, tuples, JSON
text); each enforces its own invariant even when built by hand; ``repr`` never shows a literal
``ResourceRef`` value (they are often credentials), so a ``StackSpec`` is safe to log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias

MIN_RESYNC_SECONDS: Final = 60
"""Floor of ``resyncFrequencySeconds``: 0, unset and 1-59 all mean 60 (as PKO does)."""

DEFAULT_RETRY_MAX_BACKOFF_SECONDS: Final = 86400
"""Default cap on the delay between retries of a failed update (24 h, as PKO v2)."""

DEFAULT_SERVICE_ACCOUNT: Final = "default"
"""The ServiceAccount a run pod runs as when ``serviceAccountName`` is unset (as PKO v2)."""

SERVICE_ACCOUNT_FIELDS: Final = (
    "spec.serviceAccountName",
    "spec.workspaceTemplate.spec.serviceAccountName",
)
"""Where a Stack names its run pods' ServiceAccount: PKO v2's field, and PKO's e2e suite's."""

SecurityProfile: TypeAlias = Literal["restricted", "baseline"]
PullPolicy: TypeAlias = Literal["Always", "IfNotPresent", "Never"]
ReclaimPolicy: TypeAlias = Literal["Delete", "Retain"]
SourceKind: TypeAlias = Literal["git", "flux", "program"]

RECLAIM_POLICIES: Final[tuple[ReclaimPolicy, ...]] = ("Delete", "Retain")
"""What happens to a finished run pod (``workspaceReclaimPolicy``), default first."""

FLUX_API_VERSIONS: Final = ("source.toolkit.fluxcd.io/v1", "source.toolkit.fluxcd.io/v1beta2")
"""The Flux source API versions ``fluxSource.sourceRef.apiVersion`` may name."""

FLUX_KINDS: Final = ("GitRepository", "OCIRepository", "Bucket")
"""The Flux source kinds ``fluxSource.sourceRef.kind`` may name."""

SECURITY_PROFILES: Final[tuple[SecurityProfile, ...]] = ("restricted", "baseline")
"""The Pod Security Standards a run pod can be held to (``securityProfile``), default first."""

PULL_POLICIES: Final[tuple[PullPolicy, ...]] = ("Always", "IfNotPresent", "Never")
"""The image pull policies a run pod's ``pulumi`` container accepts."""


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


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """One key of a Secret in the Stack's own namespace."""

    name: str
    key: str


@dataclass(frozen=True, slots=True)
class ConfigMapKeyRef:
    """One key of a ConfigMap in the Stack's own namespace (``configRef``).

    ``json``: the value is JSON and is set as structured config; else it is a string.
    """

    name: str
    key: str
    json: bool = False


@dataclass(frozen=True, slots=True)
class FluxSourceRef:
    """A Flux source object in the Stack's namespace and the program's directory in it."""

    api_version: str
    kind: str
    name: str
    dir: str | None = None

    def __post_init__(self) -> None:
        """Enforce the known API versions and kinds."""
        if self.api_version not in FLUX_API_VERSIONS or self.kind not in FLUX_KINDS:
            msg = f"a Flux source is one of {FLUX_KINDS} of {FLUX_API_VERSIONS}"
            raise ValueError(msg)


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


def canonical_json(value: object) -> str:
    """``value`` as canonical JSON: sorted keys, no spaces, ASCII, finite numbers only.

    Raises:
        ValueError: ``value`` is not JSON (a NaN or infinity, a set, a non-string key...).
    """
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as err:
        raise ValueError(str(err)) from None


@dataclass(frozen=True, slots=True)
class Workspace:
    """The validated subset of PKO v2's ``workspaceTemplate`` the pod runner applies.

    ``pod_json`` holds the pod overrides (see ``reconcile.spec.workspace`` for their shape)
    as canonical JSON, so that equal overrides make equal, hashable values; one built by hand
    is re-encoded canonically. Only the parser checks the overrides' shape; this class checks
    the enums, the image, and that ``pod_json`` is a JSON object.
    """

    security_profile: SecurityProfile = "restricted"
    image: str | None = None
    image_pull_policy: PullPolicy | None = None
    pod_json: str = "{}"

    def __post_init__(self) -> None:
        """Enforce the enums and a non-blank image; keep ``pod_json`` a canonical object."""
        if self.security_profile not in SECURITY_PROFILES:
            msg = f"security_profile is one of {SECURITY_PROFILES}"
            raise ValueError(msg)
        if self.image_pull_policy is not None and self.image_pull_policy not in PULL_POLICIES:
            msg = f"image_pull_policy is None or one of {PULL_POLICIES}"
            raise ValueError(msg)
        if self.image is not None and (not self.image or any(c.isspace() for c in self.image)):
            raise ValueError("image is None or a non-empty string without whitespace")
        overrides = json.loads(self.pod_json)
        if not isinstance(overrides, dict):
            raise ValueError("pod_json is a JSON object")  # noqa: TRY004 - a bad value
        object.__setattr__(self, "pod_json", canonical_json(overrides))

    def overrides(self) -> dict[str, Any]:
        """The pod overrides as a fresh dict (changing it changes nothing here)."""
        result: dict[str, Any] = json.loads(self.pod_json)
        return result


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    """A validated Stack spec (see ``parse_spec``).

    Mappings are read-only copies. ``resync_frequency_seconds`` is the effective period
    (at least 60), ``retry_max_backoff_duration_seconds`` the effective cap (default 86400),
    ``timeout_seconds`` the per-run deadline the spec asks for (None: the operator's default).
    Exactly one program source is set: ``project_repo`` (with ``commit`` or ``branch``),
    ``flux_source`` or ``program_ref`` (see ``source_kind``).
    """

    stack: str
    backend: str | None = None
    project_repo: str | None = None
    commit: str | None = None
    branch: str | None = None
    repo_dir: str | None = None
    git_auth: GitAuth | None = None
    shallow: bool = False
    """Fetch only the commit (``--depth 1``), not its history too."""
    flux_source: FluxSourceRef | None = None
    program_ref: str | None = None
    """Name of a Program in the Stack's namespace."""
    config: Mapping[str, str] = field(default_factory=_empty, hash=False)
    config_ref: Mapping[str, ConfigMapKeyRef] = field(default_factory=_empty, hash=False)
    """Config keys read from ConfigMap keys; they win over ``config``'s."""
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
    target_dependents: bool = False
    run_program: bool = False
    """Destroy runs the program (``pulumi destroy --run-program``)."""
    environments: tuple[str, ...] = ()
    """Pulumi ESC environments the stack imports, in order (Pulumi Cloud backends only)."""
    prerequisites: tuple[Prerequisite, ...] = ()
    resync_frequency_seconds: int = MIN_RESYNC_SECONDS
    retry_max_backoff_duration_seconds: int = DEFAULT_RETRY_MAX_BACKOFF_SECONDS
    timeout_seconds: int | None = None
    """Deadline of one run in seconds, overriding the operator's default (None: the default)."""
    service_account_name: str = DEFAULT_SERVICE_ACCOUNT
    """The ServiceAccount a run pod runs as (pod runner only; the local runner ignores it)."""
    service_account_field: str = SERVICE_ACCOUNT_FIELDS[0]
    """The field that named it (one of ``SERVICE_ACCOUNT_FIELDS``), for messages about it."""
    workspace: Workspace = field(default_factory=Workspace)
    """How a run pod is built (pod runner only; the local runner ignores it)."""
    workspace_reclaim_policy: ReclaimPolicy = "Delete"
    """Whether a finished run pod is deleted or kept (pod runner only)."""

    def __post_init__(self) -> None:
        """Keep the mappings read-only even when a caller passes plain dicts."""
        if self.service_account_field not in SERVICE_ACCOUNT_FIELDS:
            msg = f"service_account_field is one of {SERVICE_ACCOUNT_FIELDS}"
            raise ValueError(msg)
        for name in ("config", "config_ref", "secrets_ref", "env_refs"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def source_kind(self) -> SourceKind:
        """Where the program comes from: a git repository, a Flux source or a Program."""
        if self.flux_source is not None:
            return "flux"
        if self.program_ref is not None:
            return "program"
        return "git"

    @property
    def tracks_branch(self) -> bool:
        """True when the Stack follows a branch (polled every resync), not a pinned commit."""
        return self.branch is not None


def referenced_config_maps(spec: StackSpec) -> frozenset[str]:
    """Names of the ConfigMaps (in the Stack's namespace) that ``configRef`` reads."""
    return frozenset(ref.name for ref in spec.config_ref.values())


def referenced_secrets(spec: StackSpec) -> frozenset[str]:
    """Names of the Secrets (in the Stack's namespace) that a run of ``spec`` reads.

    Every ``type: Secret`` ref of ``envRefs``, ``secretsRef`` and ``gitAuth`` (the method that
    wins PKO's precedence; the others are never read). ``config`` holds values, not refs.
    """
    refs = [*spec.secrets_ref.values(), *spec.env_refs.values()]
    if spec.git_auth is not None:
        refs.extend(spec.git_auth.refs())
    return frozenset(ref.secret.name for ref in refs if ref.secret is not None)
