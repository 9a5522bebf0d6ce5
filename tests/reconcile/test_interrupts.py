"""``RunInterrupts``: a Stack's deletion interrupts its run in flight, and nothing else."""

from __future__ import annotations

from controller.cache import ObjectKey
from controller.informer import DeletedFinalStateUnknown
from reconcile.interrupts import RunInterrupts

KEY = ObjectKey("team", "web")


def stack(*, deleting: bool, name: str = "web") -> dict[str, object]:
    """A Stack object, being deleted or not."""
    metadata: dict[str, object] = {"namespace": "team", "name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {"metadata": metadata}


def test_a_deletion_sets_the_running_event_of_that_stack_only() -> None:
    """Updates without a deletionTimestamp and other Stacks' deletions leave it alone."""
    interrupts = RunInterrupts()
    with interrupts.running(KEY) as event:
        interrupts.on_update(stack(deleting=False), stack(deleting=False))
        interrupts.on_add(stack(deleting=True, name="other"))
        assert not event.is_set()
        interrupts.on_update(stack(deleting=False), stack(deleting=True))
        assert event.is_set()


def test_a_delete_the_watch_missed_interrupts_too() -> None:
    """A relist's DeletedFinalStateUnknown counts as a deletion."""
    interrupts = RunInterrupts()
    with interrupts.running(KEY) as event:
        interrupts.on_delete(DeletedFinalStateUnknown(KEY, stack(deleting=False)))
        assert event.is_set()


def test_after_the_run_nothing_is_registered() -> None:
    """A deletion after the run ended finds nothing; a new run gets a fresh event."""
    interrupts = RunInterrupts()
    with interrupts.running(KEY) as first:
        pass
    interrupts.on_add(stack(deleting=True))
    assert not first.is_set()
    with interrupts.running(KEY) as second:
        assert not second.is_set()
