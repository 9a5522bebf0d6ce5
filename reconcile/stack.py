"""The Stack reconciler: keeps each Stack's Pulumi stack up to date with its source.

``StackReconciler.reconcile(key, stop)`` reads like Flux's guard list:

1. not found → forget it; being deleted → ``reconcile.finalize`` (destroy when
   ``destroyOnFinalize``, then drop the finalizer; a failed destroy keeps it and says why);
2. no finalizer → acknowledge the generation in the status, then add the finalizer;
3. parse the spec (invalid → Stalled ``InvalidSpec``, no retry until the spec changes),
   and with runs in pods check it against the operator's tenancy rules (the same), with
   local runs against what the local runner can do (init containers: the same);
   suspended → report and stop;
4. prerequisites not ready → ``DependencyNotReady``, poll;
5. resolve the commit (``git ls-remote`` for a tracked branch) and ``decide`` whether a run
   is due — when not, write nothing and requeue for the next poll, unless the Stack shows
   a verdict about its inputs that its last run did not earn (``reconcile.earned``);
6. with runs in pods, check the ServiceAccount may run Stacks (refused → Stalled
   ``InvalidSpec``, looked at again every poll: an admin's label mends it);
7. resolve the run's Secrets and ConfigMap keys; then, with nothing due, the Stack returns
   to the status its last run earned (every input is there again: the verdict has ended);
   with a run due, ``reconcile.run`` carries it out: report it started, check out the
   source, run Pulumi with live progress, conclude.

Every situation ends in a verdict (``reconcile.verdict``: conditions, Event, requeue),
which ``reconcile.effects`` executes: this module classifies nothing itself. Every
collaborator is injected (``reconcile.collaborators.Collaborators``), the clock included.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from controller.cache import ObjectKey
from controller.reconciler import Result
from controller.tracing import tracing
from reconcile import earned, prerequisites, source_verdicts, tenancy
from reconcile import verdict as verdicts
from reconcile.accounts import refused_account
from reconcile.acknowledge import acknowledgment
from reconcile.collaborators import Collaborators
from reconcile.context import Pass, Plan, Settings
from reconcile.decide import Decision, Observed, decide
from reconcile.effects import Effects
from reconcile.finalize import Finalizer, has_finalizer
from reconcile.prepare import Preparer
from reconcile.refs import MissingConfigMapError, MissingSecretError
from reconcile.resource import FINALIZER, GROUP, KIND, PLURAL, VERSION
from reconcile.run import STACK_ATTRIBUTE, Runs
from reconcile.sources import ProgramInvalidError, SourceNotReadyError
from reconcile.spec import (
    SpecError,
    StackSpec,
    check_environments_for_backend,
    check_stack_for_backend,
    parse_spec,
)
from status import conditions as cond
from status.conditions import Reason
from workspace.source import SourceError

__all__ = [
    "FINALIZER",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "Collaborators",
    "Settings",
    "StackReconciler",
]


class StackReconciler:
    """Reconciles ``pulumi.com/v1`` Stacks; see the module docstring."""

    def __init__(self, parts: Collaborators, settings: Settings) -> None:
        """Wire the collaborators; nothing runs until ``reconcile``."""
        self._parts, self._settings = parts, settings
        self._effects = Effects(parts.writer, parts.events, parts.clock)
        self._preparer = Preparer(parts.source, settings, parts.objects)
        self._runs = Runs(parts, settings, self._effects, self._preparer)
        self._finalizer = Finalizer(parts, settings, self._effects, self._preparer)

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Bring one Stack up to date (see the module docstring); timed by result, traced."""
        clock = self._parts.clock
        started, result = clock.now(), "error"
        where = {"k8s.namespace.name": key.namespace, STACK_ATTRIBUTE: key.name}
        with tracing().span("reconcile", where) as span:
            try:
                outcome = self._reconcile(key, stop)
                result = "requeue_after" if outcome.requeue_after else "success"
                return outcome
            finally:
                span.set_attribute("pulumi_stack_operator.result", result)
                self._parts.metrics.observe_reconcile(result, clock.now() - started)

    def _reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        obj = self._parts.view.get(key)
        if obj is None:
            self._parts.writer.forget(key)
            self._parts.view.forget(key)
            return Result()
        at = Pass.of(key, obj)
        if obj["metadata"].get("deletionTimestamp"):
            return self._finalizer.finalize(at, stop)
        if not has_finalizer(at):
            at = self._adopt(at)
        try:
            spec = parse_spec(at.obj.get("spec") or {}, key.namespace)
        except SpecError as err:
            return self._effects.execute(at, verdicts.invalid_spec(str(err)))
        backend = self._settings.backend(key, spec)
        problem = check_stack_for_backend(spec.stack, backend)
        problem = problem or check_environments_for_backend(spec.environments, backend)
        if problem is None and self._settings.runner_traits.in_pods:
            problem = tenancy.refusal(spec, self._settings.tenancy)
        elif problem is None:
            problem = tenancy.local_refusal(spec)
        if problem is not None:
            return self._effects.execute(at, verdicts.invalid_spec(problem))
        if spec.suspend:
            return self._effects.execute(at, verdicts.suspended())
        return self._sync(at, spec, stop)

    def _adopt(self, at: Pass) -> Pass:
        """A new Stack: acknowledge its generation, then add the finalizer.

        The status comes first, so that no version of a new Stack reads as Current; the
        same pass then goes on with the newest object (the status writer re-reads it when
        our finalizer patch made its copy stale).
        """
        mutation = acknowledgment(at.generation, self._parts.clock.wall())
        if self._parts.writer.update(at.key, mutation):
            at = Pass.of(at.key, self._parts.view.get(at.key) or at.obj)
        self._finalizer.add(at)
        return at

    def _sync(self, at: Pass, spec: StackSpec, stop: threading.Event) -> Result:
        policy, now = self._settings.policy, self._parts.clock.wall()
        blocker = prerequisites.unready(self._parts.view, at.key, spec, now)
        if blocker:
            return self._effects.execute(at, verdicts.dependency_not_ready(blocker, policy))
        secrets = self._parts.secrets(at.key.namespace)
        # Everything a run needs from the API is resolved before it is reported started:
        # a missing Secret stalls the Stack once, instead of flapping with each write.
        try:
            credentials = self._preparer.credentials(spec, secrets)
            revision = self._preparer.revision(at.key, spec, credentials)
            observed = Observed(at.generation, at.status, at.requests, revision.commit, now)
            decision = decide(spec, observed, policy)
            back = None if decision.due else earned.returned(at.status, spec, policy)
            if not decision.due and back is None:
                return self._not_due(at, decision)
            # A due run, or a verdict about the run's inputs still shown: it ends only
            # once every input a run would need is there (status contract rule 29).
            refused = refused_account(self._parts.accounts, self._settings, at.key.namespace, spec)
            if refused is not None:
                return self._effects.execute(at, verdicts.account_refused(refused, policy))
            inputs = self._preparer.inputs(at.key, spec, secrets)
        except (MissingSecretError, SourceError, SourceNotReadyError, ProgramInvalidError) as err:
            return self._unavailable(at, err)
        if back is not None:  # nothing due: the status the last run earned stands again
            verdict = dataclasses.replace(back, requeue_after=decision.requeue_after)
            return self._effects.execute(at, verdict)
        plan = Plan(spec, observed, decision, inputs, credentials, revision)
        return self._runs.run(at, plan, stop)

    def _not_due(self, at: Pass, decision: Decision) -> Result:
        """Nothing to run, and the Stack shows what its last run earned: write nothing."""
        if decision.exhausted:  # a lastUpdate from before the run's verdict was recorded
            return self._effects.execute(at, verdicts.exhausted(at.status, decision.requeue_after))
        return Result(requeue_after=decision.requeue_after)

    def _unavailable(self, at: Pass, err: Exception) -> Result:
        """What the Stack says when an input of its run is not there (see each case)."""
        if isinstance(err, MissingSecretError):
            return self._secret_missing(at, err)
        if isinstance(err, SourceError):
            return self._source_failed(at, err)
        if isinstance(err, SourceNotReadyError):
            verdict = source_verdicts.source_not_ready(str(err), self._settings.policy)
            return self._effects.execute(at, verdict)
        return self._effects.execute(at, verdicts.invalid_spec(str(err)))

    def _secret_missing(self, at: Pass, err: MissingSecretError) -> Result:
        now, policy = self._parts.clock.wall(), self._settings.policy
        reason = Reason.SECRET_NOT_FOUND
        if isinstance(err, MissingConfigMapError):
            reason = Reason.CONFIG_MAP_NOT_FOUND
        verdict = verdicts.secret_not_found(str(err), at.status, now, policy, reason)
        return self._effects.execute(at, verdict, now=now)

    def _source_failed(self, at: Pass, err: SourceError) -> Result:
        if err.transient:
            quiet = _ready_for(at.status, at.generation)
            return self._effects.execute(
                at, source_verdicts.source_unreachable(str(err), say_so=not quiet)
            )
        verdict = source_verdicts.source_refused(err.reason, str(err), self._settings.policy)
        return self._effects.execute(at, verdict)


def _ready_for(status: Mapping[str, Any], generation: int) -> bool:
    """Whether ``status`` says ``generation`` is applied (Ready=True)."""
    ready = cond.get_condition(status, cond.READY) or {}
    return ready.get("status") == "True" and status.get("observedGeneration") == generation
