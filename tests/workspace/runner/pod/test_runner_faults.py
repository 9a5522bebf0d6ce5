"""``PodRunner`` under faults: a refused pod, a pod that never starts, an OOM kill.

A refused create (a quota, a LimitRange, Pod Security, a namespace being deleted) says the
API server's words and what to change, and is counted as ``CreateRefused``; a run pod must
start within ``START_SHARE`` of its run's deadline when that is sooner than the start
timeout; a program failure whose pod's container ended ``OOMKilled`` (cgroup v1 kills
only the program) is ``RUNNER_FAILED`` naming the limit. The fake pods API is
``test_pod``'s.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from controller.clock import FakeClock
from tests.workspace.runner.pod.test_runner import (
    DONE,
    REQUEST,
    FakePods,
    finished,
    pending,
    runner,
)
from workspace.runner import ErrorKind
from workspace.runner.channel import outcome_line
from workspace.runner.pod.runner import CREATE_FAILED, CREATE_REFUSED, START_SHARE, start_limit


class Counted:
    """The pod metrics, recorded."""

    def __init__(self) -> None:
        """Nothing yet."""
        self.failed: list[str] = []
        self.created = self.reused = 0
        self.idle: list[int] = []

    def pod_created(self) -> None:
        """Count it."""
        self.created += 1

    def pod_reused(self) -> None:
        """Count it."""
        self.reused += 1

    def idle_pods(self, count: int) -> None:
        """Record it."""
        self.idle.append(count)

    def pod_failed(self, reason: str) -> None:
        """Record it."""
        self.failed.append(reason)

    def pod_started(self, seconds: float) -> None:
        """Ignored."""
        del seconds

    def spec_to_running(self, seconds: float) -> None:
        """Ignored."""
        del seconds


def refusing(pods: FakePods, message: str, status: int = 403, reason: str = "Forbidden") -> None:
    """Make ``pods`` refuse every create with ``status`` and the API server's ``message``."""

    def refuse(namespace: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        del namespace, body, kwargs
        err = ApiException(status=status, reason=reason)
        err.body = json.dumps({"message": message})
        raise err

    pods.create_namespaced_pod = refuse  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        (
            (
                'pods "web-pulumi" is forbidden: exceeded quota: no-pods, requested: pods=1, '
                "used: pods=0, limited: pods=0"
            ),
            "the namespace's ResourceQuota allows no more: raise or lift it",
        ),
        (
            (
                'pods "web-pulumi" is forbidden: failed quota: q: must specify limits.memory '
                "for: checkout,pulumi"
            ),
            "the namespace's ResourceQuota requires requests or limits",
        ),
        (
            (
                'pods "web-pulumi" is forbidden: maximum memory usage per Container is 2Gi, '
                "but limit is 4Gi"
            ),
            "the namespace's LimitRange refuses the run pod's resources",
        ),
        (
            (
                'pods "web-pulumi" is forbidden: unable to create new content in namespace team '
                "because it is being terminated"
            ),
            "the namespace is being deleted: no run pod can be created in it",
        ),
    ],
)
def test_a_refused_create_says_what_to_change_and_is_counted(message: str, hint: str) -> None:
    """RunnerFailed: the pod, the API server's words, the hint; counted CreateRefused."""
    pods, counted = FakePods(), Counted()
    refusing(pods, message)
    pod_runner = runner(pods)
    pod_runner._with = dataclasses.replace(pod_runner._with, metrics=counted)  # noqa: SLF001
    outcome = finished(pod_runner.run(REQUEST, on_progress=lambda _p: None, stop=threading.Event()))
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert outcome.message.startswith("creating the run pod team/web-pulumi failed: 403 ")
    assert message in outcome.message
    assert hint in outcome.message
    assert counted.failed == [CREATE_REFUSED]
    assert counted.created == 0


@pytest.mark.parametrize(("status", "counted_as"), [(503, CREATE_FAILED), (429, CREATE_FAILED)])
def test_a_create_the_api_server_could_not_answer_is_not_counted_as_refused(
    status: int, counted_as: str
) -> None:
    """A 5xx or 429 on create: the run fails (retried), counted CreateFailed, not refused."""
    pods, counted = FakePods(), Counted()
    refusing(pods, "the server is currently unable to handle the request", status, "Unavailable")
    pod_runner = runner(pods)
    pod_runner._with = dataclasses.replace(pod_runner._with, metrics=counted)  # noqa: SLF001
    outcome = finished(pod_runner.run(REQUEST, on_progress=lambda _p: None, stop=threading.Event()))
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert f"failed: {status} Unavailable" in outcome.message
    assert counted.failed == [counted_as]


def test_the_start_timeout_is_bounded_by_the_runs_deadline() -> None:
    """The start timeout, or ``START_SHARE`` of the deadline when that is sooner."""
    assert start_limit(600.0, 7200.0) == 600.0
    assert start_limit(600.0, 60.0) == START_SHARE * 60.0


def test_a_pod_not_started_by_its_share_of_a_short_deadline_fails_not_started() -> None:
    """A 0.25 s deadline: the pod must start within 0.2 s, before the 0.5 s start timeout."""
    pods, clock = FakePods(), FakeClock()
    pods.status = pending()
    job = dataclasses.replace(REQUEST.job, timeout=0.25)  # type: ignore[type-var]
    request = dataclasses.replace(REQUEST, job=job)
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(
            runner(pods, clock).run(request, on_progress=lambda _p: None, stop=threading.Event())
        ),
        daemon=True,
    )
    thread.start()
    assert clock.wait_for_waiters(1)
    clock.step(START_SHARE * 0.25 + 0.01)  # before the 0.5 s start timeout
    thread.join(timeout=10)
    (outcome,) = result
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "failed: NotStarted: not scheduled: Unschedulable" in outcome.message


def program_failure(pods: FakePods, reason: str | None) -> Any:
    """Run a program that fails; its container then ends for ``reason`` (None: deleted)."""
    failure = dataclasses.replace(
        DONE,
        succeeded=False,
        error=ErrorKind.UPDATE_FAILED,
        message="program exited with non-zero exit code: -1",
    )
    pods.log = [outcome_line(failure)]
    ended = {"terminated": {"reason": reason, "exitCode": 0}}

    def end() -> None:
        statuses = [{"name": "pulumi", "state": ended}]
        pods.set_status("web-pulumi", {"phase": "Running", "containerStatuses": statuses})

    def delete() -> None:
        pods.delete_namespaced_pod("web-pulumi", "team", None)

    pods.on_log = end if reason is not None else delete
    pod_runner, counted = runner(pods), Counted()
    pod_runner._with = dataclasses.replace(pod_runner._with, metrics=counted)  # noqa: SLF001
    outcome = pod_runner.run(REQUEST, on_progress=lambda _p: None, stop=threading.Event())
    return finished(outcome), counted


def test_a_program_killed_for_memory_is_runner_failed_oom_killed() -> None:
    """The container ended OOMKilled after the agent's report: RunnerFailed naming it."""
    outcome, counted = program_failure(FakePods(), "OOMKilled")
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert outcome.message.startswith("the run pod team/web-pulumi failed: OOMKilled: ")
    assert "resources.limits.memory" in outcome.message
    assert outcome.message.endswith("; program exited with non-zero exit code: -1")
    assert counted.failed == ["OOMKilled"]


@pytest.mark.parametrize("reason", ["Completed", None])
def test_a_program_failure_without_an_oom_kill_is_the_programs(reason: str | None) -> None:
    """Ended otherwise, or deleted while running: the agent's outcome, unchanged."""
    outcome, counted = program_failure(FakePods(), reason)
    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert outcome.message == "program exited with non-zero exit code: -1"
    assert counted.failed == []
