"""Following one run pod to its outcome: its states from a watch, its reports from its log.

``PodRun.follow`` waits on the pod's changes (``podapi.PodChanges``), never on a timer: a
container that cannot start fails at once with the kubelet's reason, a pod still not
started ``start_timeout`` seconds (on the injected ``Clock``) after following began fails
``NotStarted``, and once the container runs its log is read to the agent's outcome line.

Guarantees:

* One outcome per ``follow``: the agent's (checked to be of the operation run), or
  ``RUNNER_FAILED`` with the pod's own reason when it ends or vanishes without one, or
  ``INTERRUPTED`` when the operator deleted it; ``Detached`` when the operator stops.
* A stop with cause ``shutdown`` detaches (the pod goes on); any other stop deletes the pod
  with its grace period, once, and the follow goes on to read what the agent reports.
* The pod is deleted once concluded, unless the run is ``keep`` (an earlier run's pod,
  which its caller deletes) or the job's ``reclaim`` is ``Retain``: a pod that has
  finished (or reported its outcome and is ending) is then kept, annotated as concluded
  (``podspec.ANNOTATION_CONCLUDED``) so that no later follow takes its outcome again; one
  that never started, or that the operator interrupted, is deleted all the same. A pod
  that cannot be annotated (the API refused) is deleted.
* The path to the pod failing for a while loses nothing and starts nothing: a log that
  cannot be opened or read because the API server or the kubelet is away (restarting,
  ``podnode.unreachable``) is opened again ``LOG_RETRY`` seconds later, from its start,
  for as long as the pod runs; ``follow`` does not raise for it.
* A pod whose node is lost is concluded: once the node controller has marked it not
  Ready for its node for longer than the pod's termination grace period
  (``podnode.node_lost``), the run fails ``NodeNotReady`` naming the node and since when,
  and the pod is deleted (it goes once the node is back, or is force-deleted). Its
  outcome is unknown, and it may still be going on there: concluding it proves nothing
  about its program. Its agent stops it once it learns its pod is gone
  (``pulumi_stack_operator.fence``), and the agent of the Stack's next run pod runs
  nothing while the lost run's lock is still renewed (``workspace.runner.lease``).
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime
from typing import Protocol

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from urllib3.response import BaseHTTPResponse

from controller.clock import Clock
from workspace.runner.channel import JobMark, parse_line
from workspace.runner.job import RunJob
from workspace.runner.pod import node as podnode
from workspace.runner.pod import spec as podspec
from workspace.runner.pod import state as podstate
from workspace.runner.pod.api import PodApi, PodChanges, close_stream, lines, unblock
from workspace.runner.pod.idle import IdlePods
from workspace.runner.pod.state import Pod
from workspace.runner.types import (
    Detached,
    ErrorKind,
    Outcome,
    Progress,
    ProgressCallback,
    RunResult,
    failed_outcome,
    stop_cause,
)

log = structlog.get_logger(__name__)

STOP_CHECK = 0.2  # seconds between looks at the stop event while nothing else happens
LOG_RETRY = 1.0  # seconds before a log that the API server or kubelet did not serve is retried
CATCH_UP = 2.0  # seconds the pod's watch may lag behind a 404 from the API server
END_LOOK = 15.0  # seconds a failed run's pod is watched for its container's end (OOMKilled)
# Failures that are not the program's: no container end to look for.
NOT_PROGRAMS = frozenset({ErrorKind.RUNNER_FAILED, ErrorKind.INTERRUPTED, ErrorKind.CONFLICT})


class PodMetrics(Protocol):
    """What the pod runner records about its pods."""

    def pod_created(self) -> None:
        """One run pod was created."""
        ...

    def pod_reused(self) -> None:
        """One run was handed to a warm run pod instead of a new one."""

    def idle_pods(self, count: int) -> None:
        """``count`` warm run pods are idle now."""

    def pod_failed(self, reason: str) -> None:
        """One run ended without an outcome, for ``reason`` (the pod's own)."""
        ...

    def pod_started(self, seconds: float) -> None:
        """A run pod's container started ``seconds`` after the pod was created."""
        ...

    def spec_to_running(self, seconds: float) -> None:
        """A run pod for a spec change ran ``seconds`` after the change was written."""
        ...


@dataclasses.dataclass(frozen=True)
class Following:
    """What following a run pod needs: the API, the clock, the metrics and two limits."""

    api: PodApi
    clock: Clock
    metrics: PodMetrics
    grace: float  # seconds the agent has to interrupt the CLI once the pod is deleted
    start_timeout: float  # seconds a pod may stay unscheduled or not started
    idle: IdlePods | None = None  # warm pods kept once concluded (None: none are kept)


class PodRun:
    """Following one run pod to its outcome (one per run; not shared)."""

    def __init__(  # noqa: PLR0913 - one run's facts
        self,
        following: Following,
        job: RunJob,
        pod: Pod,
        operation: str,
        started: datetime,
        *,
        keep: bool = False,
        mark: str | None = None,
    ) -> None:
        """Follow ``pod`` of ``job`` running ``operation``; ``keep`` leaves it undeleted.

        ``mark``: the run was handed to a warm pod (``podspec.ANNOTATION_MARK``); only the
        reports after its ``JobMark`` are its own, and the pod's start is not its.
        """
        self._with, self.job, self.operation, self.started = following, job, operation, started
        self.uid, self.name = podstate.uid(pod), podstate.name(pod)
        self.mark = mark
        self.created = podstate.created_at(pod) if mark is None else None
        self.reported = False  # the agent reported an outcome, which the run took
        self.last, self.keep = pod, keep
        self.interrupted = False
        self.started_seen = False
        self.log_retry_at = float("-inf")  # clock time before which the log is not opened
        self.log_failing = False  # the last attempt to read the log failed (logged once)
        self.changes: PodChanges | None = None  # the pod's watch while ``follow`` runs
        self.end: Pod | None = None  # a failed program's pod once its container ended

    def follow(self, on_progress: ProgressCallback, stop: threading.Event) -> RunResult:
        """Follow the pod until it reports an outcome or ends without one."""
        clock = self._with.clock
        with PodChanges(self._with.api, self.job, self.last, clock) as changes:
            self.changes = changes
            start_by = clock.now() + self._with.start_timeout
            seen = changes.version
            while True:
                if stop.is_set():
                    if stop_cause(stop) == "shutdown":
                        return detached(self.operation, self.started)
                    self.interrupt()
                pod = changes.pod
                if pod is None or podstate.uid(pod) != self.uid:
                    return self.ended_without_outcome(gone=True)
                self.last = pod
                done = self._step(pod, on_progress, stop, start_by)
                if done is not None:
                    return done
                # The start timeout bounds the wait only until the container has started.
                wake = clock.now() + STOP_CHECK
                seen = changes.wait(seen, wake if self.started_seen else min(wake, start_by))

    def _step(
        self, pod: Pod, on_progress: ProgressCallback, stop: threading.Event, start_by: float
    ) -> RunResult | None:
        """What the pod's state ``pod`` concludes, or None to wait for its next state."""
        lost = podnode.node_lost(pod, self._with.clock.wall())
        if lost is not None:
            return self.fail(*lost)
        blocked = podstate.cannot_start(pod)
        if blocked is not None:
            return self.fail(*blocked)
        if podstate.container_started(pod):
            self.note_started(pod)
            if self._with.clock.now() < self.log_retry_at:
                return None
            return self.read_reports(on_progress, stop)
        if self._with.clock.now() >= start_by:
            return self.fail("NotStarted", podstate.pending_reason(pod))
        return None

    def read_reports(
        self, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult | None:
        """Read the pod's log to its outcome line; the outcome, or None to look at the pod again."""
        try:
            response = self._with.api.logs(self.job)
        except ApiException as err:
            if err.status in (400, 404):  # not readable (yet, or any more)
                return self._after_log()
            if not podnode.unreachable(err):
                raise
            return self._log_later(err)
        except (HTTPError, OSError) as err:
            return self._log_later(err)
        self.log_failing = False
        left = threading.Event()
        reading = threading.Event()
        watcher = threading.Thread(
            target=self._watch_stop, args=(stop, response, left, reading), daemon=True
        )
        watcher.start()
        try:
            outcome = read_log(response, on_progress, self.mark)
        finally:
            reading.set()
            watcher.join()
            close_stream(response)
        if left.is_set():
            return detached(self.operation, self.started)
        if outcome is not None:
            return self.concluded(outcome, stop)
        return self._after_log()

    def _log_later(self, err: BaseException) -> RunResult | None:
        """The log could not be read for a while (``podnode.unreachable``): None, retry later."""
        say = log.debug if self.log_failing else log.info
        say("The run pod's log cannot be read now; retrying", pod=self.name, error=_error(err))
        self.log_failing = True
        self.log_retry_at = self._with.clock.now() + LOG_RETRY
        return None

    def _after_log(self) -> RunResult | None:
        """The log ended without an outcome: the pod's end, or None if it still runs."""
        try:
            pod = self._with.api.read(self.job)
        except (ApiException, HTTPError, OSError) as err:
            if not podnode.unreachable(err):
                raise
            return self._log_later(err)
        if pod is None or podstate.uid(pod) != self.uid:
            return self.ended_without_outcome(gone=True)
        self.last = pod
        if podstate.finished(pod) or podstate.container_terminated(pod):
            return self.ended_without_outcome(gone=False)
        return None  # the stream broke while the container runs: follow again

    def _watch_stop(
        self,
        stop: threading.Event,
        response: BaseHTTPResponse,
        left: threading.Event,
        reading: threading.Event,
    ) -> None:
        """While the log is read: detach on shutdown, interrupt on any other stop.

        A lost node can leave the stream open and silent: once the pod says its node is
        lost, the read is ended, and the follow loop concludes the run. Waits on the read's
        end, looking at ``stop`` every ``STOP_CHECK``: the reader joins this thread as soon
        as it has the outcome, on every run, and a stop is rare (waiting on ``stop``
        instead held each run's conclusion for up to ``STOP_CHECK``: 0.1 s on average).
        """
        while not reading.wait(STOP_CHECK):
            if not stop.is_set():
                if self._node_lost():
                    unblock(response)
                    return
                continue
            if stop_cause(stop) == "shutdown":
                left.set()
                unblock(response)
                return
            try:
                self.interrupt()
            except Exception:  # noqa: BLE001 - the main loop interrupts again
                log.warning("Could not delete the run pod to interrupt it", pod=self.name)
                unblock(response)
                return
            # Interrupted: keep reading its outcome, but still detach on a shutdown.
            while not reading.wait(STOP_CHECK):
                if stop_cause(stop) == "shutdown":
                    left.set()
                    unblock(response)
                    return
            return

    def interrupt(self) -> None:
        """Delete the pod with its grace period: the agent interrupts the CLI (once)."""
        if not self.interrupted:
            log.info("Interrupting the run pod", pod=self.name)
            self._with.api.delete(self.job, self.uid, grace=self._with.grace)
            self.interrupted = True

    def note_started(self, pod: Pod) -> None:
        """Record the pod's start latency, once."""
        if self.started_seen:
            return
        self.started_seen = True
        at = podstate.container_started_at(pod)
        changed = self.job.changed_at
        if at is not None and changed is not None and self.mark is None:
            self._with.metrics.spec_to_running(max(0.0, (at - changed).total_seconds()))
        if at is not None and self.created is not None:
            self._with.metrics.pod_started(max(0.0, (at - self.created).total_seconds()))

    def concluded(self, outcome: Outcome, stop: threading.Event) -> Outcome:
        """The agent's outcome, checked against this run; the pod is deleted (or kept).

        Before the pod is released: an interruption not asked for reads the pod's reason
        (from the watch's final state when the pod is gone already), and a failed program's
        pod is watched for its container's end (``end``: an ``OOMKilled`` there explains the
        failure).
        """
        unasked = outcome.error is ErrorKind.INTERRUPTED and not self.interrupted
        pod = self._read_or_last() if unasked else None
        if unasked and pod is None and self.changes is not None:
            # Gone already (its container ended, then the API let it go): the watch's final
            # state is the newest, with the eviction's condition if there was one.
            self._last_of(self._caught_up(self.changes))
        if not outcome.succeeded and outcome.error not in NOT_PROGRAMS:
            self.end = self._container_end(stop)
        self.reported = not unasked and outcome.error is not ErrorKind.INTERRUPTED
        self.release(ended=True)
        if outcome.operation != self.operation:
            message = f"the run pod reported a {outcome.operation}, not the {self.operation} it ran"
            return self._failed(message)
        if unasked:
            # SIGTERM the operator did not send (a drain, an eviction, a user): the outcome
            # stays the agent's, told why; the verdict judges an interruption not asked for.
            reason, why = self._why_interrupted(pod)
            self._with.metrics.pod_failed(reason)
            text = f"the run pod {self.job.namespace}/{self.name} failed: {reason}: {why}"
            return dataclasses.replace(outcome, message=f"{text}; {outcome.message}")
        return outcome

    def ended_without_outcome(self, *, gone: bool) -> Outcome:
        """The pod stopped (or vanished) without reporting an outcome.

        A vanished pod is judged on the newest state the watch had of it (its reason, an
        eviction's condition), if newer than the last the run looked at.
        """
        if gone and self.changes is not None:
            self._last_of(self._caught_up(self.changes))
        reason, message = podstate.terminated_reason(self.last)
        if self.interrupted:  # the operator deleted it: the run was interrupted, as asked
            note = f"interrupted by the operator; the run pod {self.name} ended without an outcome"
            ended = self._with.clock.wall()
            return failed_outcome(self.operation, ErrorKind.INTERRUPTED, note, self.started, ended)
        if gone and reason == "Unknown":
            reason, message = "Deleted", DELETED_BY
        return self.fail(reason, message, delete=not gone)

    def fail(self, reason: str, message: str, *, delete: bool = True) -> Outcome:
        """A ``RUNNER_FAILED`` outcome naming the pod's ``reason``; the pod is deleted.

        Or kept, for ``Retain``, when it ran and ended (not one that never started).
        """
        if delete:
            last = self.last
            self.release(ended=podstate.finished(last) or podstate.container_terminated(last))
        if not (self.keep and self.last["metadata"].get("deletionTimestamp")):
            self._with.metrics.pod_failed(reason)  # else counted by the run that deleted it
        text = f"the run pod {self.job.namespace}/{self.name} failed: {reason}"
        log.warning("The run pod ended without an outcome", pod=self.name, reason=reason)
        return self._failed(f"{text}: {message}" if message else text)

    def release(self, *, ended: bool) -> None:
        """Done with the pod: delete it, or keep it (``Retain``) if it ``ended`` on its own.

        A kept pod is annotated as concluded; one that cannot be is deleted. Nothing for a
        ``keep`` run (its caller deletes the pod).
        """
        if self.keep:
            return
        if ended and not self.interrupted and self._kept_warm():
            return
        if ended and not self.interrupted and self.job.reclaim == podspec.RETAIN:
            at = self._with.clock.wall().isoformat()
            try:
                self._with.api.mark_concluded(self.job, self.uid, at)
            except ApiException as err:
                log.warning(
                    "Cannot mark the run pod concluded to retain it; deleting it",
                    pod=self.name,
                    status=err.status,
                )
            else:
                log.info("Keeping the finished run pod (Retain)", pod=self.name)
                return
        self._with.api.delete(self.job, self.uid)

    def _kept_warm(self) -> bool:
        """Keep a warm pod whose agent reported and waits for the next run (``IdlePods``).

        Annotated as concluded first, so that no follow takes its outcome again; one that
        cannot be annotated, or has ended, is not kept.
        """
        idle, last = self._with.idle, self.last
        if idle is None or not self.reported or not podspec.is_warm(last):
            return False
        if podstate.finished(last) or podstate.container_terminated(last):
            return False
        try:
            self._with.api.mark_concluded(self.job, self.uid, self._with.clock.wall().isoformat())
        except ApiException as err:
            log.warning("Cannot mark the warm run pod concluded; deleting it", status=err.status)
            return False
        log.info("Keeping the run pod warm for the Stack's next run", pod=self.name)
        idle.kept(self.job, last)
        return True

    def _container_end(self, stop: threading.Event) -> Pod | None:
        """The pod once its run container ended: at most ``END_LOOK`` s, not past ``stop``."""
        changes, clock = self.changes, self._with.clock
        give_up = clock.now() + END_LOOK
        seen = changes.version if changes is not None else 0
        while changes is not None and not stop.is_set():
            pod = changes.pod
            if pod is None or podstate.uid(pod) != self.uid:
                return None
            if podstate.container_terminated(pod):
                return pod
            if clock.now() >= give_up:
                return None
            seen = changes.wait(seen, min(give_up, clock.now() + STOP_CHECK))
        return None

    def _node_lost(self) -> bool:
        """Whether the newest state of the pod says its node is lost."""
        pod = self.changes.pod if self.changes is not None else None
        return pod is not None and podnode.node_lost(pod, self._with.clock.wall()) is not None

    def _caught_up(self, changes: PodChanges) -> Pod | None:
        """The pod's final state once the watch has seen it go (at most ``CATCH_UP`` s).

        The API server can answer 404 before the watch delivers the deletion, whose state
        is the newest (an eviction's condition).
        """
        clock = self._with.clock
        until, seen = clock.now() + CATCH_UP, changes.version
        while changes.pod is not None and clock.now() < until:
            newer = changes.wait(seen, until)
            if newer == seen:  # the watch ended, or the time is up
                break
            seen = newer
        return changes.final

    def _last_of(self, final: Pod | None) -> None:
        """Keep ``final`` as the last state seen when it is this run's pod's."""
        if final is not None and podstate.uid(final) == self.uid:
            self.last = final

    def _why_interrupted(self, pod: Pod | None) -> tuple[str, str]:
        """Why a pod was stopped: its fresh state's reason, else the last one seen, else Deleted."""
        for seen in (pod, self.last):
            if seen is None:
                continue
            reason, why = podstate.terminated_reason(seen)
            if reason not in ("Unknown", "Error", "Completed"):
                return reason, why
        return "Deleted", DELETED_BY

    def _read_or_last(self) -> Pod | None:
        """The pod read afresh; the last state seen when the API cannot be reached now."""
        try:
            return self._with.api.read(self.job)
        except (ApiException, HTTPError, OSError) as err:
            if not podnode.unreachable(err):
                raise
            return self.last

    def _failed(self, message: str) -> Outcome:
        return failed(self.operation, (self.started, self._with.clock.wall()), message)


DELETED_BY = (
    "the run pod was deleted while the run was in progress (a node drain, an eviction "
    "or a user deleted it); the update was interrupted"
)


def read_log(
    response: BaseHTTPResponse, on_progress: ProgressCallback, mark: str | None = None
) -> Outcome | None:
    """Report the log's progress lines as they come; the outcome, at its line.

    The agent prints its outcome as its last line, then exits: the run concludes at that
    line, not at the stream's end (the container's exit, about a second later), so the
    pod is released while the agent's interpreter winds down. None: the stream ended (or
    broke) before an outcome line, and the caller looks at the pod. With ``mark`` (a run
    handed to a warm pod) the reports before its ``JobMark`` are earlier runs' and skipped.
    """
    waiting = mark is not None
    try:
        for line in lines(response):
            report = parse_line(line)
            if waiting:
                waiting = report != JobMark(str(mark))
            elif isinstance(report, Progress):
                _report(on_progress, report)
            elif isinstance(report, Outcome):
                return report
    except Exception as err:  # noqa: BLE001 - a broken stream: the caller looks at the pod
        log.debug("The run pod's log stream ended", error=type(err).__name__)
    return None


def _error(err: BaseException) -> str:
    """An error's type, and its HTTP status when it has one (never its body)."""
    status = getattr(err, "status", None)
    return f"{type(err).__name__} {status}" if status else type(err).__name__


def _report(on_progress: ProgressCallback, progress: Progress) -> None:
    try:
        on_progress(progress)
    except Exception:
        log.exception("Progress callback failed")


def failed(operation: str, times: tuple[datetime, datetime], message: str) -> Outcome:
    """A ``RUNNER_FAILED`` outcome of ``operation`` that ran for ``times`` (start, end)."""
    return failed_outcome(operation, ErrorKind.RUNNER_FAILED, message, *times)


def detached(operation: str, started: datetime) -> Detached:
    """The run is left going: the operator stops."""
    return Detached(operation, started, "left running: the operator stops")
