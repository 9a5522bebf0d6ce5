"""Warm run pods against the fake pods API: kept once concluded, handed the next run.

The handover's exec is played by a fake ``take`` that does what the agent does with a
taken job: it prints the job's mark and then its outcome in the pod's log. The real
thing runs on the test node (``tests/e2e/test_warm_pods.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import structlog
import structlog.testing
from kubernetes import client

from controller import tracing as tracing_module
from tests.workspace.runner.pod.test_runner import DONE, JOB, REQUEST, T0, FakePods, running
from tests.workspace.runner.pod.test_runner_faults import Counted
from workspace.handover import ACCEPTED_LINE, Delivery
from workspace.runner import Outcome, PodRunner, RunJob, SecretEnv, UpdateRequest
from workspace.runner.channel import job_line, outcome_line
from workspace.runner.pod import warm
from workspace.runner.pod.spec import (
    ANNOTATION_CONCLUDED,
    ANNOTATION_GENERATION,
    ANNOTATION_MARK,
    ANNOTATION_WARM,
    run_pod,
)

LATER = dataclasses.replace(DONE, outputs={"url": "y"})
RUNNING = {"phase": "Running", "startTime": T0.isoformat(), "containerStatuses": [running()]}
REQUEST_SECRET = (SecretEnv("PSO_SECRET_0", "creds", "token"),)


def ignored(progress: object) -> None:
    """Progress is not looked at here."""
    del progress


def warm_runner(pods: FakePods, metrics: Counted) -> PodRunner:
    """A PodRunner over ``pods`` keeping run pods warm for 30 s."""
    made = PodRunner(client.ApiClient(), "operator:1", keep_warm=30, metrics=metrics)
    made.api.core = pods  # type: ignore[assignment]
    return made


def started_pods() -> FakePods:
    """Pods that run, started now (their deadline counts from then)."""
    pods = FakePods()
    pods.status = {**copy.deepcopy(RUNNING), "startTime": datetime.now(UTC).isoformat()}
    return pods


def agent(
    pods: FakePods, outcome: Outcome, taken: list[Delivery]
) -> Callable[..., tuple[int, str]]:
    """``take`` as the warm agent answers it: accepted, then the run's lines in the log."""

    def take(job: RunJob, line: str, timeout: float = 0) -> tuple[int, str]:
        del job, timeout
        delivery = Delivery.decode(line)
        taken.append(delivery)
        pods.log = [*pods.log, job_line(delivery.mark), outcome_line(outcome)]
        return 0, ACCEPTED_LINE + "\n"

    return take


def later(generation: int = 3) -> UpdateRequest:
    """The Stack's next run: a new generation."""
    return dataclasses.replace(REQUEST, job=dataclasses.replace(JOB, generation=generation))


def test_a_concluded_warm_pod_is_kept_and_takes_the_next_run() -> None:
    """Kept (concluded, counted idle); the next run is handed over: its own outcome, no create."""
    pods, metrics = started_pods(), Counted()
    taken: list[Delivery] = []
    pods.log = [outcome_line(DONE)]
    pod_runner = warm_runner(pods, metrics)
    assert pod_runner.run(REQUEST, on_progress=ignored, stop=threading.Event()) == DONE
    kept = pods.pods["web-pulumi"]
    assert ANNOTATION_CONCLUDED in kept["metadata"]["annotations"]
    assert ANNOTATION_WARM in kept["metadata"]["annotations"]
    assert pods.deleted == []
    assert metrics.idle[-1] == 1

    pod_runner.api.take = agent(pods, LATER, taken)  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logged:
        assert pod_runner.run(later(), on_progress=ignored, stop=threading.Event()) == LATER
    assert [d.operation for d in taken] == ["up"]
    assert (metrics.created, metrics.reused) == (1, 1)
    handed = [e for e in logged if e["event"] == "Handed the run to the warm run pod"]
    assert len(handed) == 1
    assert handed[0]["fit_s"] >= 0
    assert handed[0]["take_s"] >= 0, "the handover's own cost, for the pods benchmark"
    annotations = pods.pods["web-pulumi"]["metadata"]["annotations"]
    assert annotations[ANNOTATION_GENERATION] == "3"
    assert annotations[ANNOTATION_MARK] == taken[0].mark
    assert ANNOTATION_CONCLUDED in annotations, "concluded again once its outcome was taken"
    assert pods.deleted == []


def test_a_refused_handover_replaces_the_pod() -> None:
    """The agent's window closing: the pod is deleted and a new one runs the run."""
    pods, metrics = started_pods(), Counted()
    pods.log = [outcome_line(DONE)]
    pod_runner = warm_runner(pods, metrics)
    pod_runner.run(REQUEST, on_progress=ignored, stop=threading.Event())

    def refused(job: RunJob, line: str, timeout: float = 0) -> tuple[int, str]:
        del job, line, timeout
        pods.log = [outcome_line(LATER)]
        return 3, "refused: the run pod's agent is ending\n"

    pod_runner.api.take = refused  # type: ignore[method-assign]
    assert pod_runner.run(later(), on_progress=ignored, stop=threading.Event()) == LATER
    assert pods.deleted == ["web-pulumi"]
    assert (metrics.created, metrics.reused) == (2, 0)


def test_a_changed_secret_replaces_the_pod() -> None:
    """A Secret the pod reads has a new resourceVersion: no handover, a new pod."""
    pods, metrics = started_pods(), Counted()
    taken: list[Delivery] = []
    job = dataclasses.replace(JOB, secret_env=REQUEST_SECRET)
    pods.secret_versions = {"creds": "1"}
    pods.log = [outcome_line(DONE)]
    pod_runner = warm_runner(pods, metrics)
    pod_runner.run(
        dataclasses.replace(REQUEST, job=job), on_progress=ignored, stop=threading.Event()
    )
    pod_runner.api.take = agent(pods, LATER, taken)  # type: ignore[method-assign]
    pods.secret_versions = {"creds": "2"}
    pods.log = [outcome_line(LATER)]
    next_job = dataclasses.replace(job, generation=3)
    assert (
        pod_runner.run(
            dataclasses.replace(REQUEST, job=next_job), on_progress=ignored, stop=threading.Event()
        )
        == LATER
    )
    assert taken == []
    assert pods.deleted == ["web-pulumi"]


def test_a_pod_whose_deadline_is_near_does_not_fit() -> None:
    """Less left of its activeDeadlineSeconds than the run's deadline and margins: no."""
    manifest = run_pod(JOB, "up", image="operator:1", grace=60, keep_warm=30)
    manifest["metadata"]["annotations"][ANNOTATION_WARM] = "k"
    pod = {
        **manifest,
        "metadata": {**manifest["metadata"], "annotations": {
            **manifest["metadata"]["annotations"], ANNOTATION_CONCLUDED: "x"}},
        "status": copy.deepcopy(RUNNING),
    }  # fmt: skip
    deadline = manifest["spec"]["activeDeadlineSeconds"]
    assert warm.fits(pod, manifest, JOB, T0)
    near = T0 + timedelta(seconds=deadline - JOB.timeout - 30)
    assert not warm.fits(pod, manifest, JOB, near)
    finished = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}
    assert not warm.fits(finished, manifest, JOB, T0)
    other = {
        **manifest,
        "metadata": {**manifest["metadata"], "annotations": {ANNOTATION_WARM: "j"}},
    }
    assert not warm.fits(pod, other, JOB, T0)


class Recorded(tracing_module.Tracing):
    """Tracing that keeps the names of the spans recorded after the fact."""

    def __init__(self) -> None:
        """Nothing recorded yet."""
        self.names: list[str] = []

    def record(self, name: str, *args: object, **kwargs: object) -> None:
        """Keep the name."""
        del args, kwargs
        self.names.append(name)


def test_a_run_handed_to_a_warm_pod_records_no_pod_legs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's schedule and start were an earlier run's: only a new pod's run has them."""
    recorded = Recorded()
    monkeypatch.setattr(tracing_module, "_installed", recorded)
    pods, metrics = started_pods(), Counted()
    taken: list[Delivery] = []
    pods.log = [outcome_line(DONE)]
    pod_runner = warm_runner(pods, metrics)
    pod_runner.run(REQUEST, on_progress=ignored, stop=threading.Event())
    legs = len(recorded.names)
    assert legs > 0, "a new pod's run records its legs"
    pod_runner.api.take = agent(pods, LATER, taken)  # type: ignore[method-assign]
    assert pod_runner.run(later(), on_progress=ignored, stop=threading.Event()) == LATER
    assert len(recorded.names) == legs


def test_the_operator_stopping_deletes_its_idle_pods() -> None:
    """close: every idle pod goes, the gauge says 0; no pod waits for runs nobody hands over."""
    pods, metrics = started_pods(), Counted()
    pods.log = [outcome_line(DONE)]
    pod_runner = warm_runner(pods, metrics)
    pod_runner.run(REQUEST, on_progress=ignored, stop=threading.Event())
    assert metrics.idle[-1] == 1
    pod_runner.close(5.0)
    assert pods.deleted == ["web-pulumi"]
    assert metrics.idle[-1] == 0
