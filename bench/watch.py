"""A watch on one namespace's Stacks that timestamps every version as it arrives.

``StackWatch`` (started by ``with``) lists the namespace (every namespace for None), then a
thread watches from the list's resourceVersion (the operator's own
``CustomObjectsListWatcher``, renewed from the last resourceVersion when the server ends
it) and records ``Seen(arrived, type, object)`` with ``time.monotonic()`` taken as soon as
the event is decoded; ``ObjectWatch`` does the same for any list-watcher (run pods, say).
``wait_for`` blocks until a recorded version matches a predicate; ``modified`` counts
writes in a time window. An error ends the watch, and every later call raises it, so a
benchmark never waits on a dead stream.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from bench.running import Running
from controller.informer import CustomObjectsListWatcher, ListWatcher
from status.conditions import get_condition

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
WATCH_SECONDS = 3600  # per watch request; renewed when the server ends it


@dataclasses.dataclass(frozen=True)
class Seen:
    """One version of a Stack and when it arrived (``time.monotonic()``)."""

    arrived: float
    type: str
    obj: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The object's name."""
        return str(self.obj["metadata"]["name"])


Predicate = Callable[[Seen], bool]


class WatchError(RuntimeError):
    """The watch failed, or nothing matched in time."""


class ObjectWatch(Running):
    """Records every version of the objects of a list-watcher; see the module docstring."""

    def __init__(self, lw: ListWatcher, kind: str) -> None:
        """Prepare (not start) a watch through ``lw`` of objects of ``kind`` (for messages)."""
        self._lw, self._kind = lw, kind
        self._seen: list[Seen] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._rv = ""

    def start(self) -> None:
        """List, then start watching from the list's resourceVersion."""
        self._rv = str(self._lw.list(500, None)["metadata"]["resourceVersion"])
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (closing the stream; re-sent, as a stream may open just after)."""
        self._stop.set()
        deadline = time.monotonic() + 10
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._lw.stop()
            self._thread.join(0.1)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in self._lw.watch(self._rv, WATCH_SECONDS):
                    seen = Seen(time.monotonic(), str(event["type"]), event["object"])
                    self._rv = str(seen.obj["metadata"]["resourceVersion"])
                    if seen.type != "BOOKMARK":
                        with self._cond:
                            self._seen.append(seen)
                            self._cond.notify_all()
        except Exception as err:  # noqa: BLE001 - handed to the waiting benchmark
            if not self._stop.is_set():
                with self._cond:
                    self._error = err
                    self._cond.notify_all()

    def wait_for(self, predicate: Predicate, timeout: float, *, after: float = 0.0) -> Seen:
        """The first version arrived after ``after`` that matches; waits up to ``timeout`` s.

        Raises:
            WatchError: nothing matched in time, or the watch failed.
        """
        deadline = time.monotonic() + timeout
        index = 0
        with self._cond:
            while True:
                for seen in self._seen[index:]:
                    if seen.arrived >= after and predicate(seen):
                        return seen
                index = len(self._seen)
                if self._error is not None:
                    msg = f"the watch failed: {self._error}"
                    raise WatchError(msg) from self._error
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"no matching {self._kind} version within {timeout:.0f}s"
                    raise WatchError(msg)
                self._cond.wait(left)

    def versions(self, name: str, start: float, end: float) -> list[Seen]:
        """The versions of object ``name`` that arrived between ``start`` and ``end``."""
        with self._cond:
            return [s for s in self._seen if s.name == name and start <= s.arrived < end]

    def seen(self) -> list[Seen]:
        """Every version recorded so far, in order of arrival."""
        with self._cond:
            return list(self._seen)

    def modified(self, start: float, end: float) -> int:
        """Versions (writes of any kind) that arrived between ``start`` and ``end``."""
        with self._cond:
            return sum(1 for s in self._seen if start <= s.arrived < end)


class StackWatch(ObjectWatch):
    """Records every Stack version in a namespace (None: all); see the module docstring."""

    def __init__(self, api: client.ApiClient, namespace: str | None) -> None:
        """Prepare (not start) a watch on ``namespace``."""
        super().__init__(CustomObjectsListWatcher(api, GROUP, VERSION, PLURAL, namespace), "Stack")


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """A condition of a Stack's status, or None."""
    return get_condition(obj.get("status") or {}, type_)


def observed(obj: Mapping[str, Any]) -> int:
    """``status.observedGeneration`` (-1 when absent)."""
    return int((obj.get("status") or {}).get("observedGeneration", -1))


def is_true(obj: Mapping[str, Any], type_: str) -> bool:
    """The Stack shows condition ``type_`` with status ``True``."""
    found = condition(obj, type_)
    return found is not None and found.get("status") == "True"


def version_of(name: str, generation: int, test: Callable[[Mapping[str, Any]], bool]) -> Predicate:
    """Matches a version of ``name`` with ``generation`` observed whose object passes ``test``."""

    def check(seen: Seen) -> bool:
        return seen.name == name and observed(seen.obj) == generation and test(seen.obj)

    return check


def reconciling(name: str, generation: int) -> Predicate:
    """Matches ``name`` showing Reconciling=True with ``observedGeneration == generation``."""
    return version_of(name, generation, lambda obj: is_true(obj, "Reconciling"))


def concluded(name: str, generation: int) -> Predicate:
    """Matches ``name`` with ``generation`` observed and no run in flight (Reconciling gone)."""
    return version_of(name, generation, lambda obj: condition(obj, "Reconciling") is None)


def ready(name: str, generation: int) -> Predicate:
    """Matches ``name`` showing Ready=True for ``generation``."""
    return version_of(name, generation, lambda obj: is_true(obj, "Ready"))
