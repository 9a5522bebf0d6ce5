"""``PodRunner``: each Pulumi operation runs in a pod of its own, in the Stack's namespace.

The pod runs the agent (``pulumi-stack-operator agent``) of the operator's image (or the
Stack's ``workspaceTemplate`` image) as the Stack's ServiceAccount: it checks the source
out, prepares the workspace and runs ``pulumi`` itself, with the Stack's Secrets put into
its environment by the kubelet. The operator creates the pod, follows its log for the
agent's reports (``workspace.runner.channel``), deletes the pod once it has the outcome,
and never sees the program's environment (nor the program the operator's).

Guarantees:

* One run pod per Stack, enforced by the API server: the pod's name is a function of the
  Stack's name (``podspec.pod_name``). An existing pod of the same run (same Stack uid,
  generation, commit and operation) is followed, not replaced: a restarted operator
  re-attaches. A finished or older run pod of the Stack is waited for and deleted first;
  a pod of that name that the operator did not create for this Stack is left alone and
  the run fails saying so.
* A report is taken only from the pod created (or attached to) for this Stack and
  generation; a report line cannot name another Stack or generation.
* A run that ends without an outcome is concluded as ``RUNNER_FAILED`` with the pod's own
  reason: deleted, ``Evicted``, ``OOMKilled``, ``DeadlineExceeded``, an exit code, or a
  container that cannot start (``ImagePullBackOff``, ``CreateContainerConfigError`` for a
  missing Secret, …), and a pod that stays unschedulable past ``start_timeout``.
* ``stop`` with cause ``shutdown`` (the operator is stopping) leaves the pod running and
  returns ``DETACHED``; any other cause deletes the pod with its grace period: the agent
  interrupts the CLI the way Ctrl-C does and reports ``INTERRUPTED``.
* Backend locks are the pod's business: a lock left by an earlier run pod of the Stack
  (same hostname: the pod's name) is released by the agent; ``locks``,
  ``clear_stale_lock`` and ``cancel`` do nothing here.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.response import BaseHTTPResponse

from workspace.runner import podspec
from workspace.runner.channel import MAX_LINE, parse_line
from workspace.runner.job import RunJob
from workspace.runner.podspec import RunCaching
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    ErrorKind,
    LockInfo,
    Operation,
    Outcome,
    Progress,
    ProgressCallback,
    UpdateRequest,
    failed_outcome,
    stop_cause,
)

log = structlog.get_logger(__name__)

Pod = Mapping[str, Any]
"""A pod as the API serves it (camelCase JSON)."""

DEFAULT_START_TIMEOUT = 600.0  # seconds a run pod may stay unscheduled or not started
API_TIMEOUT = 30  # seconds: connect and read of one API call
LOG_READ_TIMEOUT = 120  # seconds of a silent log stream before the pod is looked at again
GONE_TIMEOUT = 300  # seconds past its grace an earlier run pod may take to be gone
CANNOT_START = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


class PodMetrics(Protocol):
    """What ``PodRunner`` records about its pods."""

    def pod_created(self) -> None:
        """One run pod was created."""
        ...

    def pod_failed(self, reason: str) -> None:
        """One run ended without an outcome, for ``reason`` (the pod's own)."""
        ...

    def pod_started(self, seconds: float) -> None:
        """A run pod's container started ``seconds`` after the pod was created."""
        ...

    def spec_to_running(self, seconds: float) -> None:
        """A run pod for a spec change ran ``seconds`` after the change was written."""
        ...


class _NoMetrics:
    def pod_created(self) -> None:
        pass

    def pod_failed(self, reason: str) -> None:
        del reason

    def pod_started(self, seconds: float) -> None:
        del seconds

    def spec_to_running(self, seconds: float) -> None:
        del seconds


class PodRunner:
    """Runs each operation in a pod (see the module docstring); safe to share."""

    def __init__(  # noqa: PLR0913 - settings, all keyword-only
        self,
        api_client: client.ApiClient,
        image: str,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        poll: float = 1.0,
        metrics: PodMetrics | None = None,
        caching: RunCaching | None = None,
    ) -> None:
        """Create pods of ``image`` through ``api_client``; look at them every ``poll`` s.

        ``caching`` says which claim of a Stack's namespace its run pods mount as their
        dependency cache (when it exists), its limit and the plugin mirror.
        """
        self._api = api_client
        self._core = client.CoreV1Api(api_client)
        self.image = image
        self._grace, self._start_timeout, self._poll = interrupt_grace, start_timeout, poll
        self._metrics: PodMetrics = metrics or _NoMetrics()
        self.caching = caching or RunCaching()

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Run ``up`` (or ``preview``) in the Stack's run pod and return its outcome."""
        operation: Operation = "preview" if request.preview else "up"
        return self._operate(_job(request), operation, on_progress, stop)

    def destroy(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Run ``destroy`` in the Stack's run pod, after any run pod it has ends."""
        return self._operate(_job(request), "destroy", on_progress, stop)

    def prepare(self, request: UpdateRequest) -> Outcome | None:
        """None: the pod prepares its own workspace."""
        del request
        return None

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome | None:
        """The outcome of the Stack's run pod for the request's generation and commit.

        None when there is no such pod. A run pod of the Stack for another generation,
        commit or operation is waited for and deleted first (its outcome is not the
        request's), then None.
        """
        job = _job(request)
        operation: Operation = "preview" if request.preview else "up"
        pod = self.read(job)
        if pod is None:
            return None
        report = on_progress or (lambda _progress: None)
        stopping = stop or threading.Event()
        if _is_run(pod, job, operation):
            log.info("Attaching to the Stack's run pod", pod=podspec.pod_name(job.stack_name))
            return _PodRun(self, job, pod, operation, _now()).follow(report, stopping)
        cleared = self._clear(job, pod, operation, stopping)
        return cleared if cleared is not None and cleared.error is ErrorKind.DETACHED else None

    def locks(self, request: UpdateRequest) -> list[LockInfo] | None:
        """None: the backend is the run pod's to read."""
        del request
        return None

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """False: the agent releases a lock an earlier run pod of the Stack left."""
        del request
        return False

    def cancel(self, request: UpdateRequest) -> bool:
        """False: the agent releases a lock an earlier run pod of the Stack left."""
        del request
        return False

    # the run ------------------------------------------------------------------------------

    def _operate(
        self,
        job: RunJob,
        operation: Operation,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> Outcome:
        started = _now()
        existing = self.read(job)
        if existing is not None and _is_run(existing, job, operation):
            return _PodRun(self, job, existing, operation, started).follow(on_progress, stop)
        if existing is not None:
            cleared = self._clear(job, existing, operation, stop)
            if cleared is not None:
                return cleared
        if stop.is_set():  # stopped while an earlier pod ended: start nothing
            return _stopped(operation, started, stop)
        return self._create(job, operation, on_progress, stop, started)

    def _create(
        self,
        job: RunJob,
        operation: Operation,
        on_progress: ProgressCallback,
        stop: threading.Event,
        started: datetime,
    ) -> Outcome:
        manifest = podspec.run_pod(
            job,
            operation,
            image=self.image,
            grace=self._grace,
            caching=self.caching,
            cached=self.has_cache_claim(job.namespace),
        )
        try:
            created = self._core.create_namespaced_pod(
                job.namespace,
                manifest,  # type: ignore[arg-type]
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as err:
            raced = self.read(job) if err.status == 409 else None
            if raced is not None and _is_run(raced, job, operation):
                return _PodRun(self, job, raced, operation, started).follow(on_progress, stop)
            return _failed(operation, started, f"creating the run pod failed: {_api_text(err)}")
        pod: Pod = self._api.sanitize_for_serialization(created)
        self._metrics.pod_created()
        log.info("Created the run pod", pod=_name(pod), operation=operation)
        return _PodRun(self, job, pod, operation, started).follow(on_progress, stop)

    def _clear(
        self, job: RunJob, pod: Pod, operation: str, stop: threading.Event
    ) -> Outcome | None:
        """Remove a run pod that is not this run's; None once it is gone.

        An earlier run pod of this Stack that still runs is waited for first (at most one
        run per Stack), or interrupted when this run is a ``destroy``; a pod the operator
        did not create for this Stack is refused.
        """
        name, labels = _name(pod), _labels(pod)
        if labels.get(podspec.LABEL_MANAGED_BY) != podspec.MANAGED_BY:
            message = (
                f"a pod named {name} that this operator did not create exists in namespace "
                f"{job.namespace}; the Stack's run pod needs that name: delete or rename it"
            )
            return _failed(operation, _now(), message)
        if labels.get(podspec.LABEL_STACK_UID) == job.stack_uid and not _finished(pod):
            earlier = _PodRun(
                self, job, pod, _annotation(pod, podspec.ANNOTATION_OPERATION) or "up", _now()
            )
            earlier.keep = True
            if operation == "destroy":
                earlier.interrupt()
            log.info("Waiting for the Stack's earlier run pod to end", pod=name)
            ended = earlier.follow(lambda _progress: None, stop)
            if ended.error is ErrorKind.DETACHED:
                return _detached(operation, ended.started)
        self.delete(job, _uid(pod))
        return self._wait_gone(job, _uid(pod), operation, stop)

    def _wait_gone(
        self, job: RunJob, uid: str, operation: str, stop: threading.Event
    ) -> Outcome | None:
        """None once the pod ``uid`` is gone; an outcome if stopped or it never goes."""
        started, give_up = _now(), time.monotonic() + self._grace + GONE_TIMEOUT
        while (pod := self.read(job)) is not None and _uid(pod) == uid:
            if stop.is_set():
                return _stopped(operation, started, stop)
            if time.monotonic() > give_up:
                message = (
                    f"the earlier run pod {job.namespace}/{_name(pod)} is still terminating; "
                    "the run waits for it to be gone (check its node and finalizers)"
                )
                return _failed(operation, started, message)
            time.sleep(self._poll)
        return None

    # API calls ----------------------------------------------------------------------------

    def has_cache_claim(self, namespace: str) -> bool:
        """Whether ``namespace`` has the cache claim (False when it cannot be read)."""
        if not self.caching.claim:
            return False
        try:
            self._core.read_namespaced_persistent_volume_claim(
                self.caching.claim, namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as err:
            if err.status != 404:
                log.warning(
                    "Cannot read the cache claim; running without it",
                    claim=self.caching.claim,
                    status=err.status,
                )
            return False
        return True

    def read(self, job: RunJob) -> Pod | None:
        """The Stack's run pod, or None when there is none."""
        try:
            found = self._core.read_namespaced_pod(
                podspec.pod_name(job.stack_name), job.namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        pod: Pod = self._api.sanitize_for_serialization(found)
        return pod

    def delete(self, job: RunJob, uid: str, *, grace: float | None = None) -> None:
        """Delete the Stack's run pod if it is still the one with ``uid``."""
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        if grace is not None:
            body.grace_period_seconds = int(grace) + 5
        try:
            self._core.delete_namespaced_pod(
                podspec.pod_name(job.stack_name),
                job.namespace,
                body=body,
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as err:
            if err.status not in (404, 409):  # gone, or already another pod
                raise

    def logs(self, job: RunJob) -> BaseHTTPResponse:
        """The run pod's log, followed (a streaming urllib3 response).

        A read times out after ``LOG_READ_TIMEOUT`` seconds of silence: a connection a
        load balancer dropped is noticed, and the pod is looked at again.
        """
        return self._core.read_namespaced_pod_log(  # type: ignore[return-value]
            podspec.pod_name(job.stack_name),
            job.namespace,
            container=podspec.CONTAINER,
            follow=True,
            _preload_content=False,
            _request_timeout=(API_TIMEOUT, LOG_READ_TIMEOUT),
        )


class _PodRun:
    """Following one run pod to its outcome (one per call; not shared)."""

    def __init__(
        self,
        runner: PodRunner,
        job: RunJob,
        pod: Pod,
        operation: str,
        started: datetime,
    ) -> None:
        self.runner, self.job, self.operation, self.started = runner, job, operation, started
        self.uid, self.name = _uid(pod), _name(pod)
        self.created = _time(pod["metadata"].get("creationTimestamp"))
        self.last = pod
        self.interrupted = False
        self.started_seen = False
        self.keep = False  # keep the pod (an earlier run's, deleted by the caller)

    def follow(self, on_progress: ProgressCallback, stop: threading.Event) -> Outcome:
        """Follow the pod until it reports an outcome or ends without one."""
        waiting_since = time.monotonic()
        while True:
            if stop.is_set():
                if stop_cause(stop) == "shutdown":
                    return _detached(self.operation, self.started)
                self.interrupt()
            pod = self.runner.read(self.job)
            if pod is None or _uid(pod) != self.uid:
                return self.ended_without_outcome(gone=True)
            self.last = pod
            blocked = _cannot_start(pod)
            if blocked is not None:
                return self.fail(*blocked)
            if _container_started(pod):
                self.note_started(pod)
                outcome = self.read_reports(on_progress, stop)
                if outcome is not None:
                    return outcome
            elif time.monotonic() - waiting_since > self.runner._start_timeout:  # noqa: SLF001
                return self.fail("NotStarted", _pending_reason(pod))
            time.sleep(self.runner._poll)  # noqa: SLF001

    def read_reports(self, on_progress: ProgressCallback, stop: threading.Event) -> Outcome | None:
        """Read the pod's log to its end; the outcome, or None to look at the pod again."""
        try:
            response = self.runner.logs(self.job)
        except ApiException as err:
            if err.status in (400, 404):  # not readable (yet, or any more)
                return self._after_log()
            raise
        detached = threading.Event()
        reading = threading.Event()
        watcher = threading.Thread(
            target=self._watch_stop, args=(stop, response, detached, reading), daemon=True
        )
        watcher.start()
        try:
            outcome = _read_log(response, on_progress)
        finally:
            reading.set()
            watcher.join()
            _close(response)
        if detached.is_set():
            return _detached(self.operation, self.started)
        if outcome is not None:
            return self.concluded(outcome)
        return self._after_log()

    def _after_log(self) -> Outcome | None:
        """The log ended without an outcome: the pod's end, or None if it still runs."""
        pod = self.runner.read(self.job)
        if pod is None or _uid(pod) != self.uid:
            return self.ended_without_outcome(gone=True)
        self.last = pod
        if _finished(pod) or _container_terminated(pod):
            return self.ended_without_outcome(gone=False)
        return None  # the stream broke while the container runs: follow again

    def _watch_stop(
        self,
        stop: threading.Event,
        response: BaseHTTPResponse,
        detached: threading.Event,
        reading: threading.Event,
    ) -> None:
        """While the log is read: detach on shutdown, interrupt on any other stop."""
        while not reading.is_set():
            if not stop.wait(0.2):
                continue
            if stop_cause(stop) == "shutdown":
                detached.set()
                _unblock(response)
                return
            try:
                self.interrupt()
            except Exception:  # noqa: BLE001 - the main loop interrupts again
                log.warning("Could not delete the run pod to interrupt it", pod=self.name)
                _unblock(response)
                return
            # Interrupted: keep reading its outcome, but still detach on a shutdown.
            while not reading.wait(0.2):
                if stop_cause(stop) == "shutdown":
                    detached.set()
                    _unblock(response)
                    return
            return

    def interrupt(self) -> None:
        """Delete the pod with its grace period: the agent interrupts the CLI (once)."""
        if not self.interrupted:
            log.info("Interrupting the run pod", pod=self.name)
            self.runner.delete(self.job, self.uid, grace=self.runner._grace)  # noqa: SLF001
            self.interrupted = True

    def note_started(self, pod: Pod) -> None:
        """Record the pod's start latency, once."""
        if self.started_seen:
            return
        self.started_seen = True
        state = _container_state(pod)
        running = state.get("running") or state.get("terminated") or {}
        at = _time(running.get("startedAt"))
        changed = self.job.changed_at
        if at is not None and changed is not None:
            self.runner._metrics.spec_to_running(max(0.0, (at - changed).total_seconds()))  # noqa: SLF001
        if at is not None and self.created is not None:
            self.runner._metrics.pod_started(max(0.0, (at - self.created).total_seconds()))  # noqa: SLF001

    def concluded(self, outcome: Outcome) -> Outcome:
        """The agent's outcome, checked against this run; the pod is deleted."""
        if not self.keep:
            self.runner.delete(self.job, self.uid)
        if outcome.operation != self.operation:
            message = f"the run pod reported a {outcome.operation}, not the {self.operation} it ran"
            return _failed(self.operation, self.started, message)
        if outcome.error is ErrorKind.INTERRUPTED and not self.interrupted:
            # SIGTERM the operator did not send: a drain, an eviction, a deadline, a user.
            pod = self.runner.read(self.job)
            reason, why = _terminated_reason(pod if pod is not None else self.last)
            if reason in ("Unknown", "Error", "Completed"):
                reason, why = "Deleted", self._deleted_by()
            return self.fail(reason, f"{why}; {outcome.message}", delete=False)
        return outcome

    def ended_without_outcome(self, *, gone: bool) -> Outcome:
        """The pod stopped (or vanished) without reporting an outcome."""
        pod = self.last
        reason, message = _terminated_reason(pod)
        if self.interrupted:  # the operator deleted it: the run was interrupted, as asked
            note = f"interrupted by the operator; the run pod {self.name} ended without an outcome"
            return _outcome(self.operation, self.started, ErrorKind.INTERRUPTED, note)
        if gone and reason == "Unknown":
            reason, message = "Deleted", self._deleted_by()
        return self.fail(reason, message, delete=not gone)

    def fail(self, reason: str, message: str, *, delete: bool = True) -> Outcome:
        """A ``RUNNER_FAILED`` outcome naming the pod's ``reason``; the pod is deleted."""
        if delete and not self.keep:
            self.runner.delete(self.job, self.uid)
        self.runner._metrics.pod_failed(reason)  # noqa: SLF001
        text = f"the run pod {self.job.namespace}/{self.name} failed: {reason}"
        log.warning("The run pod ended without an outcome", pod=self.name, reason=reason)
        return _failed(self.operation, self.started, f"{text}: {message}" if message else text)

    def _deleted_by(self) -> str:
        return (
            "the run pod was deleted while the run was in progress (a node drain, an eviction "
            "or a user deleted it); the update was interrupted"
        )


def _unblock(response: BaseHTTPResponse) -> None:
    """Make a read blocked on ``response`` return at once (shutdown wakes it; close does not)."""
    shutdown = getattr(response, "shutdown", None)
    if callable(shutdown):
        with contextlib.suppress(Exception):
            shutdown()


def _close(response: BaseHTTPResponse) -> None:
    with contextlib.suppress(Exception):
        response.release_conn()
        response.close()


# pod status --------------------------------------------------------------------------------


def _job(request: UpdateRequest) -> RunJob:
    if request.job is None:
        msg = "PodRunner needs UpdateRequest.job (the reconciler's settings say remote_runs)"
        raise ValueError(msg)
    return request.job


def _name(pod: Pod) -> str:
    return str(pod["metadata"]["name"])


def _uid(pod: Pod) -> str:
    return str(pod["metadata"].get("uid") or "")


def _labels(pod: Pod) -> Mapping[str, str]:
    labels: Mapping[str, str] = pod["metadata"].get("labels") or {}
    return labels


def _annotation(pod: Pod, key: str) -> str | None:
    found = (pod["metadata"].get("annotations") or {}).get(key)
    return str(found) if found is not None else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value)


def _is_run(pod: Pod, job: RunJob, operation: str) -> bool:
    """Whether ``pod`` is this run's: this Stack's, generation, commit and operation."""
    labels = _labels(pod)
    return (
        labels.get(podspec.LABEL_MANAGED_BY) == podspec.MANAGED_BY
        and labels.get(podspec.LABEL_STACK_UID) == job.stack_uid
        and _annotation(pod, podspec.ANNOTATION_GENERATION) == str(job.generation)
        and _annotation(pod, podspec.ANNOTATION_COMMIT) == job.commit
        and _annotation(pod, podspec.ANNOTATION_OPERATION) == operation
        and not pod["metadata"].get("deletionTimestamp")
    )


def _status(pod: Pod) -> Mapping[str, Any]:
    status: Mapping[str, Any] = pod.get("status") or {}
    return status


def _finished(pod: Pod) -> bool:
    return _status(pod).get("phase") in ("Succeeded", "Failed")


def _container_state(pod: Pod, *, init: bool = False) -> Mapping[str, Any]:
    """The state of the run container (``init``: of the checkout init container)."""
    field, name = (
        ("initContainerStatuses", podspec.CHECKOUT)
        if init
        else ("containerStatuses", podspec.CONTAINER)
    )
    for status in _status(pod).get(field) or ():
        if status.get("name") == name:
            state: Mapping[str, Any] = status.get("state") or {}
            return state
    return {}


def _container_started(pod: Pod) -> bool:
    state = _container_state(pod)
    return bool(state.get("running") or state.get("terminated"))


def _container_terminated(pod: Pod) -> bool:
    return bool(_container_state(pod).get("terminated"))


def _cannot_start(pod: Pod) -> tuple[str, str] | None:
    """(reason, message) of a container the kubelet cannot start; None otherwise."""
    for init in (True, False):
        waiting = _container_state(pod, init=init).get("waiting") or {}
        if waiting.get("reason") in CANNOT_START:
            where = "the checkout container: " if init else ""
            return str(waiting["reason"]), where + str(waiting.get("message") or "")
    if _finished(pod) and not _container_started(pod):
        return _terminated_reason(pod)
    return None


def _pending_reason(pod: Pod) -> str:
    for condition in _status(pod).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            return f"not scheduled: {condition.get('reason')}: {condition.get('message')}"
    return "its container did not start in time"


def _terminated_reason(pod: Pod) -> tuple[str, str]:
    """The pod's own reason for ending: the pod's (Evicted, DeadlineExceeded), the container's."""
    status = _status(pod)
    if status.get("reason"):
        return str(status["reason"]), str(status.get("message") or "")
    terminated = _container_state(pod).get("terminated")
    if terminated:
        reason = str(terminated.get("reason") or "Error")
        detail = f"exit code {terminated.get('exitCode')}"
        if terminated.get("message"):
            detail += f": {terminated['message']}"
        return reason, detail
    checkout = _container_state(pod, init=True).get("terminated")
    if checkout and checkout.get("exitCode"):
        detail = f"the checkout container: exit code {checkout.get('exitCode')}"
        if checkout.get("message"):
            detail += f": {checkout['message']}"
        return str(checkout.get("reason") or "Error"), detail
    return "Unknown", ""


def _read_log(response: BaseHTTPResponse, on_progress: ProgressCallback) -> Outcome | None:
    """Report the log's progress lines as they come; the last outcome line's outcome."""
    outcome: Outcome | None = None
    try:
        for line in _lines(response):
            report = parse_line(line)
            if isinstance(report, Progress):
                _report(on_progress, report)
            elif isinstance(report, Outcome):
                outcome = report
    except Exception as err:  # noqa: BLE001 - a broken stream: the caller looks at the pod
        log.debug("The run pod's log stream ended", error=type(err).__name__)
    return outcome


def _lines(response: BaseHTTPResponse) -> Iterator[str]:
    """The lines of a streamed log; a line longer than ``MAX_LINE`` is dropped."""
    buffer = b""
    overlong = False
    for chunk in response.stream(65536, decode_content=True):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if not overlong:
                yield line.decode("utf-8", "replace")
            overlong = False
        if len(buffer) > MAX_LINE:
            buffer, overlong = b"", True
    if buffer and not overlong:
        yield buffer.decode("utf-8", "replace")


def _report(on_progress: Callable[[Progress], None], progress: Progress) -> None:
    try:
        on_progress(progress)
    except Exception:
        log.exception("Progress callback failed")


def _api_text(err: ApiException) -> str:
    """The status and the API server's own message (a quota, Pod Security, a missing SA)."""
    text = f"{err.status} {err.reason}"
    try:
        message = json.loads(err.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{text}: {message}" if message else text


def _now() -> datetime:
    return datetime.now(UTC)


def _failed(operation: str, started: datetime, message: str) -> Outcome:
    return _outcome(operation, started, ErrorKind.RUNNER_FAILED, message)


def _stopped(operation: str, started: datetime, stop: threading.Event) -> Outcome:
    """The outcome of a run stopped before its pod started: detached or interrupted."""
    if stop_cause(stop) == "shutdown":
        return _detached(operation, started)
    return _outcome(operation, started, ErrorKind.INTERRUPTED, "stopped before its pod started")


def _detached(operation: str, started: datetime) -> Outcome:
    return _outcome(operation, started, ErrorKind.DETACHED, "left running: the operator stops")


def _outcome(operation: str, started: datetime, error: ErrorKind, message: str) -> Outcome:
    return failed_outcome(operation, error, message, started)
