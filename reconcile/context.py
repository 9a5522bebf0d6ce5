"""What a reconcile pass works with: the operator's settings, the pass's facts, a run's plan.

``Pass`` is built once per ``reconcile`` call from the object read at its start and handed
to every step instead of ``(key, obj, generation, …)``; ``Plan`` holds what a due run was
decided and prepared from. Both are frozen: a step that needs a newer object reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from controller.cache import ObjectKey
from reconcile import backend as backends
from reconcile.decide import Decision, Observed, Requests
from reconcile.policy import Policy
from reconcile.sources import Revision
from reconcile.spec import StackSpec
from reconcile.tenancy import Tenancy
from workspace.runner import RunnerTraits
from workspace.source import GitCredentials

Mutation = Callable[[Mapping[str, Any]], dict[str, Any]]
"""A pure change of a status: the status writer applies it to the newest status."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Operator-wide settings of the reconciler."""

    work_root: Path  # per-Stack source checkouts live under <work_root>/<namespace>/<name>
    default_backend: str | None = None  # root of the per-namespace backends (reconcile.backend)
    run_timeout: float = 7200.0  # seconds a run may take, unless spec.timeoutSeconds says
    max_run_timeout: float = 86400.0  # the most any run may take, whatever its spec says
    policy: Policy = dataclasses.field(default_factory=Policy)
    identity: str = ""  # this operator instance (host_pid_hex), in status.currentUpdate
    # True when leader election guarantees that no other instance of this operator runs
    # updates: an update another instance started and never concluded is then dead, once
    # ``takeover_delay`` seconds have passed since we took the Lease (``leading_since``,
    # monotonic seconds of the reconciler's clock) — the time a deposed leader may still
    # spend interrupting its CLI.
    sole_runner: bool = False
    takeover_delay: float = 0.0
    leading_since: Callable[[], float | None] = lambda: None
    # What the runner needs of the reconciler (the runner declares it; see RunnerTraits).
    runner_traits: RunnerTraits = dataclasses.field(default_factory=RunnerTraits)
    # What Stacks may ask of their run pods beyond their namespace's rights (pod runner).
    tenancy: Tenancy = dataclasses.field(default_factory=Tenancy)

    def stack_dir(self, key: ObjectKey) -> Path:
        """The Stack's own directory: its checkout (``source``) and ``PULUMI_HOME`` (``home``)."""
        return self.work_root / key.namespace / key.name

    def backend(self, key: ObjectKey, spec: StackSpec) -> str | None:
        """The Stack's backend: its own, else the default scoped to its namespace."""
        if spec.backend:
            return spec.backend
        default = self.default_backend
        return backends.namespaced(default, key.namespace) if default else None

    def timeout(self, spec: StackSpec) -> float:
        """The deadline of one run of the Stack, in seconds (at most ``max_run_timeout``)."""
        return min(float(spec.timeout_seconds or self.run_timeout), self.max_run_timeout)

    def timeout_note(self, spec: StackSpec) -> str:
        """The status note on a ``spec.timeoutSeconds`` cut to ``max_run_timeout`` ("": none)."""
        asked = spec.timeout_seconds
        if asked is None or asked <= self.max_run_timeout:
            return ""
        return (
            f"deadline {self.max_run_timeout:.0f}s, the operator's --max-run-timeout "
            f"(spec.timeoutSeconds asks {asked}s)"
        )

    def cache_scope(self, key: ObjectKey) -> str:
        """Whose dependency cache the Stack's runs use: its namespace's in run pods, else ours.

        ``""`` names the local runner's one cache (the metrics' ``namespace`` label).
        """
        return key.namespace if self.runner_traits.in_pods else ""


@dataclasses.dataclass(frozen=True)
class Pass:
    """One reconcile pass over one Stack: the object as read at its start.

    ``status`` is the status before anything this pass writes: a verdict whose Event is
    posted only on a change compares against it.
    """

    key: ObjectKey
    obj: Mapping[str, Any]
    generation: int
    requests: Requests

    @classmethod
    def of(cls, key: ObjectKey, obj: Mapping[str, Any]) -> Pass:
        """The pass over ``obj`` (read for ``key``)."""
        generation = int(obj["metadata"].get("generation") or 0)
        return cls(key, obj, generation, Requests.of(obj))

    @property
    def status(self) -> Mapping[str, Any]:
        """The object's status at the start of the pass."""
        status: Mapping[str, Any] = self.obj.get("status") or {}
        return status


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a run reads from the API before it is reported started (may hold secrets)."""

    env: dict[str, str] = dataclasses.field(repr=False)
    secret_config: dict[str, str] = dataclasses.field(repr=False)
    backend: str | None
    mapped_config: dict[str, str] = dataclasses.field(default_factory=dict)
    """``configRef``'s values (config key → value), read from ConfigMaps."""

    def config(self, spec: StackSpec) -> dict[str, str]:
        """The run's plain config: ``spec.config``, with ``configRef``'s values winning."""
        return {**spec.config, **self.mapped_config}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One due run's facts, from the decision to the outcome."""

    spec: StackSpec
    observed: Observed
    decision: Decision
    inputs: Inputs
    credentials: GitCredentials | None = dataclasses.field(repr=False)
    revision: Revision | None = None
    """What the run deploys beyond a commit: a Flux artifact or a rendered Program (None: git)."""

    @property
    def operation(self) -> str:
        """``preview`` or ``up``."""
        return "preview" if self.spec.preview else "up"

    @property
    def previous_failures(self) -> int:
        """The consecutive failures recorded before this run."""
        return int((self.observed.status.get("lastUpdate") or {}).get("failures") or 0)
