"""A Stack reconciler wired to the fakes of ``tests/reconcile/fakes.py``, on a ``FakeClock``.

``Harness`` changes the world (create, edit, annotate, delete a Stack; push a commit) and
reads what a user sees (conditions as kstatus reads them, messages). ``reaches(reason)``
marks a test that must write a condition with ``reason``; ``REACHED_BY`` lists them, so a
test can check that every ``status.conditions.Reason`` is reached by one.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.cache import ObjectKey
from controller.clock import FakeClock
from controller.reconciler import Result
from reconcile.collaborators import Collaborators
from reconcile.policy import Policy
from reconcile.stack import Settings, StackReconciler
from status.conditions import Reason
from tests.reconcile.fakes import (
    Cluster,
    FakeAccounts,
    FakeEvents,
    FakeMetrics,
    FakePatcher,
    FakeRunner,
    FakeSecrets,
    FakeSource,
    FakeSourceObjects,
    FakeView,
    FakeWriter,
    outcome,
)
from workspace.runner import ErrorKind, Outcome

KEY = ObjectKey("ns", "app")
POLICY = Policy(retry_base_delay=10, max_update_failures=3, wait_poll=30)
SECRET_REF = {"type": "Secret", "secret": {"name": "creds", "key": "token"}}


class Harness:
    """A reconciler wired to fakes, with helpers to change the world and read the status."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        """Fakes, a FakeClock at 0 (wall 2026-01-01T00:00:00Z) and ``Settings`` overrides."""
        self.clock = FakeClock()
        self.cluster = Cluster()
        self.writer, self.view = FakeWriter(self.cluster), FakeView(self.cluster)
        self.events, self.metrics = FakeEvents(), FakeMetrics()
        self.secrets, self.source = FakeSecrets(), FakeSource()
        self.patcher, self.runner = FakePatcher(self.cluster), FakeRunner()
        self.accounts = FakeAccounts()
        self.objects = FakeSourceObjects()
        self.work_root = tmp_path / "work"
        self.parts = Collaborators(
            runner=self.runner,
            writer=self.writer,
            view=self.view,
            events=self.events,
            metrics=self.metrics,
            secrets=self.secrets.for_namespace,
            patcher=self.patcher,
            source=self.source,
            clock=self.clock,
            accounts=self.accounts,
            objects=self.objects,
        )
        self.stop = threading.Event()
        self.restart(**settings)

    def restart(self, **settings: Any) -> None:
        """A new reconciler on the same fakes (``Settings`` overrides), as after a restart."""
        base = {"work_root": self.work_root, "policy": POLICY, "identity": "me_1"}
        self.reconciler = StackReconciler(self.parts, Settings(**{**base, **settings}))

    # -- the world ---------------------------------------------------------------------

    def create(
        self, name: str = KEY.name, status: dict[str, Any] | None = None, **spec: Any
    ) -> None:
        """Create a branch-tracking Stack (``spec`` overrides fields; None removes one)."""
        base = {"stack": "dev", "projectRepo": "https://git.example/repo.git", "branch": "main"}
        fields = {k: v for k, v in {**base, **spec}.items() if v is not None}
        metadata = {"namespace": KEY.namespace, "name": name, "generation": 1}
        obj: dict[str, Any] = {"metadata": metadata, "spec": fields}
        if status is not None:
            obj["status"] = status
        self.cluster.put(obj)

    def edit(self, **spec: Any) -> None:
        """Change the spec: a new generation."""
        obj = self.cluster.objects[KEY]
        obj["spec"] = {k: v for k, v in {**obj["spec"], **spec}.items() if v is not None}
        obj["metadata"]["generation"] += 1
        self.cluster.bump(KEY)

    def annotate(self, name: str, value: str) -> None:
        """Set an annotation (a reconcile request)."""
        obj = self.cluster.objects[KEY]
        obj["metadata"].setdefault("annotations", {})[name] = value
        self.cluster.bump(KEY)

    def delete(self) -> None:
        """Mark the Stack deleted (it stays while a finalizer holds it)."""
        self.cluster.objects[KEY]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.cluster.bump(KEY)

    def push(self) -> str:
        """A new commit on ``main``."""
        self.source.commits["main"] = f"{len(self.runner.calls) + 2:02x}" * 20
        return self.source.commits["main"]

    # -- the reconciler ----------------------------------------------------------------

    def reconcile(self) -> Result:
        """One pass over ``KEY``."""
        return self.reconciler.reconcile(KEY, self.stop)

    @property
    def status(self) -> dict[str, Any]:
        """The stored status."""
        status: dict[str, Any] = self.cluster.objects[KEY].get("status") or {}
        return status

    def kstatus(self) -> dict[str, tuple[str, str]]:
        """``{type: (status, reason)}`` of the stored conditions."""
        return {c["type"]: (c["status"], c["reason"]) for c in self.status.get("conditions", ())}

    def message(self, type_: str = "Ready") -> str:
        """The stored message of condition ``type_``."""
        return str(next(c["message"] for c in self.status["conditions"] if c["type"] == type_))

    def succeed(self, **fields: Any) -> Outcome:
        """A successful outcome, now."""
        return outcome(self.clock, **fields)

    def fail(self, kind: ErrorKind = ErrorKind.UPDATE_FAILED, **fields: Any) -> Outcome:
        """A failed outcome, now."""
        return outcome(self.clock, kind, message=fields.pop("message", "it broke"), **fields)


REACHED_BY: dict[Reason, str] = {}


def reaches(reason: Reason) -> Callable[[Callable[[Harness], None]], Callable[[Harness], None]]:
    """Register the test as reaching ``reason``, and check that it wrote it."""

    def decorate(test: Callable[[Harness], None]) -> Callable[[Harness], None]:
        REACHED_BY[reason] = test.__name__

        @functools.wraps(test)
        def run(h: Harness) -> None:
            test(h)
            assert str(reason) in h.writer.reasons, f"{test.__name__} never wrote {reason}"

        return run

    return decorate
