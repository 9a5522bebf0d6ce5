"""The event recorder (``status.events``): limits, fields, retries, the queue, shutdown.

Unit tests drive a fake CoreV1Api (``FakeSink``, which keeps the Events it was sent) with
a ``FakeClock``; timestamps follow the fake clock. The same recorder against the real
apiserver is in ``test_events_apiserver``.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from status import events
from status.events import NORMAL, WARNING
from tests.status.event_fakes import FIELD_MANAGER, FLUSH, T0, Harness, api_error, stack

# -- limits and fields --------------------------------------------------------------------


def test_fields_are_cut_to_the_api_limits() -> None:
    """Message ≤ 1024 bytes (marked), reason/action/instance ≤ 128, name ≤ 253."""
    h = Harness(instance="i" * 300)
    try:
        long_name = "a" * 250 + "-b"
        h.recorder.post(stack(name=long_name), WARNING, "R" * 200, "x" * 5000)
        h.recorder.post(stack(uid="2"), WARNING, "UpdateFailed", "é" * 2000)
        h.flush()
    finally:
        assert h.recorder.close(FLUSH)
    long_event, accented = h.sink.events.values()
    long_message, accented_message = str(long_event.message), str(accented.message)
    assert len(long_message.encode()) <= 1024
    assert long_message.endswith("…")
    assert len(long_event.reason or "") == 128
    assert len(long_event.action or "") == 128
    assert len(long_event.reporting_instance or "") == 128
    assert len(accented_message.encode()) <= 1024
    assert accented_message.startswith("éé")
    name = str(long_event.metadata.name)
    assert len(name) <= 253
    assert re.fullmatch(r"a+\.[0-9a-f]+", name)


def test_event_fields(harness: Harness) -> None:
    """Source, reporting fields, action and involvedObject are filled in."""
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up", action="Update")
    harness.flush()
    event = harness.sink.only()
    assert event.source is not None
    assert event.source.component == "pulumi-stack-operator"
    assert (event.reporting_component, event.reporting_instance) == (events.COMPONENT, "pod-0")
    assert event.action == "Update"
    assert event.metadata is not None
    assert event.metadata.namespace == "ns"
    ref = event.involved_object
    assert (ref.api_version, ref.kind, ref.name, ref.namespace, ref.uid, ref.resource_version) == (
        "pulumi.com/v1",
        "Stack",
        "web",
        "ns",
        "uid-1",
        "1",
    )
    assert event.first_timestamp == event.last_timestamp == T0
    assert event.first_timestamp is not None
    assert event.first_timestamp.tzinfo is not None


def test_every_write_carries_the_field_manager(harness: Harness) -> None:
    """The CREATE and the PATCH of a repeat are both written as the recorder's manager."""
    for _ in range(2):
        harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
        harness.flush()
    assert [verb for verb, _ in harness.sink.calls] == ["create", "patch"]
    assert harness.sink.field_managers == [FIELD_MANAGER, FIELD_MANAGER]


def test_a_message_loses_its_terminal_codes(harness: Harness) -> None:
    """A program's colours and control characters never reach an Event's message."""
    message = "\x1b[31mError\x1b[0m: cannot access a property\r\n  on Pulumi.yaml line 3:"
    harness.recorder.post(stack(), WARNING, "UpdateFailed", message)
    harness.flush()
    assert harness.sink.only().message == (
        "Error: cannot access a property\n  on Pulumi.yaml line 3:"
    )


@pytest.mark.parametrize(
    ("obj", "type_"),
    [
        pytest.param(stack(), "Error", id="type"),
        pytest.param({"kind": "Stack"}, NORMAL, id="no-metadata"),
        pytest.param({"metadata": {"namespace": "ns"}}, NORMAL, id="no-name"),
        pytest.param(None, NORMAL, id="not-a-mapping"),
    ],
)
def test_invalid_posts_are_refused_without_raising(harness: Harness, obj: Any, type_: str) -> None:
    """A malformed post is logged and dropped; post() still returns normally."""
    harness.recorder.post(obj, type_, "Reason", "m")
    harness.flush()
    assert harness.sink.calls == []
    assert harness.dropped("invalid") == (0 if obj is None else 1)


# -- failures, queue, shutdown ------------------------------------------------------------


def test_failing_api_never_raises_and_drops_after_the_retries(harness: Harness) -> None:
    """Transient failures are tried MAX_TRIES times, waiting on the clock, then dropped."""
    harness.sink.always_fail = api_error(503)
    harness.recorder.post(stack(), WARNING, "UpdateFailed", "boom")
    for _ in range(events.MAX_TRIES - 1):
        assert harness.clock.wait_for_waiters(1)  # the worker sleeps before its next try
        harness.clock.step(events.RETRY_INTERVAL)
    harness.flush()
    assert len(harness.sink.calls) == events.MAX_TRIES
    assert harness.total("failed", WARNING) == 1
    assert harness.total("created", WARNING) == 0
    # The worker survived: the next event goes through.
    harness.sink.always_fail = None
    harness.recorder.post(stack(), NORMAL, "UpdateSucceeded", "ok")
    harness.flush()
    assert harness.total("created") == 1


def test_a_transient_failure_is_retried(harness: Harness) -> None:
    """A connection error, then success: one Event, written on the second try."""
    harness.sink.failures = [ConnectionResetError("reset")]
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert harness.clock.wait_for_waiters(1)
    harness.clock.step(events.RETRY_INTERVAL)
    harness.flush()
    assert len(harness.sink.calls) == 2
    assert harness.sink.only().count == 1
    assert harness.total("created") == 1


def test_a_rejected_event_is_not_retried(harness: Harness) -> None:
    """A 4xx answer (here 422) is final: one call, counted as failed, no wait."""
    harness.sink.failures = [api_error(422)]
    harness.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    harness.flush()
    assert len(harness.sink.calls) == 1
    assert harness.total("failed") == 1


def test_a_slow_api_never_blocks_post_and_the_queue_is_bounded(harness: Harness) -> None:
    """While a CREATE hangs, posts return; beyond QUEUE_SIZE queued writes they are dropped."""
    harness.sink.gate = gate = threading.Event()
    harness.recorder.post(stack(uid="first"), NORMAL, "UpdateStarted", "up")
    assert harness.sink.entered.wait(FLUSH)  # the worker holds the first write

    def post_many() -> None:
        for i in range(events.QUEUE_SIZE + 1):
            harness.recorder.post(stack(uid=f"u{i}"), NORMAL, "UpdateStarted", "up")

    poster = threading.Thread(target=post_many)
    poster.start()
    poster.join(FLUSH)
    assert not poster.is_alive(), "post() blocked on a slow apiserver"
    assert harness.dropped("queue_full") == 1
    gate.set()
    harness.flush()
    assert len(harness.sink.events) == events.QUEUE_SIZE + 1


def test_close_finishes_the_queue_and_refuses_later_posts() -> None:
    """close() writes what was queued, joins the thread; later posts are dropped."""
    h = Harness()
    h.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert h.recorder.close(FLUSH)
    assert len(h.sink.events) == 1
    h.recorder.post(stack(), NORMAL, "UpdateSucceeded", "ok")
    assert h.dropped("closed") == 1
    assert h.recorder.flush(0)


def test_close_cuts_retry_waits_short() -> None:
    """A write waiting to retry gives up at close() instead of sleeping on."""
    h = Harness()
    h.sink.always_fail = api_error(503)
    h.recorder.post(stack(), NORMAL, "UpdateStarted", "up")
    assert h.clock.wait_for_waiters(1)
    assert h.recorder.close(FLUSH)  # no clock step: close() alone ends the wait
    assert len(h.sink.calls) == 1
    assert h.total("failed") == 1


def test_every_series_is_registered_before_any_event() -> None:
    """Both counters expose all their label values at zero (an idle proof reads them)."""
    h = Harness()
    try:
        for type_ in (NORMAL, WARNING):
            for result in ("created", "patched", "failed", "dropped"):
                assert h.total(result, type_) == 0
        for reason in ("rate_limited", "queue_full", "closed", "invalid"):
            assert h.dropped(reason) == 0
    finally:
        assert h.recorder.close(FLUSH)
