"""``PodRunner`` against a fake pods API: creating, following, concluding, detaching.

The real thing runs on the test node (``tests/node/test_pod_runner.py``); here each pod
state the kubelet can report is played out, including ones that are slow to reach there.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workspace.runner import (
    ErrorKind,
    Outcome,
    PodRunner,
    Progress,
    RunJob,
    StopSignal,
    UpdateRequest,
)
from workspace.runner.channel import outcome_line, progress_line
from workspace.runner.podspec import pod_name, run_pod

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
JOB = RunJob(
    namespace="team",
    stack_name="web",
    stack_uid="uid-1",
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


class FakePods:
    """The few CoreV1Api calls PodRunner makes, over one namespace's pods."""

    def __init__(self) -> None:
        """No pods; new ones run."""
        self.pods: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.log: list[str] = []
        self.status: dict[str, Any] = {"phase": "Running", "containerStatuses": [running()]}
        self.on_log: Any = None
        self.on_create: Any = None
        self.claims: set[str] = set()  # PersistentVolumeClaims the namespace has

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
        self.pods[name] = pod
        self.created.append(pod)
        if self.on_create is not None:
            self.on_create()
        return pod

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
        if name not in self.pods:
            raise ApiException(status=404, reason="NotFound")
        return self.pods[name]

    def delete_namespaced_pod(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        """Delete at once (recorded)."""
        del namespace, body, kwargs
        self.deleted.append(name)
        self.pods.pop(name, None)

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Log:
        """The log (after ``on_log``, which may change the pod)."""
        del name, namespace, kwargs
        if self.on_log is not None:
            self.on_log()
        return Log(self.log)


def running() -> dict[str, Any]:
    """A running container status."""
    return {"name": "pulumi", "state": {"running": {"startedAt": "2026-12-01T10:00:01Z"}}}


def runner(pods: FakePods) -> PodRunner:
    """A PodRunner over ``pods`` that looks again at once."""
    pod_runner = PodRunner(client.ApiClient(), "operator:1", poll=0.01, start_timeout=0.5)
    pod_runner._core = pods  # type: ignore[assignment]  # noqa: SLF001 - the fake API
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
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "team/web-pulumi failed: ImagePullBackOff: Back-off pulling image x:1" in outcome.message
    assert pods.deleted == ["web-pulumi"]


def test_a_pod_that_ends_without_an_outcome_says_why() -> None:
    """OOMKilled (exit 137), no outcome line: RunnerFailed OOMKilled."""
    pods = FakePods()
    pods.log = ["some output"]
    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}

    def oom() -> None:
        pods.pods["web-pulumi"]["status"] = {
            "phase": "Failed",
            "containerStatuses": [{"name": "pulumi", "state": killed}],
        }

    pods.on_log = oom
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "OOMKilled: exit code 137" in outcome.message


def test_an_interrupted_outcome_the_operator_did_not_ask_for_is_a_deleted_pod() -> None:
    """The agent reports Interrupted (SIGTERM from a drain): RunnerFailed Deleted."""
    pods = FakePods()
    interrupted = dataclasses.replace(
        DONE, succeeded=False, error=ErrorKind.INTERRUPTED, message="update interrupted"
    )
    pods.log = [outcome_line(interrupted)]
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "Deleted" in outcome.message


def test_the_same_run_pod_is_attached_to_not_created_again() -> None:
    """A pod of this Stack, generation, commit and operation exists: it is followed."""
    pods = FakePods()
    existing = run_pod(JOB, "up", image="operator:1", grace=60)
    existing["metadata"]["uid"] = "old"
    existing["status"] = pods.status
    pods.pods[pod_name("web")] = existing
    pods.log = [outcome_line(DONE)]
    assert runner(pods).attach(REQUEST) == DONE
    assert pods.created == []


def test_a_pod_the_operator_did_not_create_is_left_alone() -> None:
    """A foreign pod holding the name: RunnerFailed saying so; it is not deleted."""
    pods = FakePods()
    pods.pods["web-pulumi"] = {"metadata": {"name": "web-pulumi", "uid": "x", "labels": {}}}
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "did not create" in outcome.message
    assert pods.deleted == []


def test_an_operator_shutdown_leaves_the_run_pod_going() -> None:
    """Stop with cause shutdown: DETACHED, and the pod is not deleted."""
    pods = FakePods()
    pods.status = {"phase": "Pending"}
    stop = StopSignal()
    pods.on_create = lambda: stop.set_for("shutdown")
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop)
    assert outcome.error is ErrorKind.DETACHED
    assert pods.deleted == []
    assert "web-pulumi" in pods.pods


def test_a_run_the_operator_stops_is_interrupted_even_without_a_word_from_the_pod() -> None:
    """Deadline or deletion: the pod is deleted; gone without an outcome, it is Interrupted."""
    pods = FakePods()
    pods.status = {"phase": "Pending"}
    stop = StopSignal()
    pods.on_create = lambda: stop.set_for("deadline")
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop)
    assert outcome.error is ErrorKind.INTERRUPTED
    assert pods.deleted == ["web-pulumi"]


def test_a_run_stopped_before_its_pod_starts_creates_none() -> None:
    """Stopped already (a deadline, a deletion): no pod; Interrupted."""
    pods = FakePods()
    stop = StopSignal()
    stop.set_for("interrupt")
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=stop)
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
    outcome = runner(pods).run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "violates PodSecurity" in outcome.message
