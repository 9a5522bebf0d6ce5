"""The Stack reconciler on fakes and a fake clock: the guard list, requests, and every reason.

Each test drives ``StackReconciler.reconcile`` against the in-memory collaborators of
``tests/reconcile/fakes.py`` (through ``tests/reconcile/stack_harness.py``) and checks
what a user sees: the conditions (as kstatus reads them), ``lastUpdate``, the Events, the
requeue, and what ran. Runs, their inputs and deletion have modules of their own
(``test_stack_runs``, ``test_stack_inputs``, ``test_stack_deletion``); a test marked
``@reaches(reason)`` in any of them must write that reason, and the first test here checks
that every ``status.conditions.Reason`` is reached that way.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from controller.reconciler import Result, TransientError
from reconcile.stack import FINALIZER
from status.conditions import Reason
from status.events import NORMAL
from tests.reconcile.stack_harness import REACHED_BY, Harness, reaches

SIBLINGS = (
    "test_stack_runs",
    "test_stack_inputs",
    "test_stack_deletion",
    "test_stack_sources",
    "test_stack_remote_runs",
)


def test_every_condition_reason_is_reached_by_a_test_here() -> None:
    """Every reason the operator can write is driven through the reconciler by some test."""
    for name in SIBLINGS:
        importlib.import_module(f"tests.reconcile.{name}")
    assert set(REACHED_BY) == set(Reason)


@reaches(Reason.SUCCEEDED)
def test_a_new_stack_is_acknowledged_adopted_run_and_ready(h: Harness) -> None:
    """Acknowledged, finalizer added, one run, Ready with outputs; UpdateStarted, Succeeded."""
    h.create()
    h.runner.then(h.succeed(outputs={"url": "https://x"}, changes={"create": 2}))
    assert h.reconcile() == Result(requeue_after=60)
    assert h.writer.writes[0]["conditions"][1]["message"] == "Reconciling generation 1"
    assert h.patcher.patches == [[FINALIZER]]
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.message() == f"pulumi up succeeded (create 2) at commit {'a1' * 3}a"
    assert h.status["observedGeneration"] == 1
    assert h.status["outputs"] == {"url": "https://x"}
    last = h.status["lastUpdate"]
    assert (last["state"], last["failures"], last["lastSuccessfulCommit"]) == (
        "succeeded",
        0,
        "a1" * 20,
    )
    assert [e["result"] for e in h.status["history"]] == ["succeeded"]
    assert "currentUpdate" not in h.status
    assert [(e.reason, e.type_) for e in h.events.posted] == [
        ("UpdateStarted", NORMAL),
        ("Succeeded", NORMAL),
    ]
    assert h.metrics.updates == [("up", "succeeded")]
    assert h.metrics.reconciles == ["requeue_after"]
    request = h.runner.calls[0][1]
    assert request.work_dir == h.work_root / "ns" / "app" / "source" / "."
    assert request.pulumi_home == h.work_root / "ns" / "app" / "home"


def test_an_up_to_date_stack_costs_no_write_and_no_event(h: Harness) -> None:
    """A second pass with nothing new: no run, no write, no Event; poll the branch."""
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    writes, events = len(h.writer.writes), len(h.events.posted)
    assert h.reconcile() == Result(requeue_after=60)
    assert (len(h.writer.writes), len(h.events.posted)) == (writes, events)
    assert h.runner.operations == ["run"]


@reaches(Reason.INVALID_SPEC)
def test_an_invalid_spec_stalls_without_a_run(h: Harness) -> None:
    """A refused field: Stalled InvalidSpec, one Warning, no retry; a fix recovers."""
    h.create(envRefs={"HOME": {"type": "Env", "env": {"name": "HOME"}}})
    assert h.reconcile() == Result()
    assert h.kstatus() == {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")}
    assert "envRefs" in h.message()
    h.reconcile()
    assert h.events.reasons == ["InvalidSpec"]
    assert h.runner.calls == []
    h.edit(envRefs={})
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.status["observedGeneration"] == 2


def test_a_stack_name_its_backend_cannot_serve_is_an_invalid_spec(tmp_path: Path) -> None:
    """An organisation other than ``organization`` on a file:// default backend."""
    h = Harness(tmp_path, default_backend=f"file://{tmp_path}/state")
    h.create(stack="acme/proj/dev")
    assert h.reconcile() == Result()
    assert h.kstatus()["Stalled"] == ("True", "InvalidSpec")
    assert h.runner.calls == []


def test_the_default_backend_is_scoped_to_the_namespace(tmp_path: Path) -> None:
    """Without spec.backend the run gets <default>/<namespace>, created when missing."""
    h = Harness(tmp_path, default_backend=f"file://{tmp_path}/state")
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.runner.calls[0][1].env["PULUMI_BACKEND_URL"] == f"file://{tmp_path}/state/ns"
    assert (tmp_path / "state" / "ns").is_dir()


@reaches(Reason.SUSPENDED)
def test_a_suspended_stack_does_not_run(h: Harness) -> None:
    """spec.suspend: Reconciling True, Ready Unknown, Suspended; no run, no Event."""
    h.create(suspend=True)
    assert h.reconcile() == Result()
    assert h.kstatus() == {"Ready": ("Unknown", "Suspended"), "Reconciling": ("True", "Suspended")}
    assert (h.runner.calls, h.events.posted) == ([], [])


def test_a_reconcile_request_runs_and_is_handled_with_the_final_conditions(h: Harness) -> None:
    """Status contract rule 17: the handled value is written with the conclusion."""
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    h.annotate("pulumi.com/reconciliation-request", "r1")
    h.annotate("reconcile.fluxcd.io/requestedAt", "t1")
    h.runner.then(h.succeed())
    h.reconcile()
    final = h.writer.writes[-1]
    assert (final["observedReconcileRequest"], final["lastHandledReconcileAt"]) == ("r1", "t1")
    assert final["conditions"][0]["reason"] == "Succeeded"
    assert all("observedReconcileRequest" not in w for w in h.writer.writes[:-1])
    assert h.status["lastUpdate"]["reconcileRequest"] == "r1"
    h.reconcile()
    assert h.runner.operations == ["run", "run"]


def test_a_stall_handles_the_request_too(h: Harness) -> None:
    """A final state without a run (InvalidSpec) also records the request as handled."""
    h.create(envRefs={"X": {"type": "Env"}})
    h.annotate("pulumi.com/reconciliation-request", "r1")
    h.reconcile()
    assert h.status["observedReconcileRequest"] == "r1"


def test_a_status_too_large_to_store_is_written_without_outputs(h: Harness) -> None:
    """The conclusion lands without outputs and history, and says so."""
    h.create()
    h.writer.too_large = "outputs"
    h.runner.then(h.succeed(outputs={"big": "x"}))
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert "outputs" not in h.status
    assert "history" not in h.status
    assert h.status["lastUpdate"]["message"].endswith(
        "(outputs, history omitted: the status was too large to store)"
    )


def test_a_finalizer_patch_conflict_is_retried_by_the_queue(h: Harness) -> None:
    """The Stack changed while the finalizer was added: TransientError, nothing run."""
    h.create()
    h.patcher.conflicts = 1
    with pytest.raises(TransientError):
        h.reconcile()
    assert h.runner.calls == []
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.patcher.patches == [[FINALIZER]]
