"""The finalizer: added to every Stack, removed once the Stack may go.

A Stack being deleted with ``spec.destroyOnFinalize`` (and not ``preview``) has its
resources destroyed and its stack removed first (``Destroying``); a destroy that cannot be
prepared or fails keeps the finalizer and says why (``DeletionBlocked``), and is tried
again after the failures' backoff, as a failed run is (``lastUpdate`` records the failed
destroy, so no pass in between destroys again), until it succeeds or the user gives up on
it (``destroyOnFinalize: false``, or removing the finalizer). Then the finalizer goes, with
the Stack's work directory.
A spec that does not parse destroys nothing: nothing can have been deployed from it by us.
A Stack whose Flux source or Program is gone is destroyed from the project the last run
recorded (``status.projectInfo``), unless ``runProgram`` asks for the program itself.
"""

from __future__ import annotations

import datetime
import shutil
import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog
import yaml

from controller.clock import parse_time
from controller.reconciler import Result, TransientError
from reconcile import deletion_verdicts, report
from reconcile.accounts import refused_account
from reconcile.collaborators import Collaborators
from reconcile.context import Pass, Plan, Settings
from reconcile.decide import Decision, Observed, Requests
from reconcile.effects import Effects
from reconcile.operate import Attempt, Operator
from reconcile.policy import Policy, backoff
from reconcile.prepare import Preparer, RemoteSpecError
from reconcile.refs import MissingSecretError
from reconcile.resource import FINALIZER
from reconcile.run import observe_update
from reconcile.sources import ProgramInvalidError, Revision, SourceNotReadyError
from reconcile.spec import SpecError, StackSpec, parse_spec
from reconcile.spec.program import program_revision
from reconcile.verdict import concluded
from workspace.runner import Detached, ErrorKind
from workspace.source import GitCredentials, ProgramDirError, SourceError

log = structlog.get_logger(__name__)


class SourceUnusableError(Exception):
    """No source to destroy with: it is gone or invalid, and no project was recorded."""


def minimal_project(info: Any) -> str | None:  # noqa: ANN401 - a status field, any JSON
    """A ``Pulumi.yaml`` naming only the project and runtime of ``status.projectInfo``.

    None when ``info`` does not hold both as non-empty strings.
    """
    if not isinstance(info, Mapping):
        return None
    name, runtime = info.get("name"), info.get("runtime")
    if not (isinstance(name, str) and name and isinstance(runtime, str) and runtime):
        return None
    return yaml.safe_dump({"name": name, "runtime": runtime}, sort_keys=True)


def destroy_failures(status: Mapping[str, Any]) -> int:
    """How many destroys in a row failed, per ``status.lastUpdate`` (0: none recorded)."""
    last = status.get("lastUpdate") or {}
    if last.get("type") != "destroy" or last.get("state") != "failed":
        return 0
    return int(last.get("failures") or 0)


def destroy_wait(
    status: Mapping[str, Any], spec: StackSpec, policy: Policy, now: datetime.datetime
) -> float:
    """Seconds until a failed destroy may be tried again (0: now), as a failed run waits."""
    failures = destroy_failures(status)
    if failures == 0:
        return 0.0
    ended = parse_time((status.get("lastUpdate") or {}).get("lastResyncTime")) or now
    return max(0.0, backoff(failures, spec, policy) - (now - ended).total_seconds())


def has_finalizer(at: Pass) -> bool:
    """Whether the Stack carries this operator's finalizer."""
    return FINALIZER in (at.obj["metadata"].get("finalizers") or ())


class Finalizer:
    """Adds and removes the finalizer; destroys first when the Stack asks for it."""

    def __init__(
        self, parts: Collaborators, settings: Settings, effects: Effects, preparer: Preparer
    ) -> None:
        """Patch through ``parts.patcher``; destroy through ``parts.runner``."""
        self._parts, self._settings = parts, settings
        self._effects, self._preparer = effects, preparer
        self._operator = Operator(parts.runner, parts.clock)

    def add(self, at: Pass) -> None:
        """Add the finalizer (``TransientError`` if the Stack changed meanwhile)."""
        self._set(at, lambda finalizers: [*finalizers, FINALIZER])

    def finalize(self, at: Pass, stop: threading.Event) -> Result:
        """The Stack is being deleted: destroy if asked, then let it go.

        Raises:
            TransientError: the destroy is blocked (``DeletionBlocked``); retry.
        """
        if not has_finalizer(at):
            return Result()
        try:
            spec: StackSpec | None = parse_spec(at.obj.get("spec") or {}, at.key.namespace)
        except SpecError:
            spec = None
        if spec is not None and spec.destroy_on_finalize and not spec.preview:
            blocked = self._destroy(at, spec, stop)
            if blocked is not None:
                return blocked
        self._set(at, lambda finalizers: [f for f in finalizers if f != FINALIZER])
        shutil.rmtree(self._settings.stack_dir(at.key), ignore_errors=True)
        return Result()

    def _destroy(self, at: Pass, spec: StackSpec, stop: threading.Event) -> Result | None:
        """Destroy the stack: None once destroyed, else the blocked pass's result.

        A destroy that failed is tried again only after its backoff (``destroy_wait``).

        Raises:
            TransientError: the operator is stopping while the destroy goes on in its pod.
        """
        now = self._parts.clock.wall()
        if (wait := destroy_wait(at.status, spec, self._settings.policy, now)) > 0:
            return Result(requeue_after=wait)
        self._effects.execute(at, deletion_verdicts.destroying(FINALIZER))
        try:
            plan = self._plan(at, spec)
            request = self._preparer.request(at, plan)
        except (
            MissingSecretError,
            SourceError,
            SourceUnusableError,
            ProgramDirError,
            RemoteSpecError,
        ) as err:
            return self._not_prepared(at, spec, f"cannot prepare destroy: {err}")
        attempt = Attempt(request, self._settings.timeout(spec))
        operated = self._operator.destroy(attempt, stop)
        if isinstance(operated, Detached):  # its pod goes on; so does deletion
            msg = "the operator is stopping; the destroy goes on in its run pod"
            raise TransientError(msg)
        if operated.outcome.error is ErrorKind.SOURCE_FAILED:  # laid out by the runner
            return self._not_prepared(
                at, spec, f"cannot prepare destroy: {operated.outcome.message}"
            )
        retry = self._retry(at, spec)
        verdict = deletion_verdicts.of_destroy(
            operated.outcome, operated.deadline, FINALIZER, retry
        )
        observe_update(self._parts, operated, verdict, self._settings.cache_scope(at.key))
        if verdict.conditions is None:  # destroyed
            self._effects.execute(at, verdict)
            return None
        outcome = concluded(operated.outcome, operated.deadline)
        fields = report.concluded(plan.observed, outcome, retry.failures, retry.now, None)
        return self._effects.execute(at, verdict, also=fields, now=retry.now)

    def _not_prepared(self, at: Pass, spec: StackSpec, why: str) -> Result:
        """A destroy that could not even start: blocked, recorded as a failed attempt."""
        retry = self._retry(at, spec)
        blocked = deletion_verdicts.deletion_blocked(why, FINALIZER, retry)
        last = at.status.get("lastUpdate") or {}
        commit = str(last.get("lastAttemptedCommit") or "")
        observed = Observed(at.generation, at.status, Requests(), commit, retry.now)
        fields = report.not_started(observed, "destroy", why, retry.failures, retry.now, None)
        return self._effects.execute(at, blocked, also=fields, now=retry.now)

    def _retry(self, at: Pass, spec: StackSpec) -> deletion_verdicts.DestroyRetry:
        """The next attempt of a destroy that failed now, after the failures' backoff."""
        failures = destroy_failures(at.status) + 1
        wait = backoff(failures, spec, self._settings.policy)
        return deletion_verdicts.DestroyRetry(failures, wait, self._parts.clock.wall())

    def _plan(self, at: Pass, spec: StackSpec) -> Plan:
        """What the destroy runs: the Stack's source at its current commit, its Secrets."""
        secrets = self._parts.secrets(at.key.namespace)
        credentials = self._preparer.credentials(spec, secrets)
        revision = self._revision(at, spec, credentials)
        refused = refused_account(self._parts.accounts, self._settings, at.key.namespace, spec)
        if refused is not None:
            raise RemoteSpecError(refused)
        now = self._parts.clock.wall()
        observed = Observed(at.generation, at.status, Requests(), revision.commit, now)
        inputs = self._preparer.inputs(at.key, spec, secrets)
        return Plan(spec, observed, Decision(why="delete"), inputs, credentials, revision)

    def _revision(self, at: Pass, spec: StackSpec, credentials: GitCredentials | None) -> Revision:
        """The source to destroy with; without one, the project the last run recorded.

        ``pulumi destroy`` without ``runProgram`` reads only the project's name and runtime,
        so a Stack whose Flux source or Program is gone (often deleted with it) is still
        destroyed from ``status.projectInfo``.
        """
        try:
            return self._preparer.revision(at.key, spec, credentials)
        except (SourceNotReadyError, ProgramInvalidError) as err:
            project = minimal_project(at.status.get("projectInfo"))
            if spec.run_program or project is None:
                raise SourceUnusableError(str(err)) from err
            log.info("Destroying from status.projectInfo: the source is not there", why=str(err))
            return Revision(program_revision(project), project=project)

    def _set(self, at: Pass, change: Callable[[list[str]], list[str]]) -> None:
        """Patch the finalizers of the newest Stack this process knows.

        The newest, not the pass's: our own status writes (``Destroying``) have moved its
        resourceVersion since, and a patch on the old one would only conflict.
        """
        metadata = (self._parts.view.get(at.key) or at.obj)["metadata"]
        finalizers = change(list(metadata.get("finalizers") or ()))
        self._parts.patcher.set_finalizers(at.key, str(metadata["resourceVersion"]), finalizers)
