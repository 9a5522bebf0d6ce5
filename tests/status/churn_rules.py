"""How often a Stack's status may change while nothing changes its spec: status contract rule 30.

Role: a verdict is rewritten only when what it says changes, and a failure is retried with
backoff, so a Stack left alone changes its status a few times per run and per retry, never
in a loop. ``churn`` finds, in the versions of one Stack as a watch saw them, the busiest
``WINDOW`` of status-only writes (versions whose spec, labels, annotations, finalizers and
deletion stayed as they were: only the operator moved them) and of ``Ready`` flips; ``violations``
holds them to ``MAX_WRITES`` and ``MAX_READY_FLIPS``.

The bounds leave room for every legitimate pattern the test suite produces: a run writes
its start, progress at most every 5 s and its end; the tests' operators retry after 1 s
(``--update-retry-base=1``), so a failure retried with backoff starts again after 1, 2, 4,
8 and 16 s: six attempts in 30 s, each flipping Ready twice (Unknown while it runs, False
when it fails). They catch a Stack whose own writes start the next pass at once (one
attempt a second or faster: hundreds of versions a minute).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Final, Protocol

from tests.status.status_view import READY, Obj, StatusView, mapping_of

WINDOW: Final = 30.0
"""Seconds: the window the bounds count in."""
MAX_WRITES: Final = 40
"""Status-only writes of one Stack in any ``WINDOW``."""
MAX_READY_FLIPS: Final = 20
"""Changes of one Stack's ``Ready`` status in any ``WINDOW`` with its spec unchanged."""
RULE: Final = 30


class Seen(Protocol):
    """One version as the witness recorded it (``invariants.Observation``)."""

    @property
    def obj(self) -> Obj:
        """The version."""
        ...

    @property
    def seen_at(self) -> float:
        """When it was seen (monotonic seconds)."""
        ...

    @property
    def after_gap(self) -> bool:
        """Whether versions may have been missed just before it."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Churn:
    """The busiest ``WINDOW`` of one Stack: status-only writes and ``Ready`` flips in it."""

    writes: int = 0
    ready_flips: int = 0


def churn(history: Sequence[Seen]) -> Churn:
    """The most status-only writes, and ``Ready`` flips, of any ``WINDOW`` of ``history``."""
    writes: list[float] = []
    flips: list[float] = []
    for before, after in itertools.pairwise(history):
        if after.after_gap or not _status_only(before.obj, after.obj):
            continue
        old, new = StatusView.of(before.obj), StatusView.of(after.obj)
        if old.status == new.status:
            continue
        writes.append(after.seen_at)
        if old.state(READY) != new.state(READY):
            flips.append(after.seen_at)
    return Churn(_busiest(writes), _busiest(flips))


def violations(history: Sequence[Seen]) -> list[str]:
    """What is wrong with ``history``'s churn (nothing when within the bounds)."""
    found = churn(history)
    wrong = []
    if found.writes > MAX_WRITES:
        wrong.append(
            f"{found.writes} status writes within {WINDOW:.0f}s with nothing changed in the "
            f"spec (at most {MAX_WRITES}): a verdict is rewritten in a loop"
        )
    if found.ready_flips > MAX_READY_FLIPS:
        wrong.append(
            f"Ready changed {found.ready_flips} times within {WINDOW:.0f}s with nothing "
            f"changed in the spec (at most {MAX_READY_FLIPS})"
        )
    return wrong


def _status_only(before: Obj, after: Obj) -> bool:
    """Whether ``after`` differs from ``before`` in what only the operator writes."""
    old, new = mapping_of(before.get("metadata")), mapping_of(after.get("metadata"))
    fields = ("uid", "generation", "labels", "annotations", "finalizers", "deletionTimestamp")
    return all(old.get(field) == new.get(field) for field in fields)


def _busiest(times: list[float]) -> int:
    """The most of ``times`` (ascending) within any ``WINDOW``."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] > WINDOW:
            start += 1
        most = max(most, end - start + 1)
    return most
