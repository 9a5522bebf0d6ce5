"""Engine events: following the CLI's ``--event-log`` and turning its events into facts.

The CLI appends one JSON engine event per line to the file given with ``--event-log``.
``EventLog`` follows that file on a thread while the CLI runs; ``StepObserver`` counts one
step's events into ``Progress`` and keeps what the outcome needs: the change summary, the
error diagnostics and the root stack's outputs.

Events are read as the CLI writes them (JSON objects keyed ``diagnosticEvent``,
``summaryEvent``, ``resourcePreEvent``, ``resOutputsEvent``, ``resOpFailedEvent``; the
runner's contract tests pin these names against the real CLI). Unknown events are ignored.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from controller.clock import Clock, RealClock
from workspace.runner.types import PROGRESS_INTERVAL, Progress, ProgressCallback, Step

log = structlog.get_logger(__name__)

Event = Mapping[str, Any]  # one engine event, as the CLI wrote it
OnEvent = Callable[[Event], None]

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"  # the type of a stack's root resource
# How engine events mark a secret value: ``{SIG_KEY: SECRET_SIG, "ciphertext": ...}``.
SIG_KEY = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # noqa: S105 - a type tag, not a secret
_POLL_SECONDS = 0.2  # how often the follower looks for new lines
# A step started, finished, failed.
_STEP_EVENTS = ("resourcePreEvent", "resOutputsEvent", "resOpFailedEvent")
_COLOR = re.compile(r"<\{%[^%]*%\}>")  # the CLI's colour markers in diagnostic text


class EventLog:
    """A file for ``pulumi --event-log`` and a thread feeding its events to ``on_event``.

    Entering makes the file (in a new temporary directory) and starts a thread that
    follows it; leaving reads the file to its end (the CLI has exited by then, so the file
    is complete), stops the thread and deletes the directory. A line that does not parse
    is logged and skipped; nothing raises on the thread. ``on_event`` must not raise
    either (``StepObserver.on_event`` does not). ``consumed`` is how many characters the
    follower has read so far, a partial last line included.
    """

    def __init__(self, on_event: OnEvent) -> None:
        """Deliver every event of the file to ``on_event``, in order."""
        self._on_event = on_event
        self._dir = tempfile.TemporaryDirectory(prefix="pulumi-events-")
        self.path = Path(self._dir.name) / "events.jsonl"
        self.consumed = 0
        self._ended = threading.Event()  # the CLI exited: read to the end, then stop
        self._thread = threading.Thread(target=self._follow, name="pulumi-events", daemon=True)

    def __enter__(self) -> Path:
        """Make the (empty) log file, start following it, and return its path."""
        self.path.touch()
        self._thread.start()
        return self.path

    def __exit__(self, *exc: object) -> None:
        """Deliver the rest of the file, then delete it."""
        self._ended.set()
        self._thread.join()
        self._dir.cleanup()

    def _follow(self) -> None:
        partial = ""
        with self.path.open(encoding="utf-8", errors="replace") as log_file:
            while True:
                ended = self._ended.is_set()  # before the read, so no line is missed
                chunk = log_file.readline()
                self.consumed += len(chunk)
                line = partial + chunk
                if line.endswith("\n") or (ended and line):
                    partial = ""
                    self._deliver(line)
                elif ended:
                    return
                else:
                    partial = line  # nothing new, or half a line: wait for more
                    self._ended.wait(_POLL_SECONDS)

    def _deliver(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:  # one lost event must not stop the rest
            log.warning("Cannot parse an engine event", characters=len(line))
            return
        if isinstance(event, dict):
            self._on_event(event)


class StepObserver:
    """Counts one step's engine events into ``Progress``; keeps errors, changes and outputs.

    Events arrive on an ``EventLog`` thread; ``on_event`` never raises. ``report`` is
    called at most every ``interval`` seconds while the step runs, and ``flush`` sends the
    final state once (even if sooner). Reports are made under a lock, so they stay in
    order. A ``step`` of None observes a phase without progress (setup commands).
    """

    def __init__(
        self,
        step: Step | None,
        report: ProgressCallback,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Clock | None = None,
    ) -> None:
        """Observe ``step``, reporting to ``report``; intervals are measured on ``clock``."""
        self._step = step
        self._report = report
        self._interval = interval
        self._clock = clock or RealClock()
        self._lock = threading.Lock()
        self._started = self._done = self._failed = 0
        self._current: str | None = None
        self._summary: dict[str, int] | None = None
        self._sent: Progress | None = None  # the last report
        self._sent_at = -float("inf")
        self._errors: list[str] = []  # error diagnostics, resource ones first
        self._crash: str | None = None  # the first panic a plugin or language host printed
        self._outputs: dict[str, Any] | None = None

    @property
    def changes(self) -> dict[str, int]:
        """The engine's change summary (steps by operation), if it sent one; else empty."""
        with self._lock:
            return dict(self._summary or {})

    @property
    def errors(self) -> list[str]:
        """The step's error diagnostics, those of resources first.

        When a plugin or language host crashed (its ``panic:`` line reached the CLI's
        stderr diagnostics), that line comes last: the engine itself then only says
        ``error reading from server: EOF``, which names neither who died nor why.
        """
        with self._lock:
            crash = [f"a plugin or language host crashed: {self._crash}"] if self._crash else []
            return [*self._errors, *crash]

    @property
    def stack_outputs(self) -> dict[str, Any] | None:
        """The root stack's outputs after the step, as events carry them; None if none did.

        They come from the outputs event of the root ``pulumi:pulumi:Stack`` resource,
        which the engine sends whatever the step did to the stack (``same`` included).
        Secret values are ``{SIG_KEY: SECRET_SIG, ...}`` objects (see ``holds_secret``).
        """
        with self._lock:
            return None if self._outputs is None else dict(self._outputs)

    def on_event(self, event: Event) -> None:
        """Count one engine event; report progress if due."""
        try:
            with self._lock:
                if self._count(event) and self._clock.now() - self._sent_at >= self._interval:
                    self._send()
        except Exception:  # the follower's thread must never see it
            log.exception("Engine event handling failed")

    def flush(self) -> None:
        """Report the final state of the step, unless it was already reported."""
        with self._lock:
            if self._started or self._summary is not None:
                self._send()

    def _count(self, event: Event) -> bool:
        """Update the counts; True when progress changed."""
        if (diagnostic := event.get("diagnosticEvent")) is not None:
            self._note_diagnostic(diagnostic)
            return False
        if (summary := event.get("summaryEvent")) is not None:
            self._summary = changes(summary.get("resourceChanges"))
            return True
        for kind in _STEP_EVENTS:
            if (payload := event.get(kind)) is not None:
                return self._count_step(kind, payload.get("metadata") or {})
        return False

    def _count_step(self, kind: str, meta: Event) -> bool:
        """Count a step that started, finished or failed; provider steps do not count."""
        if kind == "resOutputsEvent":
            self._note_stack_outputs(meta)
        if _is_provider(meta):
            return False
        if kind == "resourcePreEvent":
            self._started += 1
            self._current = f"{meta.get('op', '')} {meta.get('urn', '')}"
        elif kind == "resOutputsEvent":
            self._done += 1
        else:
            self._failed += 1
        return True

    def _note_stack_outputs(self, meta: Event) -> None:
        new = meta.get("new")
        if meta.get("type") == ROOT_STACK_TYPE and isinstance(new, dict) and not new.get("parent"):
            self._outputs = dict(new.get("outputs") or {})

    def _note_diagnostic(self, diagnostic: Event) -> None:
        if diagnostic.get("severity") != "error":
            self._note_crash(diagnostic)
            return
        text = str(diagnostic.get("message", "")).strip()
        urn = diagnostic.get("urn")
        if urn:
            self._errors.insert(0, f"{str(urn).rsplit('::', 1)[-1]}: {text}")
        elif text not in self._errors:
            self._errors.append(text)

    def _note_crash(self, diagnostic: Event) -> None:
        """Keep the first ``panic:`` line a plugin or language host wrote to its stderr."""
        if self._crash is not None or diagnostic.get("severity") != "info#err":
            return
        text = _COLOR.sub("", str(diagnostic.get("message", ""))).strip()
        if text.startswith("panic: "):
            self._crash = text.splitlines()[0]

    def _send(self) -> None:
        if self._step is None:  # setup phases have no progress to report
            return
        total = max(self._started, sum((self._summary or {}).values()))
        progress = Progress(self._step, self._done, total, self._failed, self._current)
        if progress == self._sent:
            return
        self._sent, self._sent_at = progress, self._clock.now()
        self._report(progress)


def holds_secret(value: object) -> bool:
    """Whether a JSON value from an event is, or contains, a secret value."""
    if isinstance(value, dict):
        if value.get(SIG_KEY) == SECRET_SIG:
            return True
        return any(holds_secret(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_secret(item) for item in value)
    return False


def changes(counts: object) -> dict[str, int]:
    """A change summary (``{"create": 1, "same": 3}``) with string keys and int counts."""
    if not isinstance(counts, dict):
        return {}
    return {str(op): int(n) for op, n in counts.items()}


def _is_provider(meta: Event) -> bool:
    return str(meta.get("type", "")).startswith("pulumi:providers:")
