"""Engine events: the event-log follower, the step observer, and what ``up`` takes from them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.clock import FakeClock
from tests.workspace.runner.support import (
    SECRET_VALUE,
    ArgvSpy,
    ProgressLog,
    run,
    subcommands,
    succeeded,
    wait_for,
)
from workspace.runner import LocalRunner, UpdateRequest
from workspace.runner.engine import (
    SECRET_SIG,
    SIG_KEY,
    Event,
    EventLog,
    StepObserver,
    holds_secret,
)
from workspace.runner.types import MASK


@pytest.mark.pulumi
def test_up_reads_outputs_and_changes_from_its_events_not_more_cli_calls(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    target: Path,
    argv_spy: ArgvSpy,
) -> None:
    """``up`` needs no ``stack output``/``stack history``; outputs and changes stay right."""
    request = make_request({"content": "same"}, secret_config={"pw": SECRET_VALUE})
    first = run(runner, request)
    assert succeeded(first)
    assert subcommands(argv_spy.argvs) == [
        ("stack", "select"),  # --create: one command makes the new stack
        ("config", "set"),  # the secret; plain config is written into Pulumi.dev.yaml
        ("up",),
    ]
    argv_spy.argvs.clear()

    outcome = run(runner, request)

    assert succeeded(outcome)
    # The home selected the stack before: no `stack select` this time.
    assert subcommands(argv_spy.argvs) == [("config", "set"), ("up",)]
    assert first.resource_changes == {"create": 2}
    assert outcome.resource_changes == {"same": 2}
    expected = {"path": str(target), "content": "same", "secretContent": MASK}
    assert first.outputs == outcome.outputs == expected
    assert SECRET_VALUE not in repr(outcome)
    assert argv_spy.proc_hits == []


@pytest.mark.pulumi
def test_every_engine_operation_runs_with_an_event_log(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], argv_spy: ArgvSpy
) -> None:
    """refresh, up, preview and destroy all run the CLI the same way: with ``--event-log``."""
    assert succeeded(run(runner, make_request(refresh=True)))
    assert succeeded(run(runner, make_request(preview=True)))
    stop = threading.Event()
    assert succeeded(runner.destroy(make_request(), on_progress=ProgressLog(), stop=stop))

    operations = ("refresh", "up", "preview", "destroy")
    engine = [argv for argv in argv_spy.argvs if len(argv) > 2 and argv[2] in operations]
    assert [argv[2] for argv in engine] == ["refresh", "up", "preview", "destroy"]
    assert all("--event-log" in argv for argv in engine)


@pytest.mark.pulumi
def test_outputs_are_read_with_one_masked_stack_output_if_no_event_carried_them(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    target: Path,
    argv_spy: ArgvSpy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback: ``stack output --json`` without ``--show-secrets``, secrets masked."""
    monkeypatch.setattr(StepObserver, "_note_stack_outputs", lambda *_: None)
    request = make_request({"content": "read"}, secret_config={"pw": SECRET_VALUE})

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert subcommands(argv_spy.argvs)[-2:] == [("up",), ("stack", "output")]
    assert not [argv for argv in argv_spy.argvs if "--show-secrets" in argv]
    assert outcome.outputs == {"path": str(target), "content": "read", "secretContent": MASK}
    assert SECRET_VALUE not in repr(outcome)


def step_event(*, started: bool, urn: str) -> Event:
    """An engine event for a create step of ``urn`` that started, or finished."""
    meta = {"op": "create", "urn": urn, "type": "t:m:R", "provider": ""}
    key = "resourcePreEvent" if started else "resOutputsEvent"
    return {"sequence": 0, "timestamp": 0, key: {"metadata": meta}}


def test_progress_is_reported_at_most_once_per_interval_then_flushed() -> None:
    """Events within one interval make one report; the step's end flushes the last state."""
    clock = FakeClock()
    reports = ProgressLog()
    observer = StepObserver("update", reports, interval=1.0, clock=clock)

    observer.on_event(step_event(started=True, urn="urn:a"))
    observer.on_event(step_event(started=True, urn="urn:b"))
    clock.step(0.5)
    observer.on_event(step_event(started=False, urn="urn:a"))
    clock.step(0.5)
    observer.on_event(step_event(started=False, urn="urn:b"))
    observer.flush()
    observer.flush()

    assert [(p.resources_done, p.resources_total, p.current) for p in reports.reports] == [
        (0, 1, "create urn:a"),
        (2, 2, "create urn:b"),
    ]


def test_provider_steps_failures_summary_and_diagnostics_are_counted_apart() -> None:
    """Provider steps do not count; failures, the summary and error diagnostics do."""
    observer = StepObserver("update", ProgressLog())
    provider = {"op": "create", "urn": "urn:p", "type": "pulumi:providers:aws"}

    observer.on_event({"resourcePreEvent": {"metadata": provider}})
    observer.on_event({"resOpFailedEvent": {"metadata": {"type": "t:m:R", "urn": "urn:r"}}})
    observer.on_event({"diagnosticEvent": {"severity": "info", "message": "hi"}})
    observer.on_event({"diagnosticEvent": {"severity": "error", "message": "general\n"}})
    observer.on_event({"diagnosticEvent": {"severity": "error", "message": "general\n"}})
    observer.on_event(
        {"diagnosticEvent": {"severity": "error", "message": "bad", "urn": "urn:x::res"}}
    )
    observer.on_event({"summaryEvent": {"resourceChanges": {"create": 1, "same": 2}}})
    observer.on_event({"unknownEvent": {}})

    assert observer.errors == ["res: bad", "general"]
    assert observer.changes == {"create": 1, "same": 2}


def test_a_crashed_plugin_or_language_host_is_named_after_the_engines_error() -> None:
    """A panic on a plugin's stderr follows the engine's bare EOF; other stderr does not.

    As pulumi-language-yaml 1.25 writes it when it asserts on a ``get`` of a Kubernetes
    resource (whose schema has constant properties): the engine itself only says EOF.
    """
    observer = StepObserver("update", ProgressLog())
    err = "info#err"
    observer.on_event({"diagnosticEvent": {"severity": err, "message": "<{%reset%}>warming up"}})
    panic = "<{%reset%}>panic: fatal: An assertion has failed: Failed to check that\n<{%reset%}>"
    observer.on_event({"diagnosticEvent": {"severity": err, "message": panic}})
    again = "panic: a second one"
    observer.on_event({"diagnosticEvent": {"severity": err, "message": again}})
    eof = "error reading from server: EOF"
    observer.on_event({"diagnosticEvent": {"severity": "error", "message": eof}})

    crashed = "a plugin or language host crashed: panic: fatal: An assertion has failed: "
    assert observer.errors == [eof, crashed + "Failed to check that"]


def test_event_log_delivers_every_event_in_order_and_skips_bad_lines() -> None:
    """Lines written in pieces, a bad line, and a last line without newline: all handled."""
    seen: list[Event] = []
    lines = [json.dumps({"sequence": n, "timestamp": 0, "cancelEvent": {}}) for n in range(3)]
    follower = EventLog(seen.append)

    with follower as path, path.open("a", encoding="utf-8") as log:
        log.write(lines[0][:10])
        log.flush()
        wait_for(lambda: follower.consumed == 10, timeout=10)  # it read half a line
        log.write(lines[0][10:] + "\nnot json\n" + lines[1] + "\n[1, 2]\n" + lines[2])
        log.flush()

    assert [event["sequence"] for event in seen] == [0, 1, 2]
    assert not path.exists()


def test_an_output_holding_a_secret_anywhere_is_secret() -> None:
    """The engine marks secrets with a signature; nested ones make the whole output secret."""
    secret = {SIG_KEY: SECRET_SIG, "ciphertext": "[secret]"}
    assert holds_secret(secret)
    assert holds_secret({"nested": [1, {"deep": secret}]})
    assert not holds_secret({"plain": [1, {"deep": "x"}]})
    assert not holds_secret("text")


def test_observer_keeps_the_root_stacks_outputs_only() -> None:
    """Outputs come from the root ``pulumi:pulumi:Stack``, not from other resources."""
    observer = StepObserver("update", ProgressLog())

    def outputs_event(type_: str, parent: str, outputs: dict[str, Any]) -> Event:
        urn = f"urn:{type_}"
        new = {"type": type_, "urn": urn, "parent": parent, "outputs": outputs}
        return {
            "resOutputsEvent": {"metadata": {"op": "same", "urn": urn, "type": type_, "new": new}}
        }

    assert observer.stack_outputs is None
    observer.on_event(outputs_event("pulumi:pulumi:Stack", "", {"a": 1}))
    observer.on_event(outputs_event("pulumi:pulumi:Stack", "urn:other", {"b": 2}))
    observer.on_event(outputs_event("t:m:R", "", {"c": 3}))

    assert observer.stack_outputs == {"a": 1}


def test_a_malformed_event_never_raises_into_the_follower() -> None:
    """An event of the wrong shape is logged; the observer keeps working."""
    reports = ProgressLog()
    observer = StepObserver("update", reports)

    observer.on_event({"resourcePreEvent": "not an object"})
    observer.on_event(step_event(started=True, urn="urn:a"))
    observer.flush()

    assert [(p.resources_total, p.current) for p in reports.reports] == [(1, "create urn:a")]
