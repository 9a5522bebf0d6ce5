"""Status contract rule 30 as the witness checks it (``tests.status.churn_rules``).

A Stack whose status is rewritten in a loop with nothing changed in its spec fails the
witness; runs, retries with backoff and spec edits do not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from status import conditions as c
from status.conditions import Reason
from tests.status import churn_rules
from tests.status.churn_rules import Churn, churn, violations
from tests.status.witness_fixtures import DONE, START, T0, T1, stack


@dataclasses.dataclass(frozen=True)
class Seen:
    """A version as the witness records it."""

    obj: dict[str, Any]
    seen_at: float
    after_gap: bool = False


DESTROYING = c.deleting(DONE, 2, Reason.DESTROYING, "destroying", T0, ready="Unknown")
BLOCKED = c.deleting(DESTROYING, 2, Reason.DELETION_BLOCKED, "blocked", T1, ready="False")


def hot_loop(versions: int, every: float) -> list[Seen]:
    """A deleted Stack flipping between Destroying and DeletionBlocked, ``every`` seconds."""
    statuses = [DESTROYING if i % 2 == 0 else BLOCKED for i in range(versions)]
    return [
        Seen(stack(s, generation=2, deleting=True, rv=str(i)), i * every)
        for i, s in enumerate(statuses)
    ]


def test_a_status_rewritten_in_a_loop_breaks_rule_30() -> None:
    """The namespace-deleted hot loop: hundreds of versions in 30 s; each is a Ready flip."""
    found = churn(hot_loop(200, 0.1))
    assert found.writes > churn_rules.MAX_WRITES
    assert found.ready_flips > churn_rules.MAX_READY_FLIPS
    [writes, flips] = violations(hot_loop(200, 0.1))
    assert "status writes within 30s" in writes
    assert "Ready changed" in flips


def test_retries_with_backoff_keep_rule_30() -> None:
    """The same flips 10 s apart: a retry with backoff, within the bounds."""
    assert violations(hot_loop(30, 10.0)) == []


def test_spec_edits_and_unchanged_versions_are_not_counted() -> None:
    """Versions that change the spec (a new generation) or not the status are the user's."""
    edits = [Seen(stack(START if i % 2 else DONE, generation=i + 1), i * 0.1) for i in range(100)]
    same = [Seen(stack(DONE, rv=str(i)), i * 0.1) for i in range(100)]
    assert churn(edits) == Churn()
    assert churn(same) == Churn()


def test_versions_after_a_gap_are_not_compared() -> None:
    """After a relist the witness may have missed versions: no pair to judge."""
    history = [dataclasses.replace(seen, after_gap=True) for seen in hot_loop(100, 0.1)]
    assert churn(history) == Churn()
