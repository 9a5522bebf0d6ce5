"""One due run: report it started, prepare its request, operate, conclude.

``Runs.run(at, plan, stop)``:

1. a Stack whose last update a gone instance of this operator left (``orphaned``) waits
   until a deposed leader has surely stopped it (``takeover_delay`` after we took the Lease),
   then that run is concluded as ``Interrupted`` (an Event, ``lastUpdate``, ``history``)
   before it runs again: the status never passes a dead run off as the new one;
   — unless the runner's runs outlive the operator (its ``outlives_operator``: a run pod)
   and that run still goes on or has ended: then it is attached to and its outcome
   concluded;
2. ``Progressing`` and ``currentUpdate`` in one write, and an ``UpdateStarted`` Event;
3. the checkout and the request: a source that fails, or a ``spec.repoDir`` that is not
   there, concludes the announced run at once (never a "Running pulumi up" left behind);
4. the operation, with live progress (coalesced by the status writer) and its deadline;
5. the verdict on the outcome, written with ``lastUpdate``, ``history`` and ``outputs``.

Traced (``controller.tracing``): a ``run`` span under the reconcile's, with ``checkout``,
``operate`` and ``conclude`` inside; the operation's request carries the ``operate`` span's
context, so that the Pulumi CLI's own spans hang under it. Attributes name the Stack, its
generation, commit and operation, and the verdict's reason: never a message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

import structlog

from controller.cache import ObjectKey
from controller.clock import Clock
from controller.reconciler import Result
from controller.tracing import Attribute, tracing
from reconcile import report, source_verdicts
from reconcile import verdict as verdicts
from reconcile.collaborators import Collaborators, StatusSink
from reconcile.context import Pass, Plan, Settings
from reconcile.effects import Effects
from reconcile.operate import Attempt, Operated, Operator
from reconcile.policy import backoff
from reconcile.prepare import Preparer, RemoteSpecError
from status.conditions import Reason
from workspace.runner import Detached, ErrorKind, Progress, SourceFault
from workspace.source import ProgramDirError, SourceError

log = structlog.get_logger(__name__)

STACK_ATTRIBUTE = "pulumi_stack_operator.stack"  # the Stack's name (a span attribute)


class Runs:
    """Carries out due runs (see the module docstring)."""

    def __init__(
        self, parts: Collaborators, settings: Settings, effects: Effects, preparer: Preparer
    ) -> None:
        """Run through ``parts.runner``; write through ``effects``; prepare with ``preparer``."""
        self._parts, self._settings = parts, settings
        self._effects, self._preparer = effects, preparer
        self._operator = Operator(parts.runner, parts.clock)

    def run(self, at: Pass, plan: Plan, stop: threading.Event) -> Result:
        """Carry out ``plan``'s run for the Stack of ``at`` (see the module docstring)."""
        attributes: dict[str, Attribute] = {
            "k8s.namespace.name": at.key.namespace,
            STACK_ATTRIBUTE: at.key.name,
            "pulumi_stack_operator.generation": at.generation,
            "pulumi_stack_operator.commit": plan.observed.commit,
            "pulumi_stack_operator.operation": plan.operation,
        }
        with tracing().span("run", attributes):
            return self._run(at, plan, stop)

    def _run(self, at: Pass, plan: Plan, stop: threading.Event) -> Result:
        observed = plan.observed
        log.info("Run due", why=plan.decision.why, operation=plan.operation, commit=observed.commit)
        orphaned = self._orphaned(plan)
        if orphaned and (resumed := self._resume_orphaned(at, plan, stop)) is not None:
            return resumed
        started, legs = self._parts.clock.wall(), _Legs(self._parts.clock)
        trace_id = tracing().trace_id()
        start = report.started(observed, plan.operation, self._settings.identity, started)
        start = report.traced(start, "currentUpdate", trace_id)
        note = self._settings.timeout_note(plan.spec)
        verdict = verdicts.run_started(plan.operation, observed.commit, at.generation, note)
        verdict = verdicts.with_trace(verdict, trace_id)
        self._effects.execute(at, verdict, also=start, now=started)
        legs.mark("announce")
        try:
            with tracing().span("checkout"):
                request = self._preparer.request(at, plan)
        except (SourceError, ProgramDirError) as err:
            return self._source_failed(at, plan, SourceFault.of(err), str(err))
        except RemoteSpecError as err:
            return self._not_started(at, plan, Reason.INVALID_SPEC, str(err))
        legs.mark("checkout")
        progress = ProgressReporter(self._parts.writer, self._parts.clock, at, plan.operation)
        try:
            with self._running(at) as deleting, tracing().span("operate"):
                traced = dataclasses.replace(request, trace=tracing().trace_context())
                attempt = Attempt(traced, self._settings.timeout(plan.spec), orphaned=orphaned)
                operated = self._operator.run(attempt, progress, stop, deleting)
        finally:
            progress.close()
        legs.mark("runner")
        if isinstance(operated, Detached):  # the next instance attaches
            return Result()
        with tracing().span("conclude") as span:
            result = self._conclude(at, plan, operated)
            span.set_attribute("pulumi_stack_operator.error", str(operated.outcome.error))
        legs.mark("conclude")
        inside = {f"in_runner_{k}_s": v for k, v in operated.outcome.seconds.items()}
        log.debug("Run timed", operation=plan.operation, **legs.seconds, **inside)
        return result

    def _resume_orphaned(self, at: Pass, plan: Plan, stop: threading.Event) -> Result | None:
        """Wait for a deposed leader, attach to its run, or conclude it; None: run now."""
        if (wait := self._takeover_wait()) > 0:
            log.info("A deposed leader may still be stopping this update; waiting", seconds=wait)
            return Result(requeue_after=wait)
        if (attached := self._attach(at, plan, stop)) is not None:
            return attached
        self._conclude_orphaned(at, plan)
        return None

    def _attach(self, at: Pass, plan: Plan, stop: threading.Event) -> Result | None:
        """Conclude the run a gone instance left, if it still goes on (a run pod).

        None when the runner has no such run: the caller concludes it as interrupted.
        """
        if not self._settings.runner_traits.outlives_operator:
            return None
        try:
            request = self._preparer.request(at, plan)
        except (SourceError, ProgramDirError, RemoteSpecError):
            return None
        attempt = Attempt(request, self._settings.timeout(plan.spec))
        progress = ProgressReporter(self._parts.writer, self._parts.clock, at, plan.operation)
        try:
            with self._running(at) as deleting:
                operated = self._operator.attach(attempt, progress, stop, deleting)
        finally:
            progress.close()
        if operated is None:
            return None
        if isinstance(operated, Detached):
            return Result()
        log.info(
            "Attached to the run a gone operator instance left", error=str(operated.outcome.error)
        )
        return self._conclude(at, plan, operated)

    @contextlib.contextmanager
    def _running(self, at: Pass) -> Iterator[threading.Event]:
        """Register the Stack's run: the event is set when the Stack is (being) deleted.

        Set at once if this process already saw the deletion (before the run registered).
        """
        with self._parts.interrupts.running(at.key) as deleting:
            newest = self._parts.view.get(at.key)
            if newest is None or newest["metadata"].get("deletionTimestamp"):
                deleting.set()
            yield deleting

    def _conclude(self, at: Pass, plan: Plan, operated: Operated) -> Result:
        """Record the outcome and execute its verdict.

        A source the runner could not lay out (``SOURCE_FAILED``: a run pod's checkout) is
        judged as the same failure met before the run (``_source_failed``).
        """
        source = operated.outcome.source
        if operated.outcome.error is ErrorKind.SOURCE_FAILED and source is not None:
            return self._source_failed(at, plan, source, operated.outcome.message)
        now = self._parts.clock.wall()
        facts = verdicts.RunFacts(
            outcome=operated.outcome,
            previous_failures=plan.previous_failures,
            fresh=plan.decision.fresh,
            commit=plan.observed.commit,
            now=now,
            deadline=operated.deadline,
            deleting=operated.deleting,
            stopped=operated.stopped,
        )
        verdict = verdicts.of_run(facts, plan.spec, self._settings.policy)
        observe_update(self._parts, operated, verdict, self._settings.cache_scope(at.key))
        failures = verdict.failures or 0
        outcome = verdicts.recorded(facts)
        fields = report.concluded(plan.observed, outcome, failures, now, verdict.conditions)
        trace_id = tracing().trace_id()
        fields = report.traced(fields, "lastUpdate", trace_id)
        verdict = verdicts.with_trace(verdict, trace_id)
        return self._effects.execute(at, verdict, also=fields, now=now)

    def _conclude_orphaned(self, at: Pass, plan: Plan) -> None:
        """Record the run a gone instance left as interrupted (status, Event, metric)."""
        now = self._parts.clock.wall()
        current = plan.observed.status.get("currentUpdate") or {}
        outcome = verdicts.orphaned_outcome(current, plan.operation, now)
        log.info(
            "Concluding an update a gone operator instance left", operator=current.get("operator")
        )
        verdict = verdicts.orphaned(outcome)
        self._parts.metrics.observe_update(
            outcome.operation, verdict.update_result, (now - outcome.started).total_seconds(), {}
        )
        fields = report.concluded(
            plan.observed, outcome, plan.previous_failures, now, verdict.conditions
        )
        self._effects.execute(at, verdict, also=fields, now=now)

    def _source_failed(self, at: Pass, plan: Plan, fault: SourceFault, message: str) -> Result:
        """The announced run's source could not be laid out, wherever that was tried.

        The one verdict of a source failure, for every runner: a program directory that
        is not there is ``InvalidSpec``; a transient failure ``SourceUnavailable``, retried
        after the failures' backoff; any other stalls with the failure's own reason.
        """
        if fault.failure is None:
            return self._not_started(at, plan, Reason.INVALID_SPEC, message)
        if fault.transient:
            return self._not_started(at, plan, Reason.SOURCE_UNAVAILABLE, message, retry=True)
        return self._not_started(at, plan, source_verdicts.source_reason(fault.failure), message)

    def _not_started(
        self, at: Pass, plan: Plan, reason: Reason, message: str, *, retry: bool = False
    ) -> Result:
        """Conclude an announced run that could not start, recorded as failed.

        Stalled; or with ``retry`` (its source did not answer) retrying after the
        failures' backoff.
        """
        now = self._parts.clock.wall()
        fresh, previous = plan.decision.fresh, plan.previous_failures
        if retry:
            failures = 1 if fresh else previous + 1
            wait = backoff(failures, plan.spec, self._settings.policy)
            verdict = source_verdicts.not_started_retrying(
                message, previous, fresh=fresh, retry_after=wait
            )
        else:
            verdict = verdicts.not_started(reason, message, previous, fresh=fresh)
        failures = verdict.failures or 0
        fields = report.not_started(
            plan.observed, plan.operation, message, failures, now, verdict.conditions
        )
        return self._effects.execute(at, verdict, also=fields, now=now)

    def _orphaned(self, plan: Plan) -> bool:
        """Whether the Stack's update in flight was left by another, now gone, instance.

        With leader election (``sole_runner``): a leader that cannot renew its Lease
        interrupts its updates (and kills them after the interrupt grace), so once
        ``takeover_delay`` has passed since we took the Lease, an update recorded by
        another instance and never concluded is dead (a pod replaced after a crash, an OOM
        kill or a node loss; or a deposed leader that has stopped it).

        With runs that outlive the operator, also without leader election: the run is its
        pod's, not the instance's that created it, so an operator restarted with a new identity asks
        the runner for that run (``_attach``) instead of starting another beside it.
        """
        runner = (plan.observed.status.get("currentUpdate") or {}).get("operator")
        settings = self._settings
        if not runner or runner == settings.identity:
            return False
        return settings.sole_runner or settings.runner_traits.outlives_operator

    def _takeover_wait(self) -> float:
        """Seconds until a deposed leader's updates have surely stopped (0 if they have)."""
        since = self._settings.leading_since()
        held = 0.0 if since is None else self._parts.clock.now() - since
        return max(0.0, round(self._settings.takeover_delay - held, 3))


def observe_update(
    parts: Collaborators, operated: Operated, verdict: verdicts.Verdict, scope: str
) -> None:
    """Record the operation's duration and changes under the verdict's result label.

    Also its dependency and plugin steps, and the bytes of the cache of ``scope`` (the
    namespace whose cache it used; ``""``: the operator's one cache).
    """
    outcome = operated.outcome
    seconds = (outcome.ended - outcome.started).total_seconds()
    parts.metrics.observe_update(
        outcome.operation, verdict.update_result, seconds, outcome.resource_changes
    )
    parts.metrics.observe_installs(outcome.installs, outcome.cache_bytes, scope)


class ProgressReporter:
    """Publishes engine progress to the status writer, which coalesces it per Stack.

    Every engine event becomes a mutation; the writer keeps only the newest and writes it
    at most once per its interval. After ``close`` (the run is over and its conclusion is
    about to be written) events are ignored and the pending one is dropped.
    """

    def __init__(self, writer: StatusSink, clock: Clock, at: Pass, operation: str) -> None:
        """Publish through ``writer`` for the Stack of ``at``, stamped with ``clock.wall()``."""
        self._writer, self._clock = writer, clock
        self._key: ObjectKey = at.key
        self._generation, self._operation = at.generation, operation
        self._closed = False

    def __call__(self, progress: Progress) -> None:
        """Publish ``progress`` (ignored after ``close``)."""
        if self._closed:
            return
        now = self._clock.wall()
        self._writer.publish(
            self._key, report.progress(progress, self._operation, self._generation, now)
        )

    def close(self) -> None:
        """Ignore further events and drop the progress not yet written."""
        self._closed = True
        self._writer.discard(self._key)


class _Legs:
    """The seconds each leg of a run took, on the reconciler's clock (for the debug log).

    ``announce``: writing the run's start; ``checkout``: laying the source out (or building
    a run pod's job); ``runner``: the runner's operation (for a pod: creating it, waiting,
    following it); ``conclude``: writing the outcome and its Events. The runner's own
    split of its leg (``Outcome.seconds``) is logged beside them as ``in_runner_<phase>_s``.
    """

    def __init__(self, clock: Clock) -> None:
        """Start timing now."""
        self._clock = clock
        self._last = clock.now()
        self.seconds: dict[str, float] = {}

    def mark(self, leg: str) -> None:
        """``leg`` ended now."""
        now = self._clock.now()
        self.seconds[f"{leg}_s"] = round(now - self._last, 3)
        self._last = now
