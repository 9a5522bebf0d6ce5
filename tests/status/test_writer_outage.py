"""The status writer survives API outages: no thread dies, no outcome is lost.

Unit tests answer the writer's requests from a fake apiserver behind the real API client
(its ``rest_client.request``), so failures can be scripted exactly; the last test takes
the real kube-apiserver down for longer than the writer's in-call retries last.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import rest
from prometheus_client import CollectorRegistry
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from controller import retry
from controller.cache import ObjectKey, Store
from controller.view import ReadYourWritesView
from status import conditions as cond
from status.writer import StatusTooLargeError, StatusWriter, merge_patch
from testbed.control_plane import ControlPlane
from tests.status.test_writer import (
    GROUP,
    PLURAL,
    VERSION,
    create_stack,
    get,
    reconciling_message,
    step,
    wait_for,
    written,
)

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
KEY = ObjectKey("ns", "s")
LOST = "lost"  # a scripted answer: apply the PATCH, then drop the connection

Answer = BaseException | tuple[int, str] | str


@pytest.fixture(autouse=True)
def reachable() -> Iterator[None]:
    """Each test starts (and leaves) the process-wide memory of outages empty."""
    retry.REACHABILITY.forget()
    yield
    retry.REACHABILITY.forget()


def refused() -> MaxRetryError:
    """What urllib3 raises once it gives up connecting to a stopped apiserver."""
    reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 111]")  # type: ignore[arg-type]
    return MaxRetryError(None, "/apis", reason)  # type: ignore[arg-type]


def _response(status: int, body: Mapping[str, Any]) -> rest.RESTResponse:
    raw = urllib3.HTTPResponse(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json"},
        preload_content=True,
    )
    return rest.RESTResponse(raw)


def _failure(status: int, message: str) -> rest.RESTResponse:
    return _response(status, {"kind": "Status", "status": "Failure", "message": message})


class FakeApiServer:
    """One Stack behind GET and status PATCH, with resourceVersion preconditions.

    ``script`` holds the answers to the next requests, in order: an exception to raise,
    ``(status, message)`` to answer, or ``LOST`` (apply the PATCH, then drop the answer).
    Once it is empty, requests are served normally.
    """

    def __init__(self) -> None:
        """A Stack at resourceVersion 1 with an empty status."""
        self.obj: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Stack",
            "metadata": {"namespace": KEY.namespace, "name": KEY.name, "resourceVersion": "1"},
            "status": {},
        }
        self.script: list[Answer] = []
        self.requests: list[str] = []
        self._lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> client.ApiClient:
        """An API client whose every request this fake answers."""
        api_client = client.ApiClient(client.Configuration(host="https://fake.invalid"))
        monkeypatch.setattr(api_client.rest_client, "request", self.request)
        return api_client

    def store(self) -> Store:
        """A Store caching the Stack as it is now (it will not follow later writes)."""
        store = Store()
        store.upsert(copy.deepcopy(self.obj))
        return store

    def someone_writes(self, status: Mapping[str, Any]) -> None:
        """Another client changes the status (bumps the resourceVersion)."""
        with self._lock:
            self._apply(dict(status))

    def request(self, method: str, url: str, **kwargs: Any) -> rest.RESTResponse:
        """Answer like the apiserver, or as scripted."""
        assert method == "GET" or url.endswith("/status"), "writes go to the subresource"
        with self._lock:
            self.requests.append(method)
            answer = self.script.pop(0) if self.script else None
            if isinstance(answer, BaseException):
                raise answer
            if isinstance(answer, tuple):
                return _failure(*answer)
            if method == "GET":
                return _response(200, self.obj)
            response = self._patch(kwargs["body"])
            if answer == LOST:
                raise ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
            return response

    def _patch(self, body: Mapping[str, Any]) -> rest.RESTResponse:
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            return _failure(409, "the object has been modified")
        self._apply(body["status"])
        return _response(200, self.obj)

    def _apply(self, patch: dict[str, Any]) -> None:
        self.obj["status"] = _merge(self.obj["status"], patch)
        rv = int(self.obj["metadata"]["resourceVersion"]) + 1
        self.obj["metadata"]["resourceVersion"] = str(rv)

    def patches(self) -> int:
        """How many PATCH requests arrived."""
        with self._lock:
            return self.requests.count("PATCH")

    def ready_message(self) -> str | None:
        """The Ready condition's message."""
        with self._lock:
            ready = cond.get_condition(self.obj["status"], cond.READY)
        return None if ready is None else str(ready["message"])


def _merge(old: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386: apply ``patch`` to ``old``."""
    new = dict(old)
    for key, value in patch.items():
        if value is None:
            new.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(old.get(key), Mapping):
            new[key] = _merge(old[key], value)
        else:
            new[key] = value
    return new


@pytest.fixture
def fake() -> FakeApiServer:
    """A fake apiserver holding one Stack."""
    return FakeApiServer()


def new_writer(
    fake: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    on_written: Callable[[Mapping[str, Any], Mapping[str, Any]], None] | None = None,
) -> tuple[StatusWriter, CollectorRegistry]:
    """A writer on ``fake`` without in-call retries, so that every failure reaches it."""
    registry = CollectorRegistry()
    writer = StatusWriter(
        fake.install(monkeypatch),
        ReadYourWritesView(fake.store()),
        GROUP,
        VERSION,
        PLURAL,
        registry,
        on_written=on_written,
        min_interval=0.01,
        retry_budget=0.0,
    )
    return writer, registry


def ready(message: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A conclusion whose Ready message is ``message``."""
    return lambda s: cond.succeeded(s, 1, message, NOW)


# -- the progress thread -------------------------------------------------------------------


def test_an_unexpected_error_does_not_end_the_progress_thread(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RuntimeError out of the API client: logged, the thread goes on, the next lands."""
    writer, registry = new_writer(fake, monkeypatch)
    fake.script = [RuntimeError("boom in the API client")]
    try:
        writer.publish(KEY, step("first"))
        wait_for(lambda: written(registry, "error") == 1, "the failed write")
        writer.publish(KEY, step("second"))
        wait_for(lambda: reconciling_message_of(fake) == "second", "the next progress write")
        assert writer.alive()
    finally:
        assert writer.close()


def test_a_transiently_failed_progress_intent_is_retried_until_it_lands(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three refused connections, nothing new published: the same intent lands afterwards."""
    writer, registry = new_writer(fake, monkeypatch)
    fake.script = [refused(), refused(), refused()]
    try:
        writer.publish(KEY, step("only"))
        wait_for(lambda: reconciling_message_of(fake) == "only", "the retried progress write")
        assert written(registry, "error") == 3
        assert writer.pending() == 0
        assert writer.alive()
    finally:
        assert writer.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_alive_is_false_once_the_progress_thread_has_died(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a BaseException that is not an Exception (here SystemExit) can end it."""
    writer, _ = new_writer(fake, monkeypatch)
    assert writer.alive()  # no thread yet: nothing has died

    def exit_thread(_status: Mapping[str, Any]) -> dict[str, Any]:
        raise SystemExit

    writer.publish(KEY, exit_thread)
    wait_for(lambda: not writer.alive(), "alive() to notice the dead thread")
    assert writer.close()
    assert writer.alive()  # a closed writer's thread ended on purpose


def reconciling_message_of(fake: FakeApiServer) -> str | None:
    """The Reconciling condition's message in the fake's status."""
    condition = cond.get_condition(fake.obj["status"], cond.RECONCILING)
    return None if condition is None else str(condition["message"])


# -- conclusions -------------------------------------------------------------------------


def test_a_conclusion_is_kept_through_an_outage_and_the_restart_window(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused twice, then 403 while the authorizer loads: update still lands it."""
    writer, registry = new_writer(fake, monkeypatch)
    fake.script = [refused(), refused(), (403, 'User "admin" cannot patch resource "stacks"')]
    assert writer.update(KEY, ready("done"))
    assert fake.ready_message() == "done"
    assert fake.patches() == 4
    assert written(registry, "error") == 3
    assert written(registry, "written") == 1


def test_a_403_without_an_outage_is_raised_at_once(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RBAC says no and the apiserver was never unreachable: not transient."""
    writer, _ = new_writer(fake, monkeypatch)
    fake.script = [(403, 'User "admin" cannot patch resource "stacks"')]
    with pytest.raises(client.ApiException) as raised:
        writer.update(KEY, ready("done"))
    assert raised.value.status == 403
    assert fake.patches() == 1


def test_a_conflict_while_retrying_re_reads_and_applies_the_mutation_to_fresh_data(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone writes during the outage: 409 after it, re-read, their field is kept."""
    writer, registry = new_writer(fake, monkeypatch)
    fake.someone_writes({"outputs": {"theirs": 1}})  # the writer's cache never sees it
    fake.script = [refused()]
    assert writer.update(KEY, ready("done"))
    assert fake.obj["status"]["outputs"] == {"theirs": 1}
    assert fake.ready_message() == "done"
    assert written(registry, "conflict") == 1
    assert fake.requests == ["PATCH", "PATCH", "GET", "PATCH"]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param((500, "etcdserver: request is too large"), id="etcd"),
        pytest.param((413, "Request entity too large: limit is 3145728"), id="body-limit"),
    ],
)
def test_a_status_too_large_raises_status_too_large_error_without_retrying(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch, answer: tuple[int, str]
) -> None:
    """Too large is final: one PATCH, a dedicated error the reconciler can act on."""
    writer, _ = new_writer(fake, monkeypatch)
    fake.script = [answer]
    with pytest.raises(StatusTooLargeError) as raised:
        writer.update(KEY, ready("done"))
    assert raised.value.status == answer[0]
    assert fake.patches() == 1


def test_close_ends_an_update_still_waiting_for_the_api(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closed writer stops retrying: the update raises its last error."""
    writer, _ = new_writer(fake, monkeypatch)
    fake.script = [refused() for _ in range(1000)]
    errors: list[BaseException] = []

    def conclude() -> None:
        try:
            writer.update(KEY, ready("done"))
        except Exception as err:  # noqa: BLE001 - the test inspects it
            errors.append(err)

    thread = threading.Thread(target=conclude)
    thread.start()
    wait_for(lambda: fake.patches() >= 2, "the update to retry")
    assert writer.close()
    thread.join(15)  # at most one 10 s backoff, cut short by close
    assert not thread.is_alive()
    assert len(errors) == 1
    assert isinstance(errors[0], MaxRetryError)


def test_a_write_whose_answer_was_lost_counts_as_written(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PATCH landed but the connection dropped: True, and on_written saw the change."""
    seen: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    writer, _ = new_writer(fake, monkeypatch, on_written=lambda old, new: seen.append((old, new)))
    fake.script = [LOST]
    assert writer.update(KEY, ready("done"))
    assert fake.ready_message() == "done"
    assert len(seen) == 1
    assert merge_patch(seen[0][0], seen[0][1]) == merge_patch({}, fake.obj["status"])


# -- the real apiserver ------------------------------------------------------------------


@contextlib.contextmanager
def apiserver_down(control_plane: ControlPlane) -> Iterator[None]:
    """kube-apiserver is killed for the block; it is running and ready again afterwards."""
    control_plane.stop_apiserver()
    try:
        yield
    finally:
        control_plane.start_apiserver()


class AliveSampler:
    """Samples ``alive()`` every 20 ms on a thread of its own; remembers any False."""

    def __init__(self, alive: Callable[[], bool]) -> None:
        """Start sampling."""
        self.samples = 0
        self.dead_seen = False
        self._alive = alive
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples += 1
            self.dead_seen |= not self._alive()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


@pytest.mark.integration
def test_progress_and_a_conclusion_survive_the_apiserver_being_down(
    control_plane: ControlPlane,
    api_client: client.ApiClient,
    stack_crd: Path,
    namespace: str,
) -> None:
    """kube-apiserver down for several in-call retry budgets, then back.

    (a) progress published after the outage is written: the progress thread survived
    failures that exhausted its in-call retries; (b) a conclusion started during the
    outage lands after it; (c) ``alive()`` is true throughout.
    """
    del stack_crd
    progress_key, progress_store, api = create_stack(api_client, namespace, "progress")
    update_key, update_store, _ = create_stack(api_client, namespace, "conclusion")
    budget = 1.0  # seconds of in-call retries; the outage outlasts several
    progress_metrics, update_metrics = CollectorRegistry(), CollectorRegistry()
    progress = StatusWriter(
        api_client, ReadYourWritesView(progress_store), GROUP, VERSION, PLURAL, progress_metrics,
        min_interval=0.2, retry_budget=budget,
    )  # fmt: skip
    conclusions = StatusWriter(
        api_client,
        ReadYourWritesView(update_store),
        GROUP,
        VERSION,
        PLURAL,
        update_metrics,
        retry_budget=budget,
    )
    progress.publish(progress_key, step("before"))
    wait_for(lambda: written(progress_metrics, "written") == 1, "the first progress write")
    sampler = AliveSampler(progress.alive)
    outcome: list[bool | BaseException] = []

    def conclude() -> None:
        try:
            outcome.append(conclusions.update(update_key, ready("concluded in an outage")))
        except Exception as err:  # noqa: BLE001 - the test reports it
            outcome.append(err)

    concluder = threading.Thread(target=conclude, daemon=True)
    try:
        with apiserver_down(control_plane):
            progress.publish(progress_key, step("during"))
            wait_for(lambda: (written(progress_metrics, "error") or 0) >= 2, "progress failures")
            concluder.start()
            wait_for(lambda: (written(update_metrics, "error") or 0) >= 2, "conclusion failures")
            assert progress.alive()
            assert concluder.is_alive()  # still trying, not raised
        progress.publish(progress_key, step("after"))
        wait_for(
            lambda: reconciling_message(api, namespace, "progress") == "after",
            "progress published after the outage",
            timeout=60,
        )
        concluder.join(60)
        assert outcome == [True]
        ready_condition = cond.get_condition(get(api, namespace, "conclusion")["status"], "Ready")
        assert ready_condition is not None
        assert ready_condition["message"] == "concluded in an outage"
    finally:
        sampler.stop()
        assert progress.close()
        assert conclusions.close()
    assert sampler.samples > 0
    assert not sampler.dead_seen
    assert progress.alive()
