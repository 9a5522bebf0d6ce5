"""The status witness: every version of every Stack in a namespace, recorded and judged.

Role: an independent witness of the status contract (``docs/status-contract.md``).
``StackWatcher`` records every version of every Stack in a namespace through a watch, judges
each one as it arrives with ``check`` against the version before it (the rules every write
keeps), and at the end judges the last version of each Stack as a settled state with
``check_final`` and ``unhandled_request``, including what kstatus (``testbed.kstatus``)
and Argo CD (``tests.status.argo_health``) make of it. The rules, and when each applies, are
in ``tests.status.status_rules``; this module re-exports its public names.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Self, cast

from kubernetes import client, watch
from urllib3.exceptions import HTTPError

from tests.status import churn_rules
from tests.status.status_rules import (
    Violation,
    check,
    check_final,
    expected_outcome,
    unhandled_request,
)
from tests.status.status_view import READY, RECONCILING, STALLED, Obj, StatusView, mapping_of

__all__ = [
    "Observation",
    "StackWatcher",
    "Violation",
    "check",
    "check_final",
    "expected_outcome",
    "unhandled_request",
]

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """One version of one Stack as the watcher saw it, and what ``check`` found in it."""

    event: str  # LISTED (a list or relist), ADDED, MODIFIED or DELETED
    obj: Obj
    violations: tuple[Violation, ...]
    after_gap: bool = False  # versions may have been missed just before this one
    seen_at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def resource_version(self) -> str:
        """The version's ``metadata.resourceVersion``."""
        return str(mapping_of(self.obj.get("metadata")).get("resourceVersion", ""))


class StackWatcher:
    """Records and checks every version of every ``stacks.pulumi.com`` in one namespace.

    Entering lists the namespace's Stacks, then a thread watches from the list's
    resourceVersion: each watch ends after ``timeout_seconds`` and is renewed from the last
    resourceVersion seen (bookmarks included), so no version is lost; a 410 Gone relists
    (versions may be missed then, so the next one is not compared with the last recorded);
    other errors pause briefly and watch again from the last resourceVersion. Every version
    is deep-copied and checked against the one before it as it arrives (intermediate
    rules); ``final_check`` applies the final-state rules to the last version of each Stack
    that still exists. Exiting stops the watch (closing its socket; the ProtocolError that
    a closed stream raises is swallowed) and joins the thread within ``join_timeout``.

    All methods are thread-safe. ``observe`` is what the thread calls for each version; it
    is public so that unit tests can feed versions without a cluster.
    """

    RETRY_DELAY = 0.5  # seconds after a failed watch or list before the next attempt

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        timeout_seconds: int = 30,
        join_timeout: float = 10.0,
    ) -> None:
        """Prepare a watcher; nothing runs until ``start`` (or ``with``)."""
        self._api = client.CustomObjectsApi(api_client)
        self._namespace = namespace
        self._timeout = timeout_seconds
        self._join_timeout = join_timeout
        self._lock = threading.Condition()
        self._history: dict[str, list[Observation]] = {}  # name -> versions, oldest first
        self._gone: set[str] = set()  # names whose last event was a deletion
        self._errors: list[str] = []  # failures that may have lost versions
        self._restarts = 0  # watches renewed after their timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None  # the stream in flight, for stop()

    def __enter__(self) -> Self:
        """Start watching."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop watching."""
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """List the namespace's Stacks, then watch them from a thread."""
        if self._thread is not None:
            raise RuntimeError("StackWatcher.start() called twice")
        resource_version = self._list(gap=False)
        self._thread = threading.Thread(
            target=self._run,
            args=(resource_version,),
            name=f"stack-watcher-{self._namespace}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the watch and join the thread (a thread still alive is recorded as an error)."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        thread.join(0)
        waited = 0.0
        while thread.is_alive() and waited < self._join_timeout:
            stream = self._watch
            if stream is not None:  # re-sent: a stream may start just after the first try
                stream.stop()
            thread.join(0.1)
            waited += 0.1
        if thread.is_alive():
            self._fail(f"the watch thread did not stop within {self._join_timeout} s")

    def _run(self, resource_version: str) -> None:
        relist = False
        try:
            while not self._stop.is_set():
                try:
                    if relist:
                        resource_version, relist = self._list(gap=True), False
                    else:
                        resource_version = self._watch_once(resource_version)
                except client.ApiException as err:
                    relist = err.status == 410  # our resourceVersion expired: relist
                    if not relist:
                        self._pause(err)
                except (HTTPError, OSError) as err:  # ProtocolError: a stream closed by stop()
                    self._pause(err)
        except Exception as err:  # noqa: BLE001 - the thread must report its death, not hide it
            self._fail(f"the watch thread failed: {err!r}")

    def _pause(self, err: Exception) -> None:
        if self._stop.is_set():
            return
        log.warning("Stack watch failed; watching again: %s", err)
        self._stop.wait(self.RETRY_DELAY)

    def _list(self, *, gap: bool) -> str:
        listing = cast(
            "Obj",
            self._api.list_namespaced_custom_object(GROUP, VERSION, self._namespace, PLURAL),
        )
        items = [item for item in listing.get("items") or () if isinstance(item, Mapping)]
        names = {str(mapping_of(item.get("metadata")).get("name")) for item in items}
        with self._lock:
            self._gone.update(set(self._history) - names)
        for item in items:
            if not self._recorded(item):
                self.observe("LISTED", item, gap=gap)
        return str(mapping_of(listing.get("metadata")).get("resourceVersion", ""))

    def _watch_once(self, resource_version: str) -> str:
        stream = watch.Watch()
        self._watch = stream
        try:
            if self._stop.is_set():  # stop() may have run before self._watch was set
                return resource_version
            for event in stream.stream(
                self._api.list_namespaced_custom_object,
                GROUP, VERSION, self._namespace, PLURAL,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._timeout,
                _request_timeout=(10, self._timeout + 30),
            ):  # fmt: skip
                raw: Obj = event["raw_object"]
                resource_version = str(mapping_of(raw.get("metadata")).get("resourceVersion", ""))
                if event["type"] != "BOOKMARK":
                    self.observe(str(event["type"]), raw)
        finally:
            self._watch = None
        if not self._stop.is_set():
            with self._lock:
                self._restarts += 1
                self._lock.notify_all()
        return resource_version

    def _fail(self, message: str) -> None:
        log.error("StackWatcher: %s", message)
        with self._lock:
            self._errors.append(message)

    # -- recording ---------------------------------------------------------------------

    def observe(self, event: str, obj: Obj, *, gap: bool = False) -> None:
        """Record one version and check it against the version recorded before it.

        ``gap``: versions may have been missed just before this one (a relist after 410),
        so it is checked on its own.
        """
        snapshot = copy.deepcopy(dict(obj))
        name = str(mapping_of(snapshot.get("metadata")).get("name"))
        with self._lock:
            history = self._history.setdefault(name, [])
            previous = history[-1].obj if history and not gap else None
            violations = tuple(check(snapshot, previous))
            history.append(Observation(event, snapshot, violations, after_gap=gap))
            if event == "DELETED":
                self._gone.add(name)
            else:
                self._gone.discard(name)
            self._lock.notify_all()

    def _recorded(self, obj: Obj) -> bool:
        metadata = mapping_of(obj.get("metadata"))
        with self._lock:
            history = self._history.get(str(metadata.get("name")), [])
            return bool(history) and history[-1].resource_version == str(
                metadata.get("resourceVersion")
            )

    # -- reading -----------------------------------------------------------------------

    @property
    def restarts(self) -> int:
        """How many watches ended at their timeout and were renewed."""
        with self._lock:
            return self._restarts

    def wait_for_restarts(self, count: int, timeout: float = 10.0) -> None:
        """Block until at least ``count`` watches have been renewed (else TimeoutError)."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._restarts >= count, timeout):
                msg = f"the watch was renewed {self._restarts} times, not {count}"
                raise TimeoutError(msg)

    def names(self) -> list[str]:
        """Names of every Stack seen, sorted."""
        with self._lock:
            return sorted(self._history)

    def observations(self, name: str) -> list[Observation]:
        """Every recorded version of Stack ``name``, oldest first."""
        with self._lock:
            return list(self._history.get(name, ()))

    def transitions(self, since: float = 0.0) -> collections.Counter[tuple[str, str, str]]:
        """Condition flips seen in versions recorded at or after ``since`` (monotonic time).

        A flip is a condition that appeared or changed ``status`` from one version to the
        next — exactly when ``lastTransitionTime`` must move — counted by (type, new status,
        new reason) over all Stacks, as the operator's transition counter counts them.
        Versions after a gap are not compared.
        """
        flips: collections.Counter[tuple[str, str, str]] = collections.Counter()
        with self._lock:
            histories = [list(h) for h in self._history.values()]
        for history in histories:
            for before, after in itertools.pairwise(history):
                if after.seen_at < since or after.after_gap or after.event == "DELETED":
                    continue
                old, new = StatusView.of(before.obj), StatusView.of(after.obj)
                for type_ in (READY, RECONCILING, STALLED):
                    now = new.condition(type_)
                    if now is not None and old.state(type_) != now.get("status"):
                        flips[(type_, str(now.get("status")), str(now.get("reason")))] += 1
        return flips

    def versions(self, name: str) -> list[Obj]:
        """Every recorded object version of Stack ``name``, oldest first."""
        return [o.obj for o in self.observations(name)]

    def wait_for(self, name: str, resource_version: str, timeout: float = 10.0) -> None:
        """Block until version ``resource_version`` of ``name`` is recorded (else TimeoutError)."""

        def seen() -> bool:
            return any(o.resource_version == resource_version for o in self._history.get(name, ()))

        with self._lock:
            if not self._lock.wait_for(seen, timeout):
                msg = f"the watcher did not see {name} at resourceVersion {resource_version}"
                raise TimeoutError(msg)

    def violations(self) -> list[Violation]:
        """Violations found in the versions as they arrived (intermediate and transition rules)."""
        with self._lock:
            return [v for history in self._history.values() for o in history for v in o.violations]

    def final_check(self) -> list[Violation]:
        """Final-state rules and the request history on the last version of each existing Stack.

        Status contract rules 1, 3, 6, 8, 9, 15, 17 and 18 (see ``status_rules``).
        """
        with self._lock:
            alive = {n: list(h) for n, h in self._history.items() if n not in self._gone}
        found: list[Violation] = []
        for name in sorted(alive):
            history = alive[name]
            found += check_final(history[-1].obj)
            found += unhandled_request([o.obj for o in history])
        return found

    def churn_violations(self) -> list[str]:
        """Status contract rule 30 on every Stack seen: no status rewritten in a loop."""
        found = []
        for name in self.names():
            key = f"{self._namespace}/{name}"
            found += [
                f"{key} status contract rule {churn_rules.RULE}: {wrong}"
                for wrong in churn_rules.violations(self.observations(name))
            ]
        return found

    def assert_clean(self, *, final: bool = True) -> None:
        """Fail listing every violation (and watcher failure); ``final`` adds ``final_check``.

        Rule 30 (``churn_violations``) is checked too.
        """
        found = [str(v) for v in self.violations() + (self.final_check() if final else [])]
        found += self.churn_violations()
        with self._lock:
            found += [f"{self._namespace}: the watch failed: {e}" for e in self._errors]
        if found:
            lines = "\n".join(f"  {line}" for line in found)
            msg = f"{len(found)} status invariant violation(s):\n{lines}"
            raise AssertionError(msg)
