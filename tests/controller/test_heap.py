"""Heap hygiene: the glibc calls take, and ``settle`` takes the survivors out of GC passes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from controller import heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Put every object ``settle`` froze back under the collector after the test."""
    yield
    gc.unfreeze()


def test_limit_arenas_is_accepted_by_glibc() -> None:
    """This machine's C library (glibc) accepts the arena cap."""
    assert heap.limit_arenas() is True


def test_settle_freezes_what_is_alive_and_keeps_freeing_the_rest(unfrozen: None) -> None:
    """Survivors leave the collector's generations; objects dropped later are still freed."""
    del unfrozen
    survivor = [{"a": [1, 2]} for _ in range(1000)]

    heap.settle()

    assert gc.get_freeze_count() >= len(survivor)
    assert all(obj is not survivor for obj in gc.get_objects())  # permanent, not scanned
    cycle: list[object] = []
    cycle.append(cycle)
    collected_before = gc.get_stats()[2]["collected"]
    del cycle
    gc.collect()
    assert gc.get_stats()[2]["collected"] > collected_before
