"""The status fields a run writes besides its conditions: pure mutations.

- ``started``: ``status.currentUpdate`` (who runs what, since when) as a run starts;
- ``progress``: the live ``status.progress`` and its Reconciling message;
- ``concluded``: ``lastUpdate``, ``history`` and (after a successful ``up``) ``outputs``;
- ``not_started``: ``lastUpdate`` of a run that could not start;
- ``minimal``: a status without what can make it too large to store.

The conditions themselves come from the run's verdict (``reconcile.verdict``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from reconcile.budget import capped_outputs
from reconcile.context import Mutation
from reconcile.decide import Observed
from reconcile.sources import short_revision
from reconcile.verdict import Conditions, Shape, summary
from status import conditions as cond
from workspace.runner import ErrorKind, Outcome, Progress

HISTORY_LIMIT = 10


def started(observed: Observed, operation: str, identity: str, now: datetime.datetime) -> Mutation:
    """Record the run starting now in ``currentUpdate`` (``identity``: this operator)."""
    current: dict[str, Any] = {
        "generation": observed.generation,
        "commit": observed.commit,
        "type": operation,
        "startTime": cond.now_rfc3339(now),
    }
    if identity:
        current["operator"] = identity
    if observed.requests.label:
        current["reconcileRequest"] = observed.requests.label

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "currentUpdate": current}

    return apply


def traced(mutation: Mutation, field: str, trace_id: str | None) -> Mutation:
    """``mutation``, then ``status.<field>.traceId`` set to ``trace_id`` (when there is one)."""
    if trace_id is None:
        return mutation

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        new = mutation(status)
        new[field] = {**new.get(field, {}), "traceId": trace_id}
        return new

    return apply


def progress(
    progress: Progress, operation: str, generation: int, now: datetime.datetime
) -> Mutation:
    """Show the engine's ``progress``: ``status.progress`` and Reconciling's message.

    The ``install`` step (dependencies and plugins, before the engine runs) says what is
    being installed and for how long: ``installing dependencies (npm ci), 12s``.
    """
    fields: dict[str, Any] = {
        "step": progress.step,
        "resourcesDone": progress.resources_done,
        "resourcesTotal": progress.resources_total,
        "resourcesFailed": progress.resources_failed,
        "current": progress.current or "",
        "updatedAt": cond.now_rfc3339(now),
    }
    if progress.step == "install":
        elapsed = (now - progress.started).total_seconds() if progress.started else 0.0
        message = f"Running pulumi {operation}: {progress.current}, {max(0, round(elapsed))}s"
        if progress.started is not None:
            fields["startedAt"] = cond.now_rfc3339(progress.started)
    else:
        message = (
            f"Running pulumi {operation}: {progress.step}, "
            f"{progress.resources_done}/{progress.resources_total} resources done"
            + (f", {progress.resources_failed} failed" if progress.resources_failed else "")
        )

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        new = cond.progressing(status, generation, message, now)
        new["progress"] = fields
        return new

    return apply


def concluded(
    observed: Observed,
    outcome: Outcome,
    failures: int,
    now: datetime.datetime,
    earned: Conditions | None,
) -> Mutation:
    """Record a finished run (``outcome`` as recorded, ending ``now``) in the status.

    ``earned``: the conditions the run's verdict writes (``verdict_fields`` says what of
    them ``lastUpdate`` keeps). ``projectInfo`` is the project the run read (kept when the
    run did not get that far).
    """
    last = {**last_update(observed, outcome, failures, now), **verdict_fields(earned)}
    project = outcome.project

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        new = dict(status)
        new["lastUpdate"] = last
        new["history"] = history(status, outcome, observed)
        if outcome.succeeded and outcome.operation == "up":
            new["outputs"] = capped_outputs(outcome.outputs)
        if project is not None:
            new["projectInfo"] = {"name": project.name, "runtime": project.runtime}
        return new

    return apply


def last_update(
    observed: Observed, outcome: Outcome, failures: int, now: datetime.datetime
) -> dict[str, Any]:
    """``status.lastUpdate`` after ``outcome``; the last successful commit is kept."""
    previous = observed.status.get("lastUpdate") or {}
    last: dict[str, Any] = {
        "state": "succeeded" if outcome.succeeded else "failed",
        "type": outcome.operation,
        "generation": observed.generation,
        "lastAttemptedCommit": observed.commit,
        "shortCommit": short_revision(observed.commit),
        "lastResyncTime": cond.now_rfc3339(now),
        "message": outcome.message if not outcome.succeeded else summary(outcome),
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


def not_started(  # noqa: PLR0913 - each argument is a separate fact
    observed: Observed,
    operation: str,
    message: str,
    failures: int,
    now: datetime.datetime,
    earned: Conditions | None,
) -> Mutation:
    """Record an announced run that could not start as a failed attempt in ``lastUpdate``.

    So no run is announced again with every write: the next one waits for what the
    failure's verdict says (a change, or the failures' backoff). ``earned`` as for
    ``concluded``.
    """
    previous = observed.status.get("lastUpdate") or {}
    last = {
        # An interrupted run that now cannot start is no longer interrupted: carried over,
        # the mark would make every pass run again at once (no backoff, no cap).
        # Neither are what the previous run earned: this attempt's verdict says its own.
        **{f: v for f, v in previous.items() if f not in {"interrupted", "reason", "stalled"}},
        "state": "failed",
        "type": operation,
        "generation": observed.generation,
        "lastAttemptedCommit": observed.commit,
        "shortCommit": short_revision(observed.commit),
        "lastResyncTime": cond.now_rfc3339(now),
        "message": message,
        "failures": failures,
        **verdict_fields(earned),
    }

    def apply(status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "lastUpdate": last}

    return apply


def verdict_fields(earned: Conditions | None) -> dict[str, Any]:
    """What ``lastUpdate`` keeps of the conditions a run earned: ``reason`` and ``stalled``.

    With them, a Stack whose run's status a later verdict about its inputs replaced (its
    source not ready, a Secret missing…) returns to exactly that status once the inputs
    are mended (``reconcile.earned``), and ``decide`` knows whether the run stalled it.
    """
    if earned is None:
        return {}
    return {"reason": str(earned.reason), "stalled": earned.shape is Shape.STALLED}


def history(status: Mapping[str, Any], outcome: Outcome, observed: Observed) -> list[Any]:
    """``status.history`` with ``outcome`` first, at most ``HISTORY_LIMIT`` entries."""
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


def minimal(status: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` without what can make it large: outputs, history, progress.

    It keeps the conditions, ``lastUpdate`` (whose message says what was omitted) and
    the handled requests, so a run is concluded even when its full status cannot be stored.
    """
    new = dict(status)
    dropped = [field for field in ("outputs", "history") if new.pop(field, None)]
    new.pop("progress", None)
    last = dict(new.get("lastUpdate") or {})
    note = f"{', '.join(dropped) or 'nothing'} omitted: the status was too large to store"
    last["message"] = f"{last.get('message', '')} ({note})".strip()
    new["lastUpdate"] = last
    return new
