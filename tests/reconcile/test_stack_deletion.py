"""Deletion on fakes: the finalizer, destroyOnFinalize, and a blocked deletion."""

from __future__ import annotations

import threading

from controller.reconciler import Result
from reconcile.stack import FINALIZER
from status.conditions import Reason
from status.events import WARNING
from tests.reconcile.fakes import ProgressCallback
from tests.reconcile.stack_harness import KEY, SECRET_REF, Harness, reaches
from workspace.runner import ErrorKind, Outcome, UpdateRequest


@reaches(Reason.DESTROYING)
def test_destroy_on_finalize_destroys_then_lets_the_stack_go(h: Harness) -> None:
    """Destroying during the destroy; Destroyed; the finalizer and the work dir go."""
    h.create(destroyOnFinalize=True)
    h.runner.then(h.succeed())
    h.reconcile()
    assert (h.work_root / "ns" / "app").is_dir()
    h.delete()
    seen: list[dict[str, tuple[str, str]]] = []

    def destroy(
        _request: UpdateRequest, _on_progress: ProgressCallback, _stop: threading.Event
    ) -> Outcome:
        seen.append(h.kstatus())
        return h.succeed(operation="destroy", changes={"delete": 1})

    h.runner.then(destroy)
    assert h.reconcile() == Result()
    assert seen == [{"Ready": ("Unknown", "Destroying"), "Reconciling": ("True", "Destroying")}]
    assert h.events.posted[-1].reason == "Destroyed"
    assert h.events.posted[-1].message == "pulumi destroy succeeded (delete 1)"
    assert h.metrics.updates[-1] == ("destroy", "succeeded")
    assert KEY not in h.cluster.objects
    assert not (h.work_root / "ns" / "app").exists()
    assert h.reconcile() == Result()
    assert h.writer.forgotten == [KEY]
    assert h.view.forgotten == [KEY]


@reaches(Reason.DELETION_BLOCKED)
def test_a_failed_destroy_keeps_the_finalizer_until_the_user_gives_up(h: Harness) -> None:
    """DeletionBlocked (retried by the queue); destroyOnFinalize false releases the Stack."""
    h.create(destroyOnFinalize=True)
    h.runner.then(h.succeed())
    h.reconcile()
    h.delete()
    h.runner.then(h.fail(operation="destroy", message="cannot delete bucket"))
    assert h.reconcile() == Result(requeue_after=10)
    assert "destroy failed: cannot delete bucket" in h.message()
    assert h.kstatus() == {
        "Ready": ("False", "DeletionBlocked"),
        "Reconciling": ("True", "DeletionBlocked"),
    }
    assert (h.events.posted[-1].reason, h.events.posted[-1].type_) == ("DeletionBlocked", WARNING)
    assert h.cluster.objects[KEY]["metadata"]["finalizers"] == [FINALIZER]
    h.cluster.objects[KEY]["spec"]["destroyOnFinalize"] = False
    h.cluster.bump(KEY)
    assert h.reconcile() == Result()
    assert KEY not in h.cluster.objects
    assert h.runner.operations == ["run", "destroy"]


def test_a_stack_deleted_without_destroy_only_loses_its_finalizer(h: Harness) -> None:
    """No destroyOnFinalize: no destroy, the finalizer goes."""
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    h.delete()
    assert h.reconcile() == Result()
    assert KEY not in h.cluster.objects
    assert h.runner.operations == ["run"]
    assert h.patcher.patches == [[FINALIZER], []]


def test_deleting_a_stack_interrupts_its_run_then_destroys(h: Harness) -> None:
    """The deletion stops the run in flight (Interrupted, saying why); then the destroy runs."""
    h.create(destroyOnFinalize=True)
    h.cluster.objects[KEY]["metadata"]["finalizers"] = [FINALIZER]

    def slow_up(
        _request: UpdateRequest, _on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        h.delete()  # the informer sees the deletionTimestamp while the update runs
        h.parts.interrupts.on_update(h.cluster.objects[KEY], h.cluster.objects[KEY])
        assert stop.wait(10), "the deletion stopped the run"
        return h.fail(ErrorKind.INTERRUPTED, message="update interrupted by the operator")

    h.runner.then(slow_up)
    h.reconcile()
    assert h.kstatus()["Ready"] == ("False", "Interrupted")
    assert "being deleted" in h.message()
    assert h.events.posted[-1].message == "Update interrupted: the Stack is being deleted"
    h.runner.then(h.succeed(operation="destroy"))
    assert h.reconcile() == Result()
    assert h.runner.operations == ["run", "destroy"]
    assert KEY not in h.cluster.objects


def test_a_failed_destroy_is_tried_again_after_its_backoff_only(h: Harness) -> None:
    """No pass in between destroys (each write comes back as a watch event); then it does.

    Failed destroys back off like failed runs: 10 s, 20 s, 40 s…; each attempt is recorded
    in ``lastUpdate`` (type destroy) with the failures in a row.
    """
    h.create(destroyOnFinalize=True)
    h.runner.then(h.succeed())
    h.reconcile()
    h.delete()
    for failures, wait in ((1, 10), (2, 20), (3, 40)):
        h.runner.then(h.fail(operation="destroy", message="cannot delete bucket"))
        assert h.reconcile() == Result(requeue_after=wait)
        last = h.status["lastUpdate"]
        assert (last["type"], last["state"], last["failures"]) == ("destroy", "failed", failures)
        writes, destroys = len(h.writer.writes), h.runner.operations.count("destroy")
        for _ in range(20):  # the watch events of this pass's own writes
            assert h.reconcile() == Result(requeue_after=wait)
        assert (len(h.writer.writes), h.runner.operations.count("destroy")) == (writes, destroys)
        h.clock.step(wait)
    h.runner.then(h.succeed(operation="destroy"))
    assert h.reconcile() == Result()
    assert KEY not in h.cluster.objects


def test_a_destroy_that_cannot_be_prepared_is_blocked_and_backs_off_too(h: Harness) -> None:
    """A missing Secret at deletion: DeletionBlocked naming it, no destroy.

    The Secret is looked for again after the backoff, not on every watch event.
    """
    h.secrets.data[("ns", "creds")] = {"token": "t"}
    h.create(destroyOnFinalize=True, envRefs={"TOKEN": SECRET_REF})
    h.runner.then(h.succeed())
    h.reconcile()
    del h.secrets.data[("ns", "creds")]
    h.delete()
    assert h.reconcile() == Result(requeue_after=10)
    assert 'cannot prepare destroy: Secret "creds"' in h.message()
    assert h.runner.operations == ["run"]
    writes = len(h.writer.writes)
    h.clock.step(5)
    assert h.reconcile() == Result(requeue_after=5)
    assert len(h.writer.writes) == writes
    h.secrets.data[("ns", "creds")] = {"token": "t"}
    h.clock.step(5)
    h.runner.then(h.succeed(operation="destroy"))
    assert h.reconcile() == Result()
    assert KEY not in h.cluster.objects
