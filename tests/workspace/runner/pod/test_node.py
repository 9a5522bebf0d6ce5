"""A run pod's lost node and an unreachable log: ``pod.node``'s readers and ``PodRun`` on them.

The pure readers on pod states as the API serves them; then a run followed on the fake
pods API of ``test_pod`` with a fake clock: the log the API server (or the kubelet behind
it) cannot serve for a while is retried on the clock, never raised; a node not ready for
longer than the pod's grace concludes the run ``NodeNotReady`` and deletes the pod.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from controller.clock import FAKE_EPOCH, FakeClock
from tests.workspace.runner.pod.test_runner import DONE, FakePods, Log, running
from tests.workspace.runner.pod.test_runner import start as follow
from workspace.runner import ErrorKind
from workspace.runner.channel import outcome_line
from workspace.runner.pod.node import grace, node_lost, node_not_ready_since, unreachable
from workspace.runner.pod.run import LOG_RETRY

SINCE = FAKE_EPOCH.isoformat().replace("+00:00", "Z")


def node_lost_status(since: str = SINCE) -> dict[str, Any]:
    """A running pod the node controller marked not Ready at ``since``."""
    conditions = [
        {"type": "Ready", "status": "False", "lastTransitionTime": since},
        {"type": "ContainersReady", "status": "True"},
    ]
    return {"phase": "Running", "conditions": conditions, "containerStatuses": [running()]}


def pod(status: dict[str, Any], grace_seconds: int = 65) -> dict[str, Any]:
    """A run pod on node ``n1`` with ``status``."""
    spec = {"nodeName": "n1", "terminationGracePeriodSeconds": grace_seconds}
    return {"metadata": {"name": "web-pulumi"}, "spec": spec, "status": status}


def test_the_node_controllers_mark_is_told_from_the_kubelets_own() -> None:
    """Ready False beside ContainersReady True and a running container: the node's doing."""
    assert node_not_ready_since(pod(node_lost_status())) == FAKE_EPOCH
    ended = node_lost_status()
    ended["conditions"][1]["status"] = "False"  # the kubelet: the container is not ready
    assert node_not_ready_since(pod(ended)) is None
    exited = {**node_lost_status(), "containerStatuses": [{"name": "pulumi", "state": {}}]}
    assert node_not_ready_since(pod(exited)) is None
    assert node_not_ready_since(pod({"phase": "Running"})) is None


def test_a_node_is_lost_only_past_the_pods_grace() -> None:
    """Not ready for up to the grace: still waited for; past it: NodeNotReady naming it."""
    lost = pod(node_lost_status(), grace_seconds=30)
    assert grace(lost) == 30
    assert node_lost(lost, FAKE_EPOCH + timedelta(seconds=30)) is None
    found = node_lost(lost, FAKE_EPOCH + timedelta(seconds=31))
    assert found is not None
    reason, message = found
    assert reason == "NodeNotReady"
    assert f"its node n1 has not been ready since {FAKE_EPOCH.isoformat()} (31 s" in message
    assert "30 s grace" in message


def test_errors_for_a_while_are_told_from_refusals() -> None:
    """5xx, 429 and a failed connection: retry; 403, 404, 422: not."""
    assert unreachable(ApiException(status=500))
    assert unreachable(ApiException(status=503))
    assert unreachable(ApiException(status=429))
    assert unreachable(MaxRetryError(None, "/", None))  # type: ignore[arg-type]
    assert unreachable(ConnectionRefusedError())
    assert not unreachable(ApiException(status=403))
    assert not unreachable(ApiException(status=422))
    assert not unreachable(ValueError())


def test_a_log_the_kubelet_cannot_serve_for_a_while_is_read_again_on_the_clock() -> None:
    """500 (kubelet away), then a dropped connection, then the log: one run, its outcome."""
    pods, clock = FakePods(), FakeClock()
    pods.log = [outcome_line(DONE)]
    failures: list[Exception] = [ApiException(status=500), MaxRetryError(None, "/", None)]  # type: ignore[arg-type]

    def logs(name: str, namespace: str, **kwargs: Any) -> Log:
        del name, namespace, kwargs
        pods.log_reads += 1
        if failures:
            raise failures.pop(0)
        return Log(pods.log)

    pods.read_namespaced_pod_log = logs  # type: ignore[method-assign]
    thread, result = follow(pods, clock)
    for reads in (1, 2):
        assert clock.wait_for_waiters(1)
        assert pods.log_reads == reads
        assert result == []
        clock.step(LOG_RETRY)
    thread.join(timeout=10)
    assert result == [DONE]
    assert len(pods.created) == 1
    assert pods.deleted == ["web-pulumi"]


def test_a_run_whose_node_stays_not_ready_past_the_grace_fails_naming_it() -> None:
    """Marked not Ready by the node controller: waited for the grace (65 s), then concluded."""
    pods, clock = FakePods(), FakeClock()
    pods.log = ["no outcome yet"]
    thread, result = follow(pods, clock)
    assert clock.wait_for_waiters(1)
    pods.set_status("web-pulumi", node_lost_status())
    clock.step(60)
    assert clock.wait_for_waiters(1)
    assert result == []
    clock.step(6)
    thread.join(timeout=10)
    (outcome,) = result
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "team/web-pulumi failed: NodeNotReady: its node" in outcome.message
    assert "the run's outcome is unknown" in outcome.message
    assert pods.deleted == ["web-pulumi"]


class SilentLog(Log):
    """A log stream that stays open and sends nothing until it is shut down (a lost node)."""

    def __init__(self) -> None:
        """Open, silent."""
        super().__init__([])
        self.reading, self.shut = threading.Event(), threading.Event()

    def stream(self, amt: int, *, decode_content: bool) -> Any:
        """Nothing, until ``shutdown``; then the end of the stream."""
        del amt, decode_content
        self.reading.set()
        self.shut.wait(30)
        yield from ()

    def shutdown(self) -> None:
        """Wake the blocked read, as urllib3's ``shutdown`` does."""
        self.shut.set()


def test_a_node_lost_while_its_log_stream_stays_open_and_silent_is_still_concluded() -> None:
    """The log read blocks; the node is marked not Ready: past the grace the run ends."""
    pods, clock = FakePods(), FakeClock()
    silent = SilentLog()
    pods.read_namespaced_pod_log = lambda *_a, **_k: silent  # type: ignore[method-assign]
    thread, result = follow(pods, clock)
    assert silent.reading.wait(10)
    pods.set_status("web-pulumi", node_lost_status())
    clock.step(66)
    thread.join(timeout=20)
    assert silent.shut.is_set()
    (outcome,) = result
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "team/web-pulumi failed: NodeNotReady: its node" in outcome.message
