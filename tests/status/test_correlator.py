"""Dedupe, aggregation and spam filter (``status.correlator``), seen through the recorder.

A ``Harness`` recorder posts to a ``FakeSink`` with a ``FakeClock``: what the correlator
decides is what the sink receives (a CREATE, a PATCH raising the count, or nothing).
"""

from __future__ import annotations

import datetime

import pytest

from status.events import NORMAL, WARNING
from tests.status.event_fakes import T0, Harness, stack

# -- dedupe -------------------------------------------------------------------------------


def test_identical_repeats_patch_one_event(harness: Harness) -> None:
    """N identical posts: one Event, count N, first/last from the first/last post."""
    for i in range(5):
        # A status write between posts bumps resourceVersion; it is not part of the identity.
        harness.recorder.post(stack(rv=str(i)), WARNING, "UpdateFailed", "boom")
        harness.clock.step(10)
    harness.flush()
    event = harness.sink.only()
    assert event.count == 5
    assert event.first_timestamp == T0
    assert event.last_timestamp == T0 + datetime.timedelta(seconds=40)
    assert [verb for verb, _ in harness.sink.calls] == ["create"] + ["patch"] * 4
    assert (harness.total("created", WARNING), harness.total("patched", WARNING)) == (1, 4)


def test_any_difference_makes_a_new_event(harness: Harness) -> None:
    """Another type, reason, message or object is another Event."""
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "a")
    harness.recorder.post(stack(), WARNING, "UpdateStarted", "a")
    harness.recorder.post(stack(), NORMAL, "UpdateSucceeded", "a")
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "b")
    harness.recorder.post(stack(uid="uid-2"), NORMAL, "UpdateStarted", "a")
    harness.flush()
    assert len(harness.sink.events) == 5
    assert {e.count for e in harness.sink.events.values()} == {1}


def test_an_expired_event_is_created_again_with_its_count(harness: Harness) -> None:
    """A PATCH answered 404 (event-ttl passed) re-creates the Event under the same name."""
    harness.recorder.post(stack(), NORMAL, "Destroyed", "gone")
    harness.flush()
    name = str(harness.sink.only().metadata.name)
    harness.sink.events.clear()
    harness.recorder.post(stack(), NORMAL, "Destroyed", "gone")
    harness.flush()
    assert harness.sink.calls == [("create", name), ("patch", name), ("create", name)]
    assert harness.sink.only().count == 2
    assert harness.total("created") == 2


# -- aggregation --------------------------------------------------------------------------


def test_ten_distinct_messages_within_the_window_are_combined(harness: Harness) -> None:
    """The 10th distinct message (same object, type, reason) starts one combined Event."""
    for i in range(12):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", f"error {i}")
        harness.clock.step(59)
    harness.flush()
    # Nine Events of their own, then one combined Event that counts the 10th to 12th.
    assert harness.sink.messages() == [
        *(f"error {i}" for i in range(9)),
        "(combined from similar events): error 11",
    ]
    combined = list(harness.sink.events.values())[-1]
    assert combined.count == 3
    assert combined.reason == "UpdateFailed"
    assert combined.type == WARNING


@pytest.mark.parametrize(("gap", "combined"), [(600, True), (601, False)])
def test_aggregation_window_is_600_seconds(harness: Harness, gap: float, *, combined: bool) -> None:
    """A 10th distinct message more than 600 s after the group's last event starts afresh."""
    for i in range(9):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", f"error {i}")
    harness.clock.step(gap)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "error 9")
    harness.flush()
    last = harness.sink.messages()[-1]
    assert last == ("(combined from similar events): error 9" if combined else "error 9")
    assert len(harness.sink.events) == 10


def test_aggregation_is_per_reason(harness: Harness) -> None:
    """Distinct messages under different reasons never combine."""
    for i in range(20):
        harness.recorder.post(stack(), NORMAL, f"Reason{i % 2}", f"message {i}")
    harness.flush()
    combined = [m for m in harness.sink.messages() if m.startswith("(combined")]
    assert len(combined) == 2  # one per reason, from each reason's 10th message


# -- spam filter --------------------------------------------------------------------------


def test_spam_filter_allows_25_then_one_per_300_seconds(harness: Harness) -> None:
    """Per object and source: a burst of 25, then one token every 300 s."""
    post = harness.recorder.post
    for i in range(30):
        post(stack(), NORMAL, f"Reason{i}", "m")  # distinct reasons: no dedupe or aggregation
    harness.flush()
    assert len(harness.sink.events) == 25
    assert harness.dropped("rate_limited") == 5
    harness.clock.step(299)
    post(stack(), NORMAL, "Late0", "m")
    harness.clock.step(1)
    post(stack(), NORMAL, "Late1", "m")
    post(stack(), NORMAL, "Late2", "m")
    harness.clock.step(600)
    for i in range(3, 6):
        post(stack(), NORMAL, f"Late{i}", "m")
    harness.flush()
    late = sorted(str(e.reason) for e in harness.sink.events.values() if "Late" in str(e.reason))
    assert late == ["Late1", "Late3", "Late4"]
    assert harness.dropped("rate_limited") == 5 + 3  # the burst's overflow, Late0, 2 and 5
    assert harness.total("dropped") == 8


def test_spam_filter_is_per_object(harness: Harness) -> None:
    """Another object has its own bucket of 25."""
    for i in range(26):
        harness.recorder.post(stack(uid="a"), NORMAL, f"Reason{i}", "m")
        harness.recorder.post(stack(name="other", uid="b"), NORMAL, f"Reason{i}", "m")
    harness.flush()
    assert len(harness.sink.events) == 50
    assert harness.dropped("rate_limited") == 2


def test_dropped_repeats_still_count(harness: Harness) -> None:
    """Count-raising PATCHes spend tokens; the next PATCH that passes carries every repeat."""
    for _ in range(30):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    harness.flush()
    assert harness.sink.only().count == 25
    harness.clock.step(300)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    harness.flush()
    assert harness.sink.only().count == 31
