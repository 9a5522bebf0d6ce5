"""What a run in a pod needs, as references: the run pod's identity, spec and its job.

``RunJob`` is built by the reconciler from a Stack (never with a secret value in it) and
read by ``PodRunner``; its ``document`` is the JSON the agent in the pod reads (``AgentJob``
in the agent): the source, the stack, its config, and for every value that comes from a
Secret the name of the environment variable the kubelet fills from that Secret
(``SecretEnv``). The operator never copies a secret value into a pod spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.tracing import TraceContext

WORKSPACE = "/workspace"
"""Where a run pod mounts its workspace volume (the checkout, homes, the run's files)."""
SOURCE_DIR = "source"
"""The directory of the workspace the program's source is laid out in."""
SECRET_ENV_PREFIX = "PSO_SECRET_"  # noqa: S105 - a variable name prefix
"""Names of the run container's variables that the kubelet fills from Secrets."""
GIT_ENV_PREFIX = "PSO_GIT_"
"""Names of the checkout container's variables (the git credentials) filled from Secrets."""


@dataclass(frozen=True, slots=True)
class SecretEnv:
    """One variable of the run pod that the kubelet fills from a Secret key."""

    env: str
    secret: str
    key: str


@dataclass(frozen=True, slots=True)
class Owner:
    """The object a run is for, as its run pod's owner reference names it.

    The runner knows nothing else of it: the run pod is named after ``name``, labelled
    with ``uid`` (how the runner finds its pods again) and owned by it (garbage collected
    with it).
    """

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class RunJob:
    """One run as a pod: who it runs as, where, and what it does.

    ``namespace``/``owner``/``generation``/``commit`` identify the object and the
    generation the run is for (they become the pod's name, owner, labels and
    annotations). ``document`` is the agent's job (an encoded ``JobDocument``: no secret
    values); ``secret_env`` the run container's variables the kubelet fills, ``git_env``
    the checkout container's (the git credentials, which the program never gets).
    ``security_profile``, ``image``, ``image_pull_policy`` and ``overrides`` are the
    owner's validated ``workspaceTemplate`` (``overrides`` as canonical JSON).
    ``timeout`` is the run's deadline in seconds; ``changed_at`` when the spec change this
    run is for was written (None: not a spec change). ``reclaim``: ``"Delete"`` deletes
    the run pod once its outcome is in, ``"Retain"`` keeps a finished one (its log stays
    readable) until the owner's next run or its deletion. ``trace``: where the run's CLI
    sends its spans and under which span (``TRACE_ENV``), None: nowhere.
    """

    namespace: str
    owner: Owner
    generation: int
    commit: str
    service_account: str
    document: str
    secret_env: tuple[SecretEnv, ...] = ()
    git_env: tuple[SecretEnv, ...] = ()
    security_profile: str = "restricted"
    image: str | None = None
    image_pull_policy: str | None = None
    overrides: str = "{}"
    timeout: float = 7200.0
    changed_at: datetime | None = None
    reclaim: str = "Delete"
    trace: TraceContext | None = None

    def template(self) -> dict[str, Any]:
        """The workspaceTemplate overrides, decoded (a fresh dict)."""
        decoded: dict[str, Any] = json.loads(self.overrides)
        return decoded

    def checkout_apart(self) -> bool:
        """Whether the source is checked out apart from the run, in a step of its own.

        A run pod's ``checkout`` init container, the agent runner's checkout step: needed
        when the job has git credentials (the program must never get them: a process can
        read the initial environment of another of its uid), when the owner's own init
        containers must run between the checkout and the run, or when the owner names its
        own image (whose agent may predate checking out in the run container). Otherwise
        the run checks its source out itself: one container start, one agent start and the
        kubelet's hand-over between containers less per run.
        """
        if self.git_env or self.image is not None:
            return True
        return bool(self.template().get("initContainers"))


class SecretEnvNames:
    """Hands out one pod variable per distinct Secret key (``PSO_SECRET_0``, …)."""

    def __init__(self, prefix: str = SECRET_ENV_PREFIX) -> None:
        """No variable handed out yet; names are ``prefix`` and a number."""
        self._names: dict[tuple[str, str], str] = {}
        self._prefix = prefix

    def name(self, secret: str, key: str) -> str:
        """The variable that holds ``key`` of Secret ``secret``."""
        found = self._names.get((secret, key))
        if found is None:
            found = f"{self._prefix}{len(self._names)}"
            self._names[(secret, key)] = found
        return found

    def variables(self) -> tuple[SecretEnv, ...]:
        """Every variable handed out, in order."""
        return tuple(SecretEnv(env, s, k) for (s, k), env in self._names.items())


ENV_SOURCES = "PSO_ENV_SOURCES"
"""The run container's variable that says which of its variables came from Secrets."""


@dataclass(frozen=True, slots=True)
class EnvSources:
    """Where the run container's own variables (``workspaceTemplate`` env) come from.

    ``secret``: variables with a ``secretKeyRef``; ``plain``: variables with a literal
    value or another source (ConfigMap key, field, resource); ``secret_prefixes``: the
    prefixes of ``envFrom`` Secrets (``""`` when one has none), whose keys the operator
    does not know. The agent uses it to mask only values that came from Secrets in its
    messages (``secret_names``); variables neither listed nor prefixed (the image's, the
    kubelet's ``KUBERNETES_SERVICE_HOST``) are plain.
    """

    secret: frozenset[str] = frozenset()
    plain: frozenset[str] = frozenset()
    secret_prefixes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, env: list[dict[str, Any]], env_from: list[dict[str, Any]]) -> EnvSources:
        """The sources of a container's ``env`` and ``envFrom`` (the API's camelCase)."""
        secret = {e["name"] for e in env if "secretKeyRef" in (e.get("valueFrom") or {})}
        plain = {e["name"] for e in env} - secret
        prefixes = {str(f.get("prefix") or "") for f in env_from if "secretRef" in f}
        return cls(frozenset(secret), frozenset(plain), frozenset(prefixes))

    def encode(self) -> str:
        """The variable's value (JSON)."""
        return json.dumps(
            {
                "secret": sorted(self.secret),
                "plain": sorted(self.plain),
                "secretPrefixes": sorted(self.secret_prefixes),
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str | None) -> EnvSources | None:
        """The sources from the variable's value; None when absent or unreadable."""
        try:
            raw = json.loads(text) if text else None
            if not isinstance(raw, dict):
                return None
            return cls(*(frozenset(map(str, raw.get(k) or ())) for k in _SOURCE_KEYS))
        except (ValueError, TypeError):
            return None

    def secret_names(self, environ: Mapping[str, str]) -> frozenset[str]:
        """Which of the container's variables (``environ``) came from Secrets.

        A variable with a ``secretKeyRef``; and one whose name has an ``envFrom`` Secret's
        prefix, unless an ``env`` entry set it (``env`` wins over ``envFrom``), the kubelet
        or the agent set it (``KUBERNETES_*``, ``HOSTNAME``, ``HOME``, ``PATH``, ``TMPDIR``),
        or its value cannot be a secret (``could_be_secret``).
        """
        prefixed = {
            name
            for name, value in environ.items()
            if name not in self.plain
            and not name.startswith(_POD_OWN_PREFIXES)
            and name not in _POD_OWN
            and any(name.startswith(p) for p in self.secret_prefixes)
            and could_be_secret(value)
        }
        return frozenset((environ.keys() & self.secret) | prefixed)


def could_be_secret(value: str) -> bool:
    """Whether a value of unknown source may be secret: not a flag, number or 3 characters."""
    return len(value) > 3 and value.lower() not in ("true", "false") and not value.isdigit()


_POD_OWN = frozenset({"HOSTNAME", "HOME", "PATH", "TMPDIR"})
_POD_OWN_PREFIXES = ("KUBERNETES_", "PSO_")
_SOURCE_KEYS = ("secret", "plain", "secretPrefixes")


TRACEPARENT_ENV = "PSO_TRACEPARENT"
TRACE_ENDPOINT_ENV = "PSO_OTEL_TRACES"
TRACE_VARIABLES = (TRACEPARENT_ENV, TRACE_ENDPOINT_ENV)  # a job's own: replaced per job


def trace_env(trace: TraceContext | None) -> dict[str, str]:
    """The agent's variables that carry ``trace`` (none without one)."""
    if trace is None:
        return {}
    return {TRACEPARENT_ENV: trace.traceparent, TRACE_ENDPOINT_ENV: trace.endpoint}


def trace_of(environ: Mapping[str, str]) -> TraceContext | None:
    """The ``TraceContext`` the agent's variables carry, or None."""
    parent, endpoint = environ.get(TRACEPARENT_ENV), environ.get(TRACE_ENDPOINT_ENV)
    if not parent or not endpoint:
        return None
    return TraceContext(traceparent=parent, endpoint=endpoint)
