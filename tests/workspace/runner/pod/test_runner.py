"""``PodRunner`` against a fake pods API: creating, following, concluding, detaching.

The real thing runs on the test node (``tests/node/test_pod_runner.py``); here each pod
state the kubelet can report is played out, including ones that are slow to reach there.
The fake serves watches as the API server does (a line per event), so a run is followed
by its pod's changes; timeouts run on a fake clock.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import queue
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from controller.clock import Clock, FakeClock
from workspace.runner import (
    Detached,
    ErrorKind,
    Outcome,
    PodRunner,
    Progress,
    RunJob,
    RunResult,
    StopSignal,
    UpdateRequest,
)
from workspace.runner.channel import outcome_line, progress_line
from workspace.runner.job import Owner
from workspace.runner.pod import run as podrun
from workspace.runner.pod.api import PodChanges
from workspace.runner.pod.spec import ANNOTATION_CONCLUDED, run_pod

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
JOB = RunJob(
    namespace="team",
    owner=Owner("pulumi.com/v1", "Stack", "web", "uid-1"),
    generation=2,
    commit="c" * 40,
    service_account="default",
    document="{}",
)
REQUEST = UpdateRequest(work_dir=Path("/workspace/source"), stack="dev", env={}, job=JOB)
DONE = Outcome(
    operation="up",
    succeeded=True,
    error=ErrorKind.NONE,
    message="",
    outputs={"url": "x"},
    resource_changes={"create": 1},
    permalink=None,
    started=T0,
    ended=T0,
)


class Log:
    """A streamed log: its lines, then the end of the stream."""

    def __init__(self, lines: list[str]) -> None:
        """A log of ``lines``."""
        self.lines, self.closed = lines, False

    def stream(self, amt: int, *, decode_content: bool) -> Iterator[bytes]:
        """Each line, as urllib3 streams it."""
        del amt, decode_content
        for line in self.lines:
            yield (line + "\n").encode()

    def close(self) -> None:
        """Close the stream."""
        self.closed = True

    def release_conn(self) -> None:
        """Nothing to release."""


class OpenLog(Log):
    """A log whose stream stays open after its lines, as a container's does until it exits."""

    def __init__(self, lines: list[str]) -> None:
        """A log of ``lines``; the stream ends when closed, or on its own after a while."""
        super().__init__(lines)
        self.let_go = threading.Event()
        self.ran_to_end = False

    def stream(self, amt: int, *, decode_content: bool) -> Iterator[bytes]:
        """Each line, then nothing until closed (the reader gave up) or the container's end."""
        yield from super().stream(amt, decode_content=decode_content)
        if not self.let_go.wait(10):
            self.ran_to_end = True

    def shutdown(self) -> None:
        """Wake a blocked read."""
        self.let_go.set()

    def close(self) -> None:
        """Close the stream."""
        super().close()
        self.let_go.set()


class Watch:
    """A streamed watch: each event as a JSON line, blocking until one comes or shutdown."""

    def __init__(self) -> None:
        """No event yet."""
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def send(self, kind: str, pod: dict[str, Any]) -> None:
        """Stream the event ``kind`` of ``pod`` (a copy, as the API serves it)."""
        self.events.put({"type": kind, "object": copy.deepcopy(pod)})

    def stream(self, amt: int, *, decode_content: bool) -> Iterator[bytes]:
        """The events as lines, until ``shutdown``."""
        del amt, decode_content
        while (event := self.events.get()) is not None:
            yield (json.dumps(event) + "\n").encode()

    def shutdown(self) -> None:
        """End the stream (a read blocked on it returns)."""
        self.events.put(None)

    def close(self) -> None:
        """End the stream."""
        self.shutdown()

    def release_conn(self) -> None:
        """Nothing to release."""


class CutWatch(Watch):
    """A watch whose read fails when its socket is shut down, as urllib3's does."""

    def stream(self, amt: int, *, decode_content: bool) -> Iterator[bytes]:
        """The events as lines; ProtocolError at ``shutdown``."""
        yield from super().stream(amt, decode_content=decode_content)
        raise ProtocolError("Connection broken: the socket was shut down")


class FakePods:
    """The few CoreV1Api calls PodRunner makes, over one namespace's pods, with watches.

    A watch from a resourceVersion first gets every change after it, as the API server's.
    """

    def __init__(self) -> None:
        """No pods; new ones run."""
        self.pods: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.patches: list[list[dict[str, Any]]] = []
        self.patch_error: int | None = None  # the status a patch fails with
        self.log: list[str] = []
        self.open_log: OpenLog | None = None  # served instead of ``log`` when set
        self.log_reads = 0
        self.status: dict[str, Any] = {"phase": "Running", "containerStatuses": [running()]}
        self.on_log: Any = None
        self.on_create: Any = None
        self.claims: set[str] = set()  # PersistentVolumeClaims the namespace has
        self.secret_versions: dict[str, str] = {}  # Secrets the namespace has, by name
        self.watches: list[Watch] = []
        self.watch_type: type[Watch] = Watch
        self.reads = 0
        self._version = 0
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def add(self, pod: dict[str, Any]) -> None:
        """Store ``pod`` (a new resourceVersion) and tell every watch."""
        with self._lock:
            self._version += 1
            pod["metadata"]["resourceVersion"] = str(self._version)
            self.pods[pod["metadata"]["name"]] = pod
            self._tell("MODIFIED", pod)

    def _tell(self, kind: str, pod: dict[str, Any]) -> None:
        self._history.append((self._version, kind, copy.deepcopy(pod)))
        for watch in self.watches:
            watch.send(kind, pod)

    def set_status(self, name: str, status: dict[str, Any]) -> None:
        """The kubelet reports ``status`` for the pod ``name``."""
        self.add({**self.pods[name], "status": status})

    def create_namespaced_pod(
        self, namespace: str, body: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        """Store the pod with a uid and ``status``; 409 when the name is taken."""
        del namespace, kwargs
        name = body["metadata"]["name"]
        if name in self.pods:
            raise ApiException(status=409, reason="AlreadyExists")
        pod = {**body, "metadata": {**body["metadata"], "uid": f"pod-{len(self.created)}"}}
        pod["status"] = self.status
        self.add(pod)
        self.created.append(pod)
        if self.on_create is not None:
            self.on_create()
        return copy.deepcopy(pod)

    def read_namespaced_persistent_volume_claim(
        self, name: str, namespace: str, **kwargs: Any
    ) -> dict[str, Any]:
        """A claim of ``claims``; 404 for any other."""
        del namespace, kwargs
        if name not in self.claims:
            raise ApiException(status=404, reason="NotFound")
        return {"metadata": {"name": name}}

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        """The pod; 404 when there is none."""
        del namespace, kwargs
        self.reads += 1
        if name not in self.pods:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.pods[name])

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Watch:
        """A watch of one pod by name (the only list PodRunner makes)."""
        del namespace
        assert kwargs["watch"] is True
        assert kwargs["field_selector"] == "metadata.name=web-pulumi"
        watch = self.watch_type()
        since = kwargs.get("resource_version")
        with self._lock:
            if since is None and "web-pulumi" in self.pods:
                watch.send("ADDED", self.pods["web-pulumi"])
            for version, kind, pod in self._history if since is not None else ():
                if version > int(str(since)):
                    watch.send(kind, pod)
            self.watches.append(watch)
        return watch

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        """Delete at once (recorded; watches see it)."""
        del namespace, body, kwargs
        self.deleted.append(name)
        with self._lock:
            gone = self.pods.pop(name, None)
            if gone is not None:
                self._version += 1
                gone["metadata"]["resourceVersion"] = str(self._version)
                self._tell("DELETED", gone)

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: list[dict[str, Any]], **kwargs: Any
    ) -> dict[str, Any]:
        """A JSON patch of ``test`` and ``add`` operations (422 when a test fails)."""
        del namespace
        assert kwargs["_content_type"] == "application/json-patch+json"
        self.patches.append(body)
        if self.patch_error is not None:
            raise ApiException(status=self.patch_error, reason="Refused")
        if name not in self.pods:
            raise ApiException(status=404, reason="NotFound")
        pod = copy.deepcopy(self.pods[name])
        for operation in body:
            *parents, key = (
                part.replace("~1", "/").replace("~0", "~")
                for part in operation["path"].split("/")[1:]
            )
            target = pod
            for part in parents:
                target = target[part]
            if operation["op"] == "test" and target.get(key) != operation["value"]:
                raise ApiException(status=422, reason="Invalid")
            if operation["op"] == "add":
                target[key] = operation["value"]
            if operation["op"] == "remove":
                del target[key]
        self.add(pod)
        return copy.deepcopy(pod)

    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        """A Secret at resourceVersion ``secret_versions[name]``; 404 for one not there."""
        del namespace, kwargs
        if name not in self.secret_versions:
            raise ApiException(status=404, reason="NotFound")
        return {"metadata": {"name": name, "resourceVersion": self.secret_versions[name]}}

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Log:
        """The log (after ``on_log``, which may change the pod)."""
        del name, namespace, kwargs
        self.log_reads += 1
        if self.on_log is not None:
            self.on_log()
        return self.open_log or Log(self.log)


def running() -> dict[str, Any]:
    """A running container status."""
    return {"name": "pulumi", "state": {"running": {"startedAt": "2026-12-01T10:00:01Z"}}}


def runner(pods: FakePods, clock: Clock | None = None) -> PodRunner:
    """A PodRunner over ``pods``."""
    pod_runner = PodRunner(client.ApiClient(), "operator:1", start_timeout=0.5, clock=clock)
    pod_runner.api.core = pods  # type: ignore[assignment]
    return pod_runner


def test_a_run_reports_progress_and_its_outcome_and_the_pod_goes() -> None:
    """Created, followed, progress reported, outcome returned, pod deleted."""
    pods = FakePods()
    step = Progress("update", 1, 2, 0, "create x")
    pods.log = ["agent log line", progress_line(step), outcome_line(DONE)]
    seen: list[Progress] = []
    outcome = runner(pods).run(REQUEST, on_progress=seen.append, stop=threading.Event())
    assert outcome == DONE
    assert seen == [step]
    assert [p["metadata"]["name"] for p in pods.created] == ["web-pulumi"]
    assert pods.deleted == ["web-pulumi"]


def test_the_run_concludes_at_the_outcome_line_not_at_the_streams_end() -> None:
    """The outcome is the agent's last line: the pod goes while its container winds down."""
    pods = FakePods()
    pods.open_log = OpenLog([outcome_line(DONE)])
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome == DONE
    assert not pods.open_log.ran_to_end, "the run waited for the log stream's end"
    assert pods.open_log.closed
    assert pods.deleted == ["web-pulumi"]


def test_the_outcome_is_not_held_by_the_stop_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread watching for a stop while the log is read lets go once the outcome is in.

    With its look at the stop far longer than the test may take, a run concludes only if
    the reader's end wakes it (it once waited out a look, 0.1 s of every run on average).
    """
    monkeypatch.setattr(podrun, "STOP_CHECK", 600.0)
    pods = FakePods()
    pods.open_log = OpenLog([outcome_line(DONE)])
    got: list[RunResult] = []
    follow = threading.Thread(
        target=lambda: got.append(
            runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
        ),
        daemon=True,
    )
    follow.start()
    follow.join(30)
    assert not follow.is_alive(), "the run waited for the stop watch's next look"
    assert got == [DONE]


def test_the_namespaces_cache_claim_is_mounted_only_when_it_exists() -> None:
    """The claim ``--run-cache-claim`` names is looked up in the Stack's namespace."""
    pods = FakePods()
    pods.log = [outcome_line(DONE)]
    runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    pods.claims.add("pulumi-cache")
    runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    without, with_claim = (p["spec"]["volumes"] for p in pods.created)
    assert all(v["name"] != "pulumi-cache" for v in without)
    assert {"name": "pulumi-cache", "persistentVolumeClaim": {"claimName": "pulumi-cache"}} in (
        with_claim
    )


def test_a_container_that_cannot_start_is_runner_failed_with_the_kubelets_reason() -> None:
    """ImagePullBackOff: RunnerFailed naming it; the pod is deleted."""
    pods = FakePods()
    waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image x:1"}
    pods.status = {
        "phase": "Pending",
        "containerStatuses": [{"name": "pulumi", "state": {"waiting": waiting}}],
    }
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "team/web-pulumi failed: ImagePullBackOff: Back-off pulling image x:1" in outcome.message
    assert pods.deleted == ["web-pulumi"]


def test_a_pod_that_ends_without_an_outcome_says_why() -> None:
    """OOMKilled (exit 137), no outcome line: RunnerFailed OOMKilled."""
    pods = FakePods()
    pods.log = ["some output"]
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}

    def oom() -> None:
        pods.set_status(
            "web-pulumi",
            {"phase": "Failed", "containerStatuses": [{"name": "pulumi", "state": killed}]},
        )

    pods.on_log = oom
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "OOMKilled: exit code 137" in outcome.message


def test_an_interrupted_outcome_the_operator_did_not_ask_for_says_the_pod_was_deleted() -> None:
    """The agent reports Interrupted (SIGTERM from a drain): kept, told the pod's reason.

    The verdict judges it (no stop of the operator's: RunnerFailed); the runner says why.
    """
    pods = FakePods()
    interrupted = dataclasses.replace(
        DONE, succeeded=False, error=ErrorKind.INTERRUPTED, message="update interrupted"
    )
    pods.log = [outcome_line(interrupted)]
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.INTERRUPTED
    assert outcome.message.startswith("the run pod team/web-pulumi failed: Deleted: ")
    assert outcome.message.endswith("; update interrupted")


def test_an_eviction_the_watch_has_not_shown_yet_is_read_before_the_pod_is_deleted() -> None:
    """Evicted, the agent reports Interrupted before the watch carries the eviction.

    The pod is read before the runner deletes it, so the message names the eviction, not
    a deletion by someone unknown.
    """
    pods = FakePods()
    interrupted = dataclasses.replace(
        DONE, succeeded=False, error=ErrorKind.INTERRUPTED, message="update interrupted"
    )
    pods.log = [outcome_line(interrupted)]
    evicted = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }

    def evict() -> None:  # the stored pod changes; no watch event (yet)
        pods.pods["web-pulumi"]["status"] = {**pods.status, "conditions": [evicted]}

    pods.on_log = evict
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.INTERRUPTED
    assert outcome.message.startswith("the run pod team/web-pulumi failed: Evicted: ")
    assert pods.deleted == ["web-pulumi"]


def test_an_evicted_pod_gone_before_its_outcome_is_read_is_named_from_the_watch() -> None:
    """Interrupted, and the pod already deleted: the watch's final state names the eviction.

    The eviction's condition reached the watch before the pod went; the run's last looked-at
    state (before the log was opened) does not have it, and a fresh read finds nothing.
    """
    pods = FakePods()
    interrupted = dataclasses.replace(
        DONE, succeeded=False, error=ErrorKind.INTERRUPTED, message="update interrupted"
    )
    pods.log = [outcome_line(interrupted)]
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}

    def evict_and_go() -> None:  # the watch sees the condition, then the deletion
        pods.set_status("web-pulumi", {**pods.status, "conditions": [evicted]})
        pods.delete_namespaced_pod("web-pulumi", "team", None)

    pods.on_log = evict_and_go
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.INTERRUPTED
    assert "team/web-pulumi failed: Evicted: EvictionByEvictionAPI" in outcome.message


def test_a_pod_evicted_and_gone_without_an_outcome_is_named_from_its_last_state() -> None:
    """No outcome; the pod is gone: the reason is read from its final (deleted) state."""
    pods = FakePods()
    pods.log = []
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}

    def evict() -> None:  # the condition reaches the watch only with the deletion
        pods.pods["web-pulumi"]["status"] = {**pods.status, "conditions": [evicted]}
        pods.delete_namespaced_pod("web-pulumi", "team", None)

    pods.on_log = evict
    stopped = threading.Event()
    outcome = finished(runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stopped))
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "team/web-pulumi failed: Evicted: EvictionByEvictionAPI" in outcome.message


def test_the_same_run_pod_is_attached_to_not_created_again() -> None:
    """A pod of this Stack, generation, commit and operation exists: it is followed."""
    pods = FakePods()
    existing = run_pod(JOB, "up", image="operator:1", grace=60)
    existing["metadata"]["uid"] = "old"
    existing["status"] = pods.status
    pods.add(existing)
    pods.log = [outcome_line(DONE)]
    assert runner(pods).attach(REQUEST) == DONE
    assert pods.created == []


def test_a_pod_the_operator_did_not_create_is_left_alone() -> None:
    """A foreign pod holding the name: RunnerFailed saying so; it is not deleted."""
    pods = FakePods()
    pods.add({"metadata": {"name": "web-pulumi", "uid": "x", "labels": {}}})
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "did not create" in outcome.message
    assert pods.deleted == []


def test_an_operator_shutdown_leaves_the_run_pod_going() -> None:
    """Stop with cause shutdown: ``Detached``, and the pod is not deleted."""
    pods = FakePods()
    pods.status = {"phase": "Pending"}
    stop = StopSignal()
    pods.on_create = lambda: stop.set_for("shutdown")
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop)
    assert isinstance(outcome, Detached)
    assert pods.deleted == []
    assert "web-pulumi" in pods.pods


def test_a_run_the_operator_stops_is_interrupted_even_without_a_word_from_the_pod() -> None:
    """Deadline or deletion: the pod is deleted; gone without an outcome, it is Interrupted."""
    pods = FakePods()
    pods.status = {"phase": "Pending"}
    stop = StopSignal()
    pods.on_create = lambda: stop.set_for("deadline")
    outcome = finished(runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop))
    assert outcome.error is ErrorKind.INTERRUPTED
    assert pods.deleted == ["web-pulumi"]


def test_a_run_stopped_before_its_pod_starts_creates_none() -> None:
    """Stopped already (a deadline, a deletion): no pod; Interrupted."""
    pods = FakePods()
    stop = StopSignal()
    stop.set_for("interrupt")
    outcome = finished(runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop))
    assert outcome.error is ErrorKind.INTERRUPTED
    assert pods.created == []


def test_an_api_error_names_the_api_servers_message() -> None:
    """A refused create says why (Pod Security, quota), not just 403."""
    pods = FakePods()

    def refuse(namespace: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        del namespace, body, kwargs
        err = ApiException(status=403, reason="Forbidden")
        err.body = '{"message": "pods \\"web-pulumi\\" is forbidden: violates PodSecurity"}'
        raise err

    pods.create_namespaced_pod = refuse  # type: ignore[method-assign]
    outcome = finished(
        runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    )
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "violates PodSecurity" in outcome.message


def finished(result: RunResult) -> Outcome:
    """``result``, an outcome (not a run left going)."""
    assert isinstance(result, Outcome)
    return result


def pending(reason: str = "Unschedulable") -> dict[str, Any]:
    """A pod status that is not scheduled, for ``reason``."""
    scheduled = {"type": "PodScheduled", "status": "False", "reason": reason, "message": "0/1"}
    return {"phase": "Pending", "conditions": [scheduled]}


def start(pods: FakePods, clock: FakeClock) -> tuple[threading.Thread, list[Any]]:
    """Run ``REQUEST`` on ``pods`` in a thread; its result lands in the returned list."""
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(
            runner(pods, clock).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
        ),
        daemon=True,
    )
    thread.start()
    return thread, result


def test_a_run_is_followed_by_its_pods_changes_not_by_reading_it_again() -> None:
    """Pending, then running with an outcome: the change alone moves the run on.

    The fake clock never moves, so a runner that waited for a timer to read the pod again
    would never see the container start; the pod is read once, before it is created.
    """
    pods, clock = FakePods(), FakeClock()
    pods.status = pending()
    pods.log = [outcome_line(DONE)]
    thread, result = start(pods, clock)
    assert clock.wait_for_waiters(1)
    pods.set_status("web-pulumi", {"phase": "Running", "containerStatuses": [running()]})
    thread.join(timeout=10)
    assert result == [DONE]
    assert pods.reads == 1


def test_a_pod_never_scheduled_fails_once_its_start_timeout_passes_on_the_clock() -> None:
    """Not scheduled: RunnerFailed NotStarted with the scheduler's reason, at the timeout."""
    pods, clock = FakePods(), FakeClock()
    pods.status = pending()
    thread, result = start(pods, clock)
    assert clock.wait_for_waiters(1)
    clock.step(0.4)  # before the timeout (0.5): it waits on
    assert clock.wait_for_waiters(1)
    assert result == []
    clock.step(0.2)
    thread.join(timeout=10)
    (outcome,) = result
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "failed: NotStarted: not scheduled: Unschedulable: 0/1" in outcome.message
    assert pods.deleted == ["web-pulumi"]


def test_a_watch_that_ends_is_started_again_from_the_pod_read_afresh() -> None:
    """410 Gone (an ERROR event): the pod is read again and its state published."""
    pods, clock = FakePods(), FakeClock()
    pod = run_pod(JOB, "up", image="operator:1", grace=60)
    pod["metadata"]["uid"] = "u"
    pods.add(pod)
    with PodChanges(runner(pods, clock).api, JOB, pods.pods["web-pulumi"], clock) as changes:
        seen = changes.version
        pods.watches[0].events.put({"type": "ERROR", "object": {"code": 410}})
        pods.set_status("web-pulumi", {"phase": "Running"})  # maybe missed by the ended watch
        seen = until(changes, seen, lambda pod: (pod or {}).get("status") == {"phase": "Running"})
        assert len(pods.watches) == 2
        pods.delete_namespaced_pod("web-pulumi", "team", body=None)
        until(changes, seen, lambda pod: pod is None)


def test_a_watch_cut_by_close_ends_without_a_failure_logged() -> None:
    """Closing the changes shuts the watch's socket: the read error that follows is no fault."""
    pods, clock = FakePods(), FakeClock()
    pods.watch_type = CutWatch
    pod = run_pod(JOB, "up", image="operator:1", grace=60)
    pod["metadata"]["uid"] = "u"
    pods.add(pod)
    with structlog.testing.capture_logs() as logs:
        changes = PodChanges(runner(pods, clock).api, JOB, pods.pods["web-pulumi"], clock)
        pods.set_status("web-pulumi", {"phase": "Running"})
        until(changes, 0, lambda pod: (pod or {}).get("status") == {"phase": "Running"})
        changes.close()
        changes._thread.join(timeout=10)  # noqa: SLF001 - the watch thread's end is the point
    assert not changes._thread.is_alive()  # noqa: SLF001
    assert [e["event"] for e in logs if "run pod" in e["event"]] == []
    assert len(pods.watches) == 1, "a closed watch was started again"


def until(changes: PodChanges, seen: int, check: Callable[[Any], bool]) -> int:
    """Wait for published states until ``check`` holds for the newest; its version.

    Time stands still on the fake clock: only a published state wakes the wait.
    """
    while not check(changes.pod):
        seen = changes.wait(seen, float("inf"))
    return seen


RETAINED = dataclasses.replace(JOB, reclaim="Retain")
RETAIN_REQUEST = dataclasses.replace(REQUEST, job=RETAINED)
ENDED = {
    "phase": "Succeeded",
    "containerStatuses": [
        {"name": "pulumi", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
    ],
}


def concluded_mark(pod: dict[str, Any]) -> str | None:
    """The pod's concluded annotation, if it has one."""
    found: str | None = pod["metadata"]["annotations"].get(ANNOTATION_CONCLUDED)
    return found


def run_once(pods: FakePods, request: UpdateRequest = RETAIN_REQUEST) -> Outcome:
    """Run ``request`` on ``pods`` to its outcome."""
    return finished(runner(pods).run(request, on_progress=lambda _p: None, stop=threading.Event()))


@pytest.mark.parametrize("exited", [True, False], ids=["ended", "still-exiting"])
def test_retain_keeps_the_finished_pod_and_the_next_run_deletes_it_first(*, exited: bool) -> None:
    """The pod stays, marked concluded; the next run (same generation) never takes its outcome.

    A resync or a retry runs the same generation, commit and operation again: the kept pod
    would look like that run's. Its mark makes it an earlier run's: deleted at once (not
    waited for, even if its agent has not exited yet), then replaced.
    """
    pods = FakePods()
    pods.log = [outcome_line(DONE)]
    assert run_once(pods) == DONE
    assert pods.deleted == []
    kept = pods.pods["web-pulumi"]
    assert concluded_mark(kept) is not None
    assert pods.patches[0][0] == {"op": "test", "path": "/metadata/uid", "value": "pod-0"}
    if exited:
        pods.set_status("web-pulumi", ENDED)

    again = dataclasses.replace(DONE, resource_changes={"same": 1})
    pods.log = [outcome_line(again)]
    reads = pods.log_reads
    assert run_once(pods) == again
    assert pods.log_reads == reads + 1  # only the new pod's log
    assert pods.deleted == ["web-pulumi"]  # the kept one, before the new one was created
    assert [p["metadata"]["uid"] for p in pods.created] == ["pod-0", "pod-1"]
    assert concluded_mark(pods.pods["web-pulumi"]) is not None  # the new one is kept too
    assert pods.pods["web-pulumi"]["metadata"]["uid"] == "pod-1"


def test_delete_is_the_default_and_keeps_nothing() -> None:
    """Without Retain the pod goes once its outcome is in, unmarked."""
    pods = FakePods()
    pods.log = [outcome_line(DONE)]
    assert run_once(pods, REQUEST) == DONE
    assert pods.deleted == ["web-pulumi"]
    assert pods.patches == []


def retained_pod(generation: int, *, marked: bool) -> dict[str, Any]:
    """A finished run pod of ``generation`` (uid ``old``), concluded when ``marked``."""
    pod = run_pod(dataclasses.replace(RETAINED, generation=generation), "up", image="x", grace=60)
    pod["metadata"]["uid"] = "old"
    if marked:
        pod["metadata"]["annotations"][ANNOTATION_CONCLUDED] = T0.isoformat()
    pod["status"] = ENDED
    return pod


@pytest.mark.parametrize(
    ("generation", "marked"),
    [(1, True), (2, True), (1, False)],
    ids=["older-kept", "same-generation-kept", "older-left-behind"],
)
def test_attach_ignores_a_finished_pod_that_is_not_this_runs(
    generation: int, *, marked: bool
) -> None:
    """After a restart, a kept (or older) pod's outcome is not concluded for generation 2.

    The pod is deleted and attach says there is no run (the reconciler concludes the
    orphaned run as interrupted); its log is never read.
    """
    pods = FakePods()
    pods.add(retained_pod(generation, marked=marked))
    pods.log = [outcome_line(DONE)]
    assert runner(pods).attach(RETAIN_REQUEST) is None
    assert pods.log_reads == 0
    assert pods.deleted == ["web-pulumi"]
    assert pods.created == []


def test_attach_takes_the_outcome_of_this_runs_pod_that_ended_unconcluded() -> None:
    """The run's own pod ended while no operator followed it: its outcome is the run's."""
    pods = FakePods()
    pods.add(retained_pod(2, marked=False))
    pods.log = [outcome_line(DONE)]
    assert runner(pods).attach(RETAIN_REQUEST) == DONE
    assert pods.deleted == []
    assert concluded_mark(pods.pods["web-pulumi"]) is not None


def test_retain_keeps_a_pod_that_ended_without_an_outcome() -> None:
    """OOMKilled: RunnerFailed, and the pod stays for its log (marked)."""
    pods = FakePods()
    pods.log = ["some output"]
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    status = {"phase": "Failed", "containerStatuses": [{"name": "pulumi", "state": killed}]}
    pods.on_log = lambda: pods.set_status("web-pulumi", status)
    outcome = run_once(pods)
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert pods.deleted == []
    assert concluded_mark(pods.pods["web-pulumi"]) is not None


def test_retain_still_deletes_a_pod_that_never_started() -> None:
    """ImagePullBackOff: nothing ran, nothing to keep; it would only pull on."""
    pods = FakePods()
    waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image x:1"}
    pods.status = {
        "phase": "Pending",
        "containerStatuses": [{"name": "pulumi", "state": {"waiting": waiting}}],
    }
    assert run_once(pods).error is ErrorKind.RUNNER_FAILED
    assert pods.deleted == ["web-pulumi"]
    assert pods.patches == []


def test_retain_deletes_a_pod_the_operator_interrupted() -> None:
    """A deadline deletes the pod; Retain does not bring it back or mark it."""
    pods = FakePods()
    pods.status = {"phase": "Pending"}
    stop = StopSignal()
    pods.on_create = lambda: stop.set_for("deadline")
    outcome = finished(runner(pods).run(RETAIN_REQUEST, on_progress=lambda _p: None, stop=stop))
    assert outcome.error is ErrorKind.INTERRUPTED
    assert pods.patches == []
    assert "web-pulumi" not in pods.pods


def test_a_pod_that_cannot_be_marked_is_deleted() -> None:
    """No ``patch`` permission (403): the pod is deleted rather than kept unmarked."""
    pods = FakePods()
    pods.patch_error = 403
    pods.log = [outcome_line(DONE)]
    assert run_once(pods) == DONE
    assert pods.deleted == ["web-pulumi"]
