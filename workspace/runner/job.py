"""What a run in a pod needs, as references: the run pod's identity, spec and its job.

``RunJob`` is built by the reconciler from a Stack (never with a secret value in it) and
read by ``PodRunner``; its ``document`` is the JSON the agent in the pod reads (``AgentJob``
in the agent): the source, the stack, its config, and for every value that comes from a
Secret the name of the environment variable the kubelet fills from that Secret
(``SecretEnv``). The operator never copies a secret value into a pod spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
class RunJob:
    """One Stack's run as a pod: who it runs as, where, and what it does.

    ``namespace``/``stack_name``/``stack_uid``/``generation``/``commit`` identify the Stack
    and the generation the run is for (they become the pod's owner, labels and
    annotations). ``document`` is the agent's job (JSON, no secret values); ``secret_env``
    the run container's variables the kubelet fills, ``git_env`` the checkout container's
    (the git credentials, which the program never gets). ``security_profile``, ``image``,
    ``image_pull_policy`` and ``overrides`` are the Stack's validated ``workspaceTemplate``
    (``overrides`` as canonical JSON). ``timeout`` is the run's deadline in seconds;
    ``changed_at`` when the spec change this run is for was written (None: not a spec
    change). ``reclaim`` is the Stack's ``workspaceReclaimPolicy``: ``"Delete"`` deletes
    the run pod once its outcome is in, ``"Retain"`` keeps a finished one (its log stays
    readable) until the Stack's next run or the Stack's deletion.
    """

    namespace: str
    stack_name: str
    stack_uid: str
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

    def job(self) -> dict[str, Any]:
        """The agent's job, decoded (a fresh dict)."""
        decoded: dict[str, Any] = json.loads(self.document)
        return decoded

    def template(self) -> dict[str, Any]:
        """The workspaceTemplate overrides, decoded (a fresh dict)."""
        decoded: dict[str, Any] = json.loads(self.overrides)
        return decoded


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
