"""``PodRunner``: each Pulumi operation runs in a pod of its own, in the Stack's namespace.

The pod runs the agent (``pulumi-stack-operator agent``) of the operator's image (or the
Stack's ``workspaceTemplate`` image) as the Stack's ServiceAccount: it checks the source
out, prepares the workspace and runs ``pulumi`` itself, with the Stack's Secrets put into
its environment by the kubelet. The operator creates the pod, follows its log for the
agent's reports (``workspace.runner.channel``), deletes the pod once it has the outcome
(or keeps it: ``Retain`` below), and never sees the program's environment (nor the
program the operator's). Following a
run is ``pod.run``'s job, the API calls ``pod.api``'s, reading a pod ``pod.state``'s: this
module decides which pod a run follows (create, attach, clear an earlier one).

Guarantees:

* One run pod per Stack, enforced by the API server: the pod's name is a function of the
  Stack's name (``podspec.pod_name``). An existing pod of the same run (same Stack uid,
  generation, commit and operation) is followed, not replaced: a restarted operator
  re-attaches. A finished or older run pod of the Stack is waited for and deleted first;
  a pod of that name that the operator did not create for this Stack is left alone and
  the run fails saying so.
* ``RunJob.reclaim`` ``Retain`` (the Stack's ``workspaceReclaimPolicy``) keeps a run pod
  that ended on its own once its outcome is taken, so that its log stays readable
  (``kubectl logs``); it is annotated as concluded (``podspec.ANNOTATION_CONCLUDED``). A
  concluded pod is never followed or attached to again, whatever its generation: the
  Stack's next run (or an attach after a restart) deletes it at once and waits for it to
  be gone before creating its own. The pod is owned by its Stack (``ownerReferences``),
  so the garbage collector deletes a kept pod with the Stack. A pod that never started,
  or that the operator interrupted, is deleted as with ``Delete``; so is one the API does
  not let the operator annotate (``patch`` on pods refused).
* A report is taken only from the pod created (or attached to) for this Stack and
  generation; a report line cannot name another Stack or generation.
* A run that ends without an outcome is concluded as ``RUNNER_FAILED`` with the pod's own
  reason: deleted, ``Evicted``, ``OOMKilled``, ``DeadlineExceeded``, an exit code, or a
  container that cannot start (``ImagePullBackOff``, ``CreateContainerConfigError`` for a
  missing Secret, …), and a pod that stays unschedulable past ``start_timeout``, or past
  ``START_SHARE`` of the run's deadline when that is sooner: a pod that cannot start is
  concluded ``NotStarted`` with the scheduler's reason before the deadline interrupts it.
* A program that failed because its pod ran past its memory limit (a node that kills only
  the largest process, cgroup v1: the agent still reports) is ``RUNNER_FAILED``
  ``OOMKilled`` naming the limit, once the container's end says so (``podrun.END_LOOK``).
* A pod the API server refuses to create (a ResourceQuota, a LimitRange's maximum, Pod
  Security admission, a namespace being deleted) fails the run ``RUNNER_FAILED`` with the
  API server's message and what to change (``refusal``); the pod-failure metric counts it
  as ``CreateRefused`` (``CreateFailed`` when the API server could not answer: 5xx, 429).
  The reconciler retries it with backoff.
* ``stop`` with cause ``shutdown`` (the operator is stopping) leaves the pod running and
  returns ``Detached``; any other cause deletes the pod with its grace period: the agent
  interrupts the CLI the way Ctrl-C does and reports ``INTERRUPTED``.
* Backend locks are the pod's business: ``locks``, ``clear_stale_lock`` and ``cancel``
  do nothing here. A run pod the operator no longer sees (its node lost, the pod
  force-deleted) may still run; its agent holds a lease on its lock and stops itself
  once its pod is gone, and the next run pod's agent runs its program only once that
  lock has gone or its lease has lapsed (``workspace.runner.lease``). So the operator
  may start the next run pod as soon as the API server lets it (the earlier pod gone):
  the agent, which can read the backend, is where overlapping runs are refused.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import ClassVar

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.clock import Clock, RealClock
from controller.tracing import Attribute, tracing
from workspace.runner.base import JobRunner, RunnerTraits
from workspace.runner.job import RunJob
from workspace.runner.pod import spec as podspec
from workspace.runner.pod import state as podstate
from workspace.runner.pod import warm
from workspace.runner.pod.api import PodApi, PodChanges
from workspace.runner.pod.idle import IdlePods
from workspace.runner.pod.legs import legs
from workspace.runner.pod.run import (
    STOP_CHECK,
    Following,
    PodMetrics,
    PodRun,
    detached,
    failed,
)
from workspace.runner.pod.spec import RunCaching
from workspace.runner.pod.state import Pod
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    Detached,
    ErrorKind,
    Operation,
    Outcome,
    ProgressCallback,
    RunResult,
    UpdateRequest,
    failed_outcome,
    stop_cause,
)

log = structlog.get_logger(__name__)

DEFAULT_START_TIMEOUT = 600.0  # seconds a run pod may stay unscheduled or not started
GONE_TIMEOUT = 300  # seconds past its grace an earlier run pod may take to be gone
START_SHARE = 0.8  # of a run's deadline, the most its pod may take to start
CREATE_REFUSED = "CreateRefused"  # the pod-failure metric's reason for a refused create
CREATE_FAILED = "CreateFailed"  # ... for a create the API server could not answer (5xx, 429)
"""Failures that are not the program's: its pod is not looked at again for an OOM kill."""


class _NoMetrics:
    def pod_created(self) -> None:
        pass

    def pod_reused(self) -> None:
        pass

    def idle_pods(self, count: int) -> None:
        del count

    def pod_failed(self, reason: str) -> None:
        del reason

    def pod_started(self, seconds: float) -> None:
        del seconds

    def spec_to_running(self, seconds: float) -> None:
        del seconds


class PodRunner(JobRunner):
    """Runs each operation in a pod (see the module docstring); safe to share."""

    traits: ClassVar[RunnerTraits] = RunnerTraits(
        takes_job=True, outlives_operator=True, in_pods=True
    )

    def __init__(  # noqa: PLR0913 - settings, all keyword-only
        self,
        api_client: client.ApiClient,
        image: str,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        metrics: PodMetrics | None = None,
        caching: RunCaching | None = None,
        clock: Clock | None = None,
        field_manager: str | None = None,
        requests: Mapping[str, str] = podspec.DEFAULT_REQUESTS,
        keep_warm: float = 0.0,
    ) -> None:
        """Create pods of ``image`` through ``api_client``; time them on ``clock``.

        ``caching`` says which claim of a Stack's namespace its run pods mount as their
        dependency cache (when it exists), its limit and the plugin mirror; the pods are
        written as ``field_manager``; ``requests`` are a run's resource requests where its
        Stack sets none; ``keep_warm``: seconds a run pod waits for its Stack's next run
        (0: none waits; see "Warm run pods" in the module docstring).
        """
        self.api = PodApi(api_client, field_manager)
        self.image = image
        self.caching = caching or RunCaching()
        self.requests = dict(requests)
        self.keep_warm = keep_warm
        given = metrics or _NoMetrics()
        clock = clock or RealClock()
        self._with = Following(
            api=self.api,
            clock=clock,
            metrics=given,
            grace=interrupt_grace,
            start_timeout=start_timeout,
            idle=IdlePods(self.api, clock, given.idle_pods) if keep_warm > 0 else None,
        )

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult | None:
        """The outcome of the Stack's run pod for the request's generation and commit.

        None when there is no such pod. A run pod of the Stack for another generation,
        commit or operation is waited for and deleted first (its outcome is not the
        request's), then None; so is a concluded one kept for ``Retain`` (its outcome was
        taken), without waiting.
        """
        job = self._job(request)
        operation: Operation = "preview" if request.preview else "up"
        pod = self.api.read(job)
        if pod is None:
            return None
        report = on_progress or (lambda _progress: None)
        stopping = stop or threading.Event()
        if podstate.is_run(pod, job, operation):
            log.info("Attaching to the Stack's run pod", pod=podspec.pod_name(job.owner.name))
            return self._run(self._follow(job, pod, operation), report, stopping)
        cleared = self._clear(job, pod, operation, stopping)
        return cleared if isinstance(cleared, Detached) else None

    def close(self, timeout: float) -> None:
        """The operator is stopping: delete the warm run pods waiting (``IdlePods.close``)."""
        if self._with.idle is not None:
            self._with.idle.close(timeout)

    def has_cache_claim(self, namespace: str) -> bool:
        """Whether ``namespace`` has the cache claim (False when it cannot be read)."""
        return bool(self.caching.claim) and self.api.has_claim(namespace, self.caching.claim)

    # which pod a run follows ------------------------------------------------------------

    def _run(self, run: PodRun, on_progress: ProgressCallback, stop: threading.Event) -> RunResult:
        """Follow ``run`` to its result; a program failure its pod's OOM kill caused says so.

        On a node that kills only the largest process of a container past its memory
        limit (cgroup v1), the program dies and the agent reports the CLI's failure; the
        container's end still reads ``OOMKilled``. Such a failure is ``RUNNER_FAILED``
        ``OOMKilled``, naming the limit to raise, with the CLI's message after it.
        """
        result = run.follow(on_progress, stop)
        self._trace_legs(run)
        ended = run.end
        if not isinstance(result, Outcome) or ended is None:
            return result
        if podstate.container_reason(ended) != "OOMKilled":
            return result
        self._with.metrics.pod_failed("OOMKilled")
        text = (
            f"the run pod {run.job.namespace}/{run.name} failed: OOMKilled: a process of the "
            f"run container was killed for memory: {podstate.oom_hint(ended)}"
        )
        log.warning("The run pod was OOM-killed", pod=run.name)
        return dataclasses.replace(
            result, error=ErrorKind.RUNNER_FAILED, message=f"{text}; {result.message}"
        )

    def _trace_legs(self, run: PodRun) -> None:
        """The pod's legs as spans of the current trace (``workspace.runner.pod.legs``).

        None for a run handed to a warm pod: its pod started for an earlier run.
        """
        if run.mark is not None:
            return
        where: dict[str, Attribute] = {
            "k8s.namespace.name": run.job.namespace,
            "k8s.pod.name": run.name,
        }
        node = run.last.get("spec", {}).get("nodeName")
        if node:
            where["k8s.node.name"] = node
        for leg in legs(run.last, self._with.clock.wall()):
            tracing().record(leg.name, leg.start, leg.end, where)

    def _follow(self, job: RunJob, pod: Pod, operation: str, *, keep: bool = False) -> PodRun:
        """Follow ``pod``, which must start within the start timeout bounded by the deadline.

        A warm pod's run is followed from its mark (``podspec.ANNOTATION_MARK``).
        """
        limit = start_limit(self._with.start_timeout, job.timeout)
        following = dataclasses.replace(self._with, start_timeout=limit)
        mark = podstate.annotation(pod, podspec.ANNOTATION_MARK)
        return PodRun(following, job, pod, operation, self._now(), keep=keep, mark=mark)

    def _operate(
        self,
        job: RunJob,
        operation: Operation,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> RunResult:
        began = self._with.clock.now()
        existing = self.api.read(job)
        if existing is not None and podstate.is_run(existing, job, operation):
            return self._run(self._follow(job, existing, operation), on_progress, stop)
        manifest = self._manifest(job, operation)
        if existing is not None and warm.fits(existing, manifest, job, self._with.clock.wall()):
            taken = self._hand_over(job, existing, operation, self._with.clock.now() - began)
            if taken is not None:
                return self._run(taken, on_progress, stop)
        if existing is not None:
            if self._with.idle is not None:
                self._with.idle.forget(job, podstate.uid(existing))
            cleared = self._clear(job, existing, operation, stop)
            if cleared is not None:
                return cleared
        if stop.is_set():  # stopped while an earlier pod ended: start nothing
            return self._stopped(operation, stop)
        return self._create(job, operation, manifest, on_progress, stop)

    def _manifest(self, job: RunJob, operation: Operation) -> Pod:
        """The run pod for ``job``: warm (its fit key annotated) when it may be kept so.

        Not warm when the Secrets and ConfigMaps it reads cannot be read for the key.
        """
        manifest = self._pod(job, operation, self.keep_warm)
        if podspec.is_warm(manifest) and not warm.annotate(manifest, self.api, job.namespace):
            return self._pod(job, operation, 0.0)
        return manifest

    def _pod(self, job: RunJob, operation: Operation, keep_warm: float) -> Pod:
        return podspec.run_pod(
            job,
            operation,
            image=self.image,
            grace=self._with.grace,
            caching=self.caching,
            cached=self.has_cache_claim(job.namespace),
            requests=self.requests,
            keep_warm=keep_warm,
        )

    def _hand_over(self, job: RunJob, pod: Pod, operation: Operation, fit: float) -> PodRun | None:
        """Hand the run to the Stack's idle warm pod; its follow, or None if not taken.

        ``fit`` is the seconds it took to find that the pod fits (logged with the take's).
        """
        began = self._with.clock.now()
        handed = warm.hand_over(self.api, job, pod, operation)
        if handed is None:
            return None
        uid = podstate.uid(pod)
        if self._with.idle is not None:
            self._with.idle.forget(job, uid)
        self._with.metrics.pod_reused()
        log.info(
            "Handed the run to the warm run pod",
            pod=podstate.name(pod),
            operation=operation,
            fit_s=round(fit, 3),
            take_s=round(self._with.clock.now() - began, 3),
        )
        limit = start_limit(self._with.start_timeout, job.timeout)
        following = dataclasses.replace(self._with, start_timeout=limit)
        return PodRun(following, job, pod, operation, self._now(), mark=handed)

    def _create(
        self,
        job: RunJob,
        operation: Operation,
        manifest: Pod,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> RunResult:
        try:
            pod = self.api.create(job, manifest)
        except ApiException as err:
            raced = self.api.read(job) if err.status == 409 else None
            if raced is not None and podstate.is_run(raced, job, operation):
                return self._run(self._follow(job, raced, operation), on_progress, stop)
            self._with.metrics.pod_failed(create_failure(err))
            log.warning("The run pod was refused", status=err.status, operation=operation)
            message = refusal(job, err)
            return failed(operation, (self._now(), self._now()), message)
        self._with.metrics.pod_created()
        log.info("Created the run pod", pod=podstate.name(pod), operation=operation)
        return self._run(self._follow(job, pod, operation), on_progress, stop)

    def _clear(
        self, job: RunJob, pod: Pod, operation: str, stop: threading.Event
    ) -> RunResult | None:
        """Remove a run pod that is not this run's; None once it is gone.

        An earlier run pod of this Stack that still runs is waited for first (at most one
        run per Stack), or interrupted when this run is a ``destroy``; a finished one, or
        one whose outcome was taken already (kept for ``Retain``), is deleted at once. A pod
        the operator did not create for this Stack is refused.
        """
        name = podstate.name(pod)
        if not podstate.is_operators(pod):
            message = (
                f"a pod named {name} that this operator did not create exists in namespace "
                f"{job.namespace}; the Stack's run pod needs that name: delete or rename it"
            )
            return failed(operation, (self._now(), self._now()), message)
        done = podstate.finished(pod) or podstate.concluded(pod)
        if podstate.is_stacks(pod, job) and not done:
            ran = podstate.annotation(pod, podspec.ANNOTATION_OPERATION) or "up"
            earlier = self._follow(job, pod, ran, keep=True)
            if operation == "destroy":
                earlier.interrupt()
            log.info("Waiting for the Stack's earlier run pod to end", pod=name)
            if isinstance(earlier.follow(lambda _progress: None, stop), Detached):
                return detached(operation, self._now())
        self.api.delete(job, podstate.uid(pod))
        return self._wait_gone(job, pod, operation, stop)

    def _wait_gone(
        self, job: RunJob, pod: Pod, operation: str, stop: threading.Event
    ) -> RunResult | None:
        """None once ``pod`` is gone; an outcome if stopped or it never goes."""
        clock, uid = self._with.clock, podstate.uid(pod)
        give_up = clock.now() + self._with.grace + GONE_TIMEOUT
        started = self._now()
        with PodChanges(self.api, job, pod, clock) as changes:
            seen = changes.version
            while (now := changes.pod) is not None and podstate.uid(now) == uid:
                if stop.is_set():
                    return self._stopped(operation, stop)
                if clock.now() >= give_up:
                    message = (
                        f"the earlier run pod {job.namespace}/{podstate.name(now)} is still "
                        "terminating; the run waits for it to be gone (check its node and "
                        "finalizers)"
                    )
                    return failed(operation, (started, self._now()), message)
                seen = changes.wait(seen, min(clock.now() + STOP_CHECK, give_up))
        return None

    def _stopped(self, operation: str, stop: threading.Event) -> RunResult:
        """The result of a run stopped before its pod started: detached or interrupted."""
        if stop_cause(stop) == "shutdown":
            return detached(operation, self._now())
        message = "stopped before its pod started"
        now = self._now()
        return failed_outcome(operation, ErrorKind.INTERRUPTED, message, now, now)

    def _now(self) -> datetime:
        return self._with.clock.wall()


def start_limit(start_timeout: float, deadline: float) -> float:
    """Seconds a run pod may take to start: ``start_timeout``, at most a share of its run.

    ``START_SHARE`` of the run's ``deadline``: a pod that cannot start is concluded
    ``NotStarted``, saying why, before the deadline interrupts the run.
    """
    return min(start_timeout, START_SHARE * deadline)


RETRIED = "the run is retried with backoff"
LIMIT_RANGE = (
    "the namespace's LimitRange refuses the run pod's resources: keep "
    f"spec.workspaceTemplate.spec.resources within it; {RETRIED}"
)
REFUSALS = {
    "being terminated": "the namespace is being deleted: no run pod can be created in it",
    "exceeded quota": (
        "the namespace's ResourceQuota allows no more: raise or lift it, or lower "
        f"spec.workspaceTemplate.spec.resources; {RETRIED}"
    ),
    "failed quota": (
        "the namespace's ResourceQuota requires requests or limits: set them in "
        f"spec.workspaceTemplate.spec.resources; {RETRIED}"
    ),
    "per Container": LIMIT_RANGE,
    "per Pod": LIMIT_RANGE,
    "violates PodSecurity": (
        "the namespace's Pod Security admission refuses the run pod: allow it, or set "
        f"spec.workspaceTemplate.spec.securityProfile; {RETRIED}"
    ),
}
"""A fragment of the API server's refusal -> what the Stack's owner can do about it."""


def create_failure(err: ApiException) -> str:
    """The pod-failure metric's reason for a failed create: refused (4xx) or not answered."""
    status = err.status or 0
    return CREATE_REFUSED if 400 <= status < 500 and status != 429 else CREATE_FAILED


def refusal(job: RunJob, err: ApiException) -> str:
    """The message of a run pod the API server refused to create: its words, and what to do."""
    text = _api_text(err)
    hint = next((h for fragment, h in REFUSALS.items() if fragment in text), None)
    pod = f"{job.namespace}/{podspec.pod_name(job.owner.name)}"
    message = f"creating the run pod {pod} failed: {text}"
    return f"{message}; {hint}" if hint else message


def _api_text(err: ApiException) -> str:
    """The status and the API server's own message (a quota, Pod Security, a missing SA)."""
    text = f"{err.status} {err.reason}"
    try:
        message = json.loads(err.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{text}: {message}" if message else text
