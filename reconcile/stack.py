"""The Stack reconciler: keeps each Stack's Pulumi stack up to date with its source.

``StackReconciler.reconcile(key, stop)`` reads like Flux's guard list:

1. not in the cache → forget it; being deleted → ``_finalize`` (destroy when
   ``destroyOnFinalize``, then drop the finalizer; a failed destroy keeps it and says why);
2. no finalizer → add it;
3. parse the spec (invalid → Stalled ``InvalidSpec``, no retry until the spec changes);
   suspended → report and stop;
4. prerequisites not ready → ``DependencyNotReady``, poll;
5. resolve the commit (``git ls-remote`` for a tracked branch) and ``decide`` whether a run
   is due — when not, write nothing and requeue for the next poll;
6. report ``Progressing`` (one write), resolve Secrets, check out the source, run Pulumi
   (refresh?, up or preview) with live progress, and report the outcome: outputs,
   ``lastUpdate``, history, conditions, events.

It never writes ``/status`` itself: every status change is a pure function from
``status.conditions`` handed to the ``StatusWriter``. Errors are classified here, in one
place (``_report_outcome`` and the ``except`` clauses of ``_run``), into: success
(requeue for the next poll), retry later (its own backoff, stored in status so that it
survives restarts and is not reset by resyncs), wait (lock or prerequisite: poll), and
stalled (no retry until the Stack, its source or a referenced Secret changes).
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from kubernetes import client

from controller.cache import ObjectKey, Store
from controller.reconciler import Result, TransientError
from controller.retry import with_retries
from reconcile import backend as backends
from reconcile import decide as decisions
from reconcile.acknowledge import acknowledgment
from reconcile.automation import ErrorKind, Outcome, Progress, Runner, UpdateRequest
from reconcile.budget import capped_outputs
from reconcile.deadline import RunStop
from reconcile.refs import MissingSecretError, SecretReader
from reconcile.source import (
    GitCredentials,
    ProgramDirError,
    SourceError,
    SourceFailure,
    checkout,
    program_dir,
    resolve_revision,
)
from reconcile.spec import SpecError, StackSpec, check_stack_for_backend, parse_spec
from status import conditions as cond
from status.conditions import Reason
from status.events import NORMAL, WARNING, EventRecorder
from status.metrics import StackMetrics
from status.writer import StatusTooLargeError, StatusWriter

log = structlog.get_logger(__name__)

GROUP, VERSION, PLURAL, KIND = "pulumi.com", "v1", "stacks", "Stack"
FINALIZER = "finalizer.stack.pulumi.com"
HISTORY_LIMIT = 10
UPDATE_STARTED, DESTROYED = "UpdateStarted", "Destroyed"  # Event reasons, not condition ones
EVENTS: Mapping[str, str] = {
    UPDATE_STARTED: NORMAL,
    Reason.SUCCEEDED: NORMAL,
    DESTROYED: NORMAL,
    Reason.UPDATE_CONFLICT: NORMAL,
    Reason.DEPENDENCY_NOT_READY: NORMAL,
    **dict.fromkeys(
        (
            Reason.UPDATE_FAILED,
            Reason.PREVIEW_FAILED,
            Reason.REFRESH_DRIFT,
            Reason.INTERRUPTED,
            Reason.UPDATE_TIMED_OUT,
            Reason.INVALID_SPEC,
            Reason.SECRET_NOT_FOUND,
            Reason.SOURCE_UNAVAILABLE,
            Reason.AUTHENTICATION_FAILED,
            Reason.PROGRAM_INVALID,
            Reason.STACK_NOT_FOUND,
            Reason.RETRIES_EXHAUSTED,
            Reason.DELETION_BLOCKED,
        ),
        WARNING,
    ),
}
"""Every Event reason the reconciler posts, with its type: Warning exactly for failures."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Operator-wide settings of the reconciler."""

    work_root: Path  # per-Stack source checkouts live under <work_root>/<namespace>/<name>
    default_backend: str | None = None  # root of the per-namespace backends (reconcile.backend)
    run_timeout: float = 7200.0  # seconds a run may take, unless spec.timeoutSeconds says
    policy: decisions.Policy = dataclasses.field(default_factory=decisions.Policy)
    wait_poll: float = 30.0  # seconds between checks for a Secret, prerequisite or lock
    identity: str = ""  # this operator instance (host_pid), recorded in status.currentUpdate
    # True when leader election guarantees that no other instance of this operator runs
    # updates: an update another instance started and never concluded is then dead, once
    # ``takeover_delay`` seconds have passed since we took the Lease (``leading_since``,
    # monotonic) — the time a deposed leader may still spend interrupting its CLI.
    sole_runner: bool = False
    takeover_delay: float = 0.0
    leading_since: Callable[[], float | None] = lambda: None


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class StackReconciler:
    """Reconciles ``pulumi.com/v1`` Stacks; see the module docstring."""

    def __init__(  # noqa: PLR0913 - the reconciler's collaborators, each injected
        self,
        api_client: client.ApiClient,
        store: Store,
        runner: Runner,
        writer: StatusWriter,
        events: EventRecorder,
        settings: Settings,
        metrics: StackMetrics,
        *,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        """Wire the collaborators; nothing runs until ``reconcile``."""
        self._metrics = metrics
        self._api_client = api_client
        self._objects = client.CustomObjectsApi(api_client)
        self._store = store
        self._runner = runner
        self._writer = writer
        self._events = events
        self._settings = settings
        self._clock = clock

    # -- entry point ------------------------------------------------------------------

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Bring one Stack up to date (see the module docstring); timed by result."""
        started, result = time.monotonic(), "error"
        try:
            outcome = self._reconcile(key, stop)
            result = "requeue_after" if outcome.requeue_after else "success"
            return outcome
        finally:
            self._metrics.observe_reconcile(result, time.monotonic() - started)

    def _reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        obj = self._writer.current(key)
        if obj is None:
            self._writer.forget(key)
            return Result()
        if obj["metadata"].get("deletionTimestamp"):
            return self._finalize(key, obj, stop)
        generation = int(obj["metadata"].get("generation") or 0)
        if FINALIZER not in (obj["metadata"].get("finalizers") or ()):
            # The status comes first, so that no version of a new Stack reads as Current;
            # then the finalizer, and the same pass goes on. The writer re-reads the
            # object when our finalizer patch made its copy stale.
            if self._writer.update(key, acknowledgment(generation, self._clock())):
                obj = self._writer.current(key) or obj
            self._add_finalizer(key, obj)
        try:
            spec = parse_spec(obj.get("spec") or {}, key.namespace)
        except SpecError as err:
            self._stall(key, obj, generation, Reason.INVALID_SPEC, str(err))
            return Result()
        problem = check_stack_for_backend(spec.stack, self._backend(key, spec))
        if problem is not None:
            self._stall(key, obj, generation, Reason.INVALID_SPEC, problem)
            return Result()
        if spec.suspend:
            message = "Suspended: no Pulumi runs while spec.suspend is true"
            self._writer.update(
                key,
                lambda s: cond.waiting(
                    s, generation, Reason.SUSPENDED, message, self._clock(), ready="Unknown"
                ),
            )
            return Result()
        return self._sync(key, obj, spec, generation, stop)

    # -- the normal path --------------------------------------------------------------

    def _sync(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        spec: StackSpec,
        generation: int,
        stop: threading.Event,
    ) -> Result:
        blocker = self._unready_prerequisite(key, spec)
        if blocker:
            self._wait(key, obj, generation, Reason.DEPENDENCY_NOT_READY, blocker)
            return Result(requeue_after=self._settings.wait_poll)
        secrets = SecretReader(self._api_client, key.namespace)
        try:
            credentials = self._credentials(spec, secrets)
            commit = self._resolve_commit(spec, credentials)
        except MissingSecretError as err:
            self._stall(key, obj, generation, Reason.SECRET_NOT_FOUND, str(err))
            return Result(requeue_after=self._secret_poll(key))
        except SourceError as err:
            return self._source_failed(key, obj, generation, err)
        status = obj.get("status") or {}
        requests = decisions.Requests.of(obj)
        observed = decisions.Observed(generation, status, requests, commit, self._clock())
        decision = decisions.decide(spec, observed, self._settings.policy)
        if decision.exhausted:
            self._exhausted(key, obj, generation, status)
        if not decision.due:
            return Result(requeue_after=decision.requeue_after)
        # Everything a run needs from the API is resolved before it is reported started:
        # a missing Secret stalls the Stack once, instead of flapping with each write.
        try:
            inputs = self._inputs(key, spec, secrets)
        except MissingSecretError as err:
            self._stall(key, obj, generation, Reason.SECRET_NOT_FOUND, str(err))
            return Result(requeue_after=self._secret_poll(key))
        run = _Run(spec, observed, decision, inputs, credentials)
        return self._run(key, obj, run, stop)

    def _run(
        self, key: ObjectKey, obj: Mapping[str, Any], run: _Run, stop: threading.Event
    ) -> Result:
        spec, observed = run.spec, run.observed
        operation = "preview" if spec.preview else "up"
        log.info("Run due", why=run.decision.why, operation=operation, commit=observed.commit)
        orphaned = self._orphaned(observed.status)
        if orphaned and (wait := self._takeover_wait()) > 0:
            log.info("A deposed leader may still be stopping this update; waiting", seconds=wait)
            return Result(requeue_after=wait)
        started = self._clock()
        self._report_start(key, obj, observed, operation, started)
        try:
            request = self._request(key, run)
        except SourceError as err:
            if err.transient:
                return self._source_failed(key, obj, observed.generation, err, running=True)
            return self._stall_run(key, obj, run, _source_reason(err), str(err))
        except ProgramDirError as err:
            return self._stall_run(key, obj, run, Reason.INVALID_SPEC, str(err))
        progress = _ProgressReporter(self._writer, key, observed.generation, operation)
        timeout = float(spec.timeout_seconds or self._settings.run_timeout)
        with RunStop(stop, timeout) as run_stop:
            try:
                outcome = self._operate(
                    self._runner.run, request, progress, run_stop.event, orphaned=orphaned
                )
            finally:
                progress.close()
        if run_stop.timed_out:
            outcome = _timed_out(outcome, timeout)
        return self._report_outcome(key, obj, run, outcome)

    def _operate(
        self,
        operation: Callable[..., Outcome],
        request: UpdateRequest,
        on_progress: Callable[[Progress], None],
        stop: threading.Event,
        *,
        orphaned: bool = False,
    ) -> Outcome:
        """Run ``operation``; once more after releasing a dead update's lock; record metrics.

        ``orphaned``: the Stack's last update was started by another instance of this
        operator, which is gone (see ``_orphaned``).
        """
        outcome = operation(request, on_progress=on_progress, stop=stop)
        conflict = outcome.error is ErrorKind.CONFLICT
        if conflict and self._release_dead_lock(request, orphaned=orphaned):
            outcome = operation(request, on_progress=on_progress, stop=stop)
        self._metrics.observe_update(
            outcome.operation,
            _update_result(outcome),
            (outcome.ended - outcome.started).total_seconds(),
            outcome.resource_changes,
        )
        return outcome

    def _orphaned(self, status: Mapping[str, Any]) -> bool:
        """Whether the update in ``status`` was left by another, now gone, operator instance.

        Only with leader election (``sole_runner``): a leader that cannot renew its Lease
        interrupts its updates (and kills them after the interrupt grace), so once
        ``takeover_delay`` has passed since we took the Lease, an update recorded by
        another instance and never concluded is dead (a pod replaced after a crash, an OOM
        kill or a node loss; or a deposed leader that has stopped it).
        """
        runner = (status.get("currentUpdate") or {}).get("operator")
        return bool(self._settings.sole_runner and runner and runner != self._settings.identity)

    def _takeover_wait(self) -> float:
        """Seconds until a deposed leader's updates have surely stopped (0 if they have)."""
        since = self._settings.leading_since()
        held = 0.0 if since is None else time.monotonic() - since
        return max(0.0, round(self._settings.takeover_delay - held, 3))

    def _release_dead_lock(self, request: UpdateRequest, *, orphaned: bool) -> bool:
        """Release the stack's lock if a dead update of this operator holds it."""
        if self._runner.clear_stale_lock(request):
            log.warning("Cleared a stale lock left by a dead update of this operator")
            return True
        if orphaned and self._runner.cancel(request):
            log.warning("Cancelled the update a gone instance of this operator left locked")
            return True
        return False

    def _backend(self, key: ObjectKey, spec: StackSpec) -> str | None:
        """The Stack's backend: its own, else the operator's default scoped to its namespace."""
        if spec.backend:
            return spec.backend
        default = self._settings.default_backend
        return backends.namespaced(default, key.namespace) if default else None

    def _inputs(self, key: ObjectKey, spec: StackSpec, secrets: SecretReader) -> _Inputs:
        """Resolve the Secrets a run needs (``MissingSecretError`` when one is missing)."""
        env = secrets.resolve_all(spec.env_refs)
        backend = self._backend(key, spec)
        if backend:
            env["PULUMI_BACKEND_URL"] = backend
        return _Inputs(env, secrets.resolve_all(spec.secrets_ref), backend)

    def _request(self, key: ObjectKey, run: _Run) -> UpdateRequest:
        """Check the source out and build the runner's request.

        Raises:
            SourceError: the checkout failed.
            ProgramDirError: ``spec.repoDir`` is missing or leaves the checkout.
        """
        spec, observed = run.spec, run.observed
        stack_dir = self._settings.work_root / key.namespace / key.name
        source = stack_dir / "source"
        source.parent.mkdir(parents=True, exist_ok=True)
        checkout(
            str(spec.project_repo), source, commit=observed.commit, credentials=run.credentials
        )
        local = backends.local_directory(run.inputs.backend or "")
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        message = (
            f"pulumi-stack-operator: {key} generation {observed.generation} "
            f"commit {observed.commit[:12]}"
        )
        return UpdateRequest(
            work_dir=program_dir(source, spec.repo_dir),
            stack=spec.stack,
            env=run.inputs.env,
            config=dict(spec.config),
            secret_config=run.inputs.secret_config,
            secrets_provider=spec.secrets_provider,
            refresh=spec.refresh,
            expect_no_refresh_changes=spec.expect_no_refresh_changes,
            preview=spec.preview,
            targets=spec.targets,
            use_local_stack_only=spec.use_local_stack_only,
            message=message,
            pulumi_home=stack_dir / "home",
        )

    # -- outcomes -------------------------------------------------------------------

    def _report_outcome(
        self, key: ObjectKey, obj: Mapping[str, Any], run: _Run, outcome: Outcome
    ) -> Result:
        spec, observed, decision = run.spec, run.observed, run.decision
        generation, ended = observed.generation, self._clock()
        previous = (observed.status.get("lastUpdate") or {}).get("failures") or 0
        failures = 0 if outcome.succeeded else (1 if decision.fresh else int(previous) + 1)
        if outcome.error is ErrorKind.CONFLICT:
            failures = 0 if decision.fresh else int(previous)
        last = self._last_update(observed, outcome, failures, ended)

        def apply(status: Mapping[str, Any]) -> dict[str, Any]:
            new = dict(status)
            new.pop("currentUpdate", None)
            new.pop("progress", None)
            new["lastUpdate"] = last
            new["history"] = _history(status, outcome, observed)
            if outcome.succeeded and outcome.operation == "up":
                new["outputs"] = capped_outputs(outcome.outputs)
            observed.requests.mark_handled(new)
            return self._conditions_for(new, spec, generation, outcome, failures, ended)

        before = cond.get_condition(observed.status, cond.READY)
        self._conclude(key, apply)
        self._post_outcome(obj, before, outcome, failures)
        return self._next(spec, outcome, failures)

    def _conclude(
        self, key: ObjectKey, apply: Callable[[Mapping[str, Any]], dict[str, Any]]
    ) -> None:
        """Write a run's conclusion; if the apiserver refuses it as too large, a minimal one.

        The minimal conclusion keeps the conditions, ``lastUpdate`` and the handled
        requests, and drops outputs and history (a note in ``lastUpdate.message`` says
        so): the run is concluded either way, so it is never repeated because of its size.
        """
        try:
            self._writer.update(key, apply)
        except StatusTooLargeError:
            log.warning("The status was too large for the apiserver; writing a minimal one")
            self._writer.update(key, lambda status: _minimal(apply(status)))

    def _conditions_for(  # noqa: PLR0913 - the facts a condition is computed from
        self,
        status: dict[str, Any],
        spec: StackSpec,
        generation: int,
        outcome: Outcome,
        failures: int,
        now: datetime.datetime,
    ) -> dict[str, Any]:
        if outcome.succeeded:
            return cond.succeeded(status, generation, _success_message(outcome, status), now)
        if outcome.error is ErrorKind.INTERRUPTED:
            message = "Interrupted by an operator shutdown; it resumes when the operator restarts"
            return cond.retrying(status, generation, Reason.INTERRUPTED, message, message, now)
        if outcome.error is ErrorKind.CONFLICT:
            message = f"Waiting for another update to finish: {outcome.message}"
            return cond.waiting(status, generation, Reason.UPDATE_CONFLICT, message, now)
        stalled = _STALLING.get(outcome.error)
        if stalled is not None:
            return cond.stalled(status, generation, stalled, outcome.message, now)
        reason = _failure_reason(outcome)
        if failures >= self._settings.policy.max_update_failures:
            message = (
                f"{outcome.operation} failed {failures} times in a row; not retrying until the "
                f"Stack, its source or a reconcile request changes. Last error: {outcome.message}"
            )
            return cond.stalled(status, generation, Reason.RETRIES_EXHAUSTED, message, now)
        delay = decisions.backoff(failures, spec, self._settings.policy)
        at = cond.now_rfc3339(now + datetime.timedelta(seconds=delay))
        retry = f"Attempt {failures} failed; retrying at {at}"
        return cond.retrying(status, generation, reason, outcome.message, retry, now)

    def _next(self, spec: StackSpec, outcome: Outcome, failures: int) -> Result:
        if outcome.succeeded:
            if spec.continue_resync_on_commit_match or spec.tracks_branch:
                return Result(requeue_after=float(spec.resync_frequency_seconds))
            return Result()
        if outcome.error is ErrorKind.INTERRUPTED:
            return Result()  # shutting down; the next start resumes
        if outcome.error is ErrorKind.CONFLICT:
            return Result(requeue_after=self._settings.wait_poll)
        if outcome.error in _STALLING or failures >= self._settings.policy.max_update_failures:
            return Result(
                requeue_after=float(spec.resync_frequency_seconds) if spec.tracks_branch else None
            )
        return Result(requeue_after=decisions.backoff(failures, spec, self._settings.policy))

    def _last_update(
        self,
        observed: decisions.Observed,
        outcome: Outcome,
        failures: int,
        ended: datetime.datetime,
    ) -> dict[str, Any]:
        previous = observed.status.get("lastUpdate") or {}
        last: dict[str, Any] = {
            "state": "succeeded" if outcome.succeeded else "failed",
            "type": outcome.operation,
            "generation": observed.generation,
            "lastAttemptedCommit": observed.commit,
            "shortCommit": observed.commit[:7],
            "lastResyncTime": cond.now_rfc3339(ended),
            "message": outcome.message if not outcome.succeeded else _summary(outcome),
            "failures": failures,
        }
        successful = observed.commit if outcome.succeeded else previous.get("lastSuccessfulCommit")
        if successful:
            last["lastSuccessfulCommit"] = successful
        if outcome.permalink:
            last["permalink"] = outcome.permalink
        if observed.requests.label:
            last["reconcileRequest"] = observed.requests.label
        if outcome.error is ErrorKind.INTERRUPTED:
            last["interrupted"] = True
        return last

    # -- status helpers ---------------------------------------------------------------

    def _report_start(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        observed: decisions.Observed,
        operation: str,
        started: datetime.datetime,
    ) -> None:
        message = (
            f"Running pulumi {operation} at commit {observed.commit[:7]} "
            f"(generation {observed.generation})"
        )
        current = {
            "generation": observed.generation,
            "commit": observed.commit,
            "type": operation,
            "startTime": cond.now_rfc3339(started),
        }
        if self._settings.identity:
            current["operator"] = self._settings.identity
        if observed.requests.label:
            current["reconcileRequest"] = observed.requests.label

        def apply(status: Mapping[str, Any]) -> dict[str, Any]:
            new = cond.progressing(status, observed.generation, message, started)
            new["currentUpdate"] = current
            return new

        self._writer.update(key, apply)
        self._event(obj, UPDATE_STARTED, message)

    def _stall(  # noqa: PLR0913 - the stall's facts
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        generation: int,
        reason: Reason,
        message: str,
        *,
        clear: bool = False,
        also: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """Write Stalled (``clear``: also end the run in flight; ``also``: more fields)."""
        before = cond.get_condition(obj.get("status") or {}, cond.STALLED)

        requests = decisions.Requests.of(obj)

        def apply(status: Mapping[str, Any]) -> dict[str, Any]:
            new = cond.stalled(status, generation, reason, message, self._clock())
            requests.mark_handled(new)  # a final state: the request is handled (G17)
            if clear:
                new.pop("currentUpdate", None)
                new.pop("progress", None)
            return also(new) if also is not None else new

        if self._writer.update(key, apply) and (before is None or before.get("reason") != reason):
            self._event(obj, reason, message)

    def _wait(
        self, key: ObjectKey, obj: Mapping[str, Any], generation: int, reason: Reason, message: str
    ) -> None:
        before = cond.get_condition(obj.get("status") or {}, cond.READY)
        self._writer.update(
            key, lambda s: cond.waiting(s, generation, reason, message, self._clock())
        )
        if before is None or before.get("reason") != reason:
            self._event(obj, reason, message)

    def _exhausted(
        self, key: ObjectKey, obj: Mapping[str, Any], generation: int, status: Mapping[str, Any]
    ) -> None:
        stalled = cond.get_condition(status, cond.STALLED)
        if stalled is None:  # e.g. the cap was lowered: report what the status implies
            last = status.get("lastUpdate") or {}
            message = (
                "Retries exhausted; not retrying until a change. "
                f"Last error: {last.get('message', '')}"
            )
            self._stall(key, obj, generation, Reason.RETRIES_EXHAUSTED, message)

    def _source_failed(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        generation: int,
        err: SourceError,
        *,
        running: bool = False,
    ) -> Result:
        """Report a source failure; ``running``: a run was announced and must be concluded."""
        if err.transient:
            if running or not _ready_for(obj, generation):
                # Say why nothing runs (never leave "Running pulumi up" behind, either); a
                # Stack Ready for its generation keeps that status: what is deployed did
                # not change because a poll of its branch failed.
                retry = "The source is unreachable; retrying with backoff"

                def apply(status: Mapping[str, Any]) -> dict[str, Any]:
                    new = cond.retrying(
                        status,
                        generation,
                        Reason.SOURCE_UNAVAILABLE,
                        str(err),
                        retry,
                        self._clock(),
                    )
                    new.pop("currentUpdate", None)
                    new.pop("progress", None)
                    return new

                self._writer.update(key, apply)
            msg = f"source unavailable: {err}"
            raise TransientError(msg) from err
        self._stall(key, obj, generation, _source_reason(err), str(err))
        return Result(requeue_after=self._settings.wait_poll)

    def _stall_run(
        self, key: ObjectKey, obj: Mapping[str, Any], run: _Run, reason: Reason, message: str
    ) -> Result:
        """Conclude an announced run that could not start: Stalled, and recorded as failed.

        ``lastUpdate`` records the attempt (generation, commit, failures), so no run is
        announced again with every write: an ``InvalidSpec`` waits for a change of the
        Stack, its commit or a reconcile request (``decide.NEEDS_A_CHANGE``); a source
        that cannot be fetched is retried with the failures' backoff, up to the cap.
        """
        observed, now = run.observed, self._clock()
        previous = observed.status.get("lastUpdate") or {}
        failures = 1 if run.decision.fresh else int(previous.get("failures") or 0) + 1
        last = {
            **previous,
            "state": "failed",
            "type": "preview" if run.spec.preview else "up",
            "generation": observed.generation,
            "lastAttemptedCommit": observed.commit,
            "shortCommit": observed.commit[:7],
            "lastResyncTime": cond.now_rfc3339(now),
            "message": message,
            "failures": failures,
        }

        def record(status: Mapping[str, Any]) -> dict[str, Any]:
            new = dict(status)
            new["lastUpdate"] = last
            return new

        self._stall(key, obj, observed.generation, reason, message, clear=True, also=record)
        return Result()

    def _post_outcome(
        self,
        obj: Mapping[str, Any],
        before: Mapping[str, Any] | None,
        outcome: Outcome,
        failures: int,
    ) -> None:
        if outcome.succeeded:
            self._event(obj, Reason.SUCCEEDED, _summary(outcome))
            return
        if outcome.error is ErrorKind.CONFLICT:
            if before is None or before.get("reason") != Reason.UPDATE_CONFLICT:
                self._event(obj, Reason.UPDATE_CONFLICT, outcome.message)
            return
        if outcome.error is ErrorKind.INTERRUPTED:
            self._event(obj, Reason.INTERRUPTED, "Update interrupted by shutdown")
            return
        reason = _STALLING.get(outcome.error) or _failure_reason(outcome)
        if failures >= self._settings.policy.max_update_failures:
            reason = Reason.RETRIES_EXHAUSTED
        self._event(obj, reason, outcome.message)

    def _event(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """Post an Event; its type follows from the reason (``EVENTS``)."""
        self._events.post(obj, EVENTS[reason], str(reason), message)

    # -- sources, secrets, prerequisites ----------------------------------------------

    def _credentials(self, spec: StackSpec, secrets: SecretReader) -> GitCredentials | None:
        auth = spec.git_auth
        if auth is None:
            return None

        def value(ref: Any) -> str | None:  # noqa: ANN401 - ResourceRef | None
            return secrets.resolve(ref) if ref is not None else None

        return GitCredentials(
            token=value(auth.access_token),
            username=value(auth.username),
            password=value(auth.password),
            ssh_private_key=value(auth.ssh_private_key),
            ssh_passphrase=value(auth.ssh_password),
        )

    def _resolve_commit(self, spec: StackSpec, credentials: GitCredentials | None) -> str:
        if spec.commit:
            return spec.commit
        return resolve_revision(str(spec.project_repo), str(spec.branch), credentials)

    def _secret_poll(self, key: ObjectKey) -> float:
        """Seconds until the next look for a missing Secret.

        Secrets are not watched (a watch needs list on every Secret of the namespace, the
        power to read them all); instead the look is repeated soon after the Stack stalls
        and then less often: as long as it has been stalled, from 1 s to ``wait_poll``.
        """
        obj = self._writer.current(key) or {}
        stalled = cond.get_condition(obj.get("status") or {}, cond.STALLED) or {}
        since = decisions.parse_time(stalled.get("lastTransitionTime"))
        elapsed = (self._clock() - since).total_seconds() if since else 0.0
        return min(self._settings.wait_poll, max(1.0, elapsed))

    def _unready_prerequisite(self, key: ObjectKey, spec: StackSpec) -> str | None:
        for prerequisite in spec.prerequisites:
            other = self._store.get(ObjectKey(key.namespace, prerequisite.name))
            if other is None:
                return f'Prerequisite Stack "{prerequisite.name}" does not exist'
            status = other.get("status") or {}
            ready = cond.get_condition(status, cond.READY)
            generation = (other.get("metadata") or {}).get("generation")
            if (
                ready is None
                or ready.get("status") != "True"
                or status.get("observedGeneration") != generation
            ):
                return f'Prerequisite Stack "{prerequisite.name}" is not Ready'
            if prerequisite.succeeded_within is not None:
                ended = decisions.parse_time((status.get("lastUpdate") or {}).get("lastResyncTime"))
                age = (self._clock() - ended).total_seconds() if ended else float("inf")
                if age > prerequisite.succeeded_within:
                    return (
                        f'Prerequisite Stack "{prerequisite.name}" last succeeded {age:.0f}s '
                        f"ago, more than {prerequisite.succeeded_within:.0f}s"
                    )
        return None

    # -- finalizer and deletion -------------------------------------------------------

    def _add_finalizer(self, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        finalizers = [*(obj["metadata"].get("finalizers") or ()), FINALIZER]
        self._patch_metadata(key, obj, {"finalizers": finalizers})

    def _remove_finalizer(self, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        finalizers = [f for f in obj["metadata"].get("finalizers") or () if f != FINALIZER]
        self._patch_metadata(key, obj, {"finalizers": finalizers})

    def _patch_metadata(
        self, key: ObjectKey, obj: Mapping[str, Any], fields: dict[str, Any]
    ) -> None:
        body = {"metadata": {**fields, "resourceVersion": obj["metadata"]["resourceVersion"]}}
        try:
            with_retries(
                self._objects.patch_namespaced_custom_object,
                GROUP, VERSION, key.namespace, PLURAL, key.name, body,
            )  # fmt: skip
        except client.ApiException as err:
            if err.status == 409:  # changed meanwhile: the watch brings the new version
                raise TransientError("the Stack changed while its finalizer was updated") from err
            if err.status != 404:
                raise

    def _finalize(self, key: ObjectKey, obj: Mapping[str, Any], stop: threading.Event) -> Result:
        if FINALIZER not in (obj["metadata"].get("finalizers") or ()):
            return Result()
        generation = int(obj["metadata"].get("generation") or 0)
        try:
            spec = parse_spec(obj.get("spec") or {}, key.namespace)
        except SpecError:
            spec = None  # nothing can have been deployed from an invalid spec by us
        if spec is not None and spec.destroy_on_finalize and not spec.preview:
            blocked = self._destroy(key, obj, spec, generation, stop)
            if blocked is not None:
                return blocked
        self._remove_finalizer(key, obj)
        shutil.rmtree(self._settings.work_root / key.namespace / key.name, ignore_errors=True)
        return Result()

    def _destroy(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        spec: StackSpec,
        generation: int,
        stop: threading.Event,
    ) -> Result | None:
        message = f'Destroying the stack\'s resources before removing finalizer "{FINALIZER}"'
        self._writer.update(
            key, lambda s: cond.deleting(s, generation, Reason.DESTROYING, message, self._clock())
        )
        secrets = SecretReader(self._api_client, key.namespace)
        try:
            credentials = self._credentials(spec, secrets)
            commit = self._resolve_commit(spec, credentials)
            observed = decisions.Observed(
                generation, obj.get("status") or {}, decisions.Requests(), commit, self._clock()
            )
            inputs = self._inputs(key, spec, secrets)
            run = _Run(spec, observed, decisions.Decision(why="delete"), inputs, credentials)
            request = self._request(key, run)
        except (MissingSecretError, SourceError, ProgramDirError) as err:
            return self._deletion_blocked(key, obj, generation, f"cannot prepare destroy: {err}")
        timeout = float(spec.timeout_seconds or self._settings.run_timeout)
        with RunStop(stop, timeout) as run_stop:
            outcome = self._operate(self._runner.destroy, request, lambda _p: None, run_stop.event)
        if run_stop.timed_out:
            outcome = _timed_out(outcome, timeout)
        if not outcome.succeeded:
            return self._deletion_blocked(
                key, obj, generation, f"destroy failed: {outcome.message}"
            )
        self._event(obj, DESTROYED, _summary(outcome))
        return None

    def _deletion_blocked(
        self, key: ObjectKey, obj: Mapping[str, Any], generation: int, why: str
    ) -> Result:
        message = (
            f'{why}. The finalizer "{FINALIZER}" stays until the stack is destroyed; to '
            "abandon its resources instead, set spec.destroyOnFinalize to false or remove "
            "the finalizer"
        )
        self._writer.update(
            key,
            lambda s: cond.deleting(
                s, generation, Reason.DELETION_BLOCKED, message, self._clock(), ready="False"
            ),
        )
        self._event(obj, Reason.DELETION_BLOCKED, message)
        raise TransientError(why)


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What a run reads from the API before it is reported started (may hold secrets)."""

    env: dict[str, str] = dataclasses.field(repr=False)
    secret_config: dict[str, str] = dataclasses.field(repr=False)
    backend: str | None


@dataclasses.dataclass(frozen=True)
class _Run:
    """One due run's facts, from the decision to the outcome."""

    spec: StackSpec
    observed: decisions.Observed
    decision: decisions.Decision
    inputs: _Inputs
    credentials: GitCredentials | None


@dataclasses.dataclass(frozen=True)
class _TimedOut(Outcome):
    """An operation interrupted because it ran past its deadline."""


def _timed_out(outcome: Outcome, timeout: float) -> Outcome:
    """``outcome`` of a run stopped at its deadline, as a failure saying so."""
    if outcome.succeeded:  # it finished just as the deadline passed
        return outcome
    fields = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}
    fields.update(
        error=ErrorKind.UPDATE_FAILED,
        message=(
            f"pulumi {outcome.operation} ran longer than its deadline of {timeout:.0f}s "
            "(spec.timeoutSeconds, else the operator's --run-timeout) and was interrupted"
        ),
    )
    return _TimedOut(**fields)


def _minimal(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` without what can make it large: outputs, history, progress."""
    status = dict(status)
    dropped = [field for field in ("outputs", "history") if status.pop(field, None)]
    status.pop("progress", None)
    last = dict(status.get("lastUpdate") or {})
    note = f"{', '.join(dropped) or 'nothing'} omitted: the status was too large to store"
    last["message"] = f"{last.get('message', '')} ({note})".strip()
    status["lastUpdate"] = last
    return status


def _ready_for(obj: Mapping[str, Any], generation: int) -> bool:
    """Whether the Stack's status says its ``generation`` is applied (Ready=True)."""
    status = obj.get("status") or {}
    ready = cond.get_condition(status, cond.READY) or {}
    return ready.get("status") == "True" and status.get("observedGeneration") == generation


_STALLING = {
    ErrorKind.STACK_NOT_FOUND: Reason.STACK_NOT_FOUND,
    ErrorKind.PROGRAM_INVALID: Reason.PROGRAM_INVALID,
}


def _source_reason(err: SourceError) -> Reason:
    if err.reason is SourceFailure.AUTHENTICATION_FAILED:
        return Reason.AUTHENTICATION_FAILED
    return Reason.SOURCE_UNAVAILABLE


def _update_result(outcome: Outcome) -> str:
    if outcome.succeeded:
        return "succeeded"
    if outcome.error is ErrorKind.INTERRUPTED:
        return "interrupted"
    if outcome.error is ErrorKind.CONFLICT:
        return "conflict"
    return "failed"


def _failure_reason(outcome: Outcome) -> Reason:
    if isinstance(outcome, _TimedOut):
        return Reason.UPDATE_TIMED_OUT
    if outcome.error is ErrorKind.REFRESH_CHANGES:
        return Reason.REFRESH_DRIFT
    if outcome.operation == "preview":
        return Reason.PREVIEW_FAILED
    return Reason.UPDATE_FAILED


def _summary(outcome: Outcome) -> str:
    changes = ", ".join(f"{op} {n}" for op, n in sorted(outcome.resource_changes.items()) if n)
    return f"pulumi {outcome.operation} succeeded ({changes or 'no changes'})"


def _success_message(outcome: Outcome, status: Mapping[str, Any]) -> str:
    commit = (status.get("lastUpdate") or {}).get("shortCommit", "")
    return f"{_summary(outcome)} at commit {commit}"


def _history(
    status: Mapping[str, Any], outcome: Outcome, observed: decisions.Observed
) -> list[Any]:
    entry = {
        "type": outcome.operation,
        "result": "succeeded" if outcome.succeeded else str(outcome.error),
        "generation": observed.generation,
        "commit": observed.commit,
        "startTime": cond.now_rfc3339(outcome.started),
        "durationSeconds": round((outcome.ended - outcome.started).total_seconds(), 3),
        "resourceChanges": dict(outcome.resource_changes),
    }
    return [entry, *list(status.get("history") or ())][:HISTORY_LIMIT]


class _ProgressReporter:
    """Publishes engine progress to the status writer, which coalesces it per Stack.

    Every engine event becomes an intent; the writer keeps only the newest and writes it
    at most once per its ``min_interval``. After ``close`` (the run is over and its
    conclusion is about to be written) events are ignored.
    """

    def __init__(
        self, writer: StatusWriter, key: ObjectKey, generation: int, operation: str
    ) -> None:
        self._writer, self._key = writer, key
        self._generation, self._operation = generation, operation
        self._closed = False

    def __call__(self, progress: Progress) -> None:
        if self._closed:
            return
        message = (
            f"Running pulumi {self._operation}: {progress.step}, "
            f"{progress.resources_done}/{progress.resources_total} resources done"
            + (f", {progress.resources_failed} failed" if progress.resources_failed else "")
        )
        fields = {
            "step": progress.step,
            "resourcesDone": progress.resources_done,
            "resourcesTotal": progress.resources_total,
            "resourcesFailed": progress.resources_failed,
            "current": progress.current or "",
            "updatedAt": cond.now_rfc3339(_now()),
        }
        generation = self._generation

        def apply(status: Mapping[str, Any]) -> dict[str, Any]:
            new = cond.progressing(status, generation, message, _now())
            new["progress"] = fields
            return new

        self._writer.publish(self._key, apply)

    def close(self) -> None:
        """Ignore further events and drop the progress not yet written."""
        self._closed = True
        self._writer.discard(self._key)
