"""Statuses for the witness tests, made by the real functions of ``status.conditions``.

``stack`` wraps a status into a Stack object as the API returns it; ``START``, ``DONE`` and
the builders below give the statuses of each situation of the Conditions table
(``docs/status.md``), from which the tests break one thing at a time.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from status import conditions as c
from status.conditions import Reason
from testbed.kstatus import KStatus
from tests.status.argo_health import HealthStatus

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
NAMESPACE, FINALIZER = "team", "finalizer.stack.pulumi.com"
PULUMI_REQUEST, FLUX_REQUEST = (
    "pulumi.com/reconciliation-request",
    "reconcile.fluxcd.io/requestedAt",
)
T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1, T2, T3 = (T0 + datetime.timedelta(minutes=m) for m in (1, 2, 3))
IN_PROGRESS, FAILED = KStatus.IN_PROGRESS, KStatus.FAILED
CURRENT, TERMINATING = KStatus.CURRENT, KStatus.TERMINATING
HEALTHY, PROGRESSING, DEGRADED = (
    HealthStatus.HEALTHY,
    HealthStatus.PROGRESSING,
    HealthStatus.DEGRADED,
)

Status = dict[str, Any]


def stack(
    status: Mapping[str, Any] | None = None,
    *,
    generation: int = 1,
    rv: str = "1",
    deleting: bool = False,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    uid: str = "uid-1",
) -> dict[str, Any]:
    """A Stack as the API returns it; ``status=None`` leaves the field out."""
    metadata: dict[str, Any] = {
        "name": "web",
        "namespace": NAMESPACE,
        "uid": uid,
        "generation": generation,
        "resourceVersion": rv,
        "finalizers": [FINALIZER],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T13:00:00Z"
    if annotations:
        metadata["annotations"] = dict(annotations)
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": metadata,
        "spec": dict(spec or {"stack": "dev", "branch": "main"}),
    }
    if status is not None:
        obj["status"] = dict(status)
    return obj


def running(status: Status, generation: int = 1) -> Status:
    """A status of a run in flight, as the reconciler writes it (currentUpdate set)."""
    return {**status, "currentUpdate": {"generation": generation, "type": "up"}}


def concluded(status: Status, generation: int = 1, state: str = "succeeded") -> Status:
    """An outcome write: currentUpdate and progress dropped, lastUpdate recorded."""
    new = {k: v for k, v in status.items() if k not in {"currentUpdate", "progress"}}
    new["lastUpdate"] = {"generation": generation, "state": state, "type": "up"}
    return new


def edit(status: Status, type_: str, /, **fields: Any) -> Status:
    """``status`` with the fields of condition ``type_`` replaced (a hand-made change)."""
    conditions = [{**x, **fields} if x["type"] == type_ else x for x in status["conditions"]]
    return {**status, "conditions": conditions}


def strip(status: Status, type_: str, field: str) -> Status:
    """``status`` with ``field`` removed from condition ``type_``."""
    conditions = [
        {k: v for k, v in x.items() if k != field} if x["type"] == type_ else x
        for x in status["conditions"]
    ]
    return {**status, "conditions": conditions}


def without(status: Status, type_: str) -> Status:
    """``status`` without condition ``type_``."""
    return {**status, "conditions": [x for x in status["conditions"] if x["type"] != type_]}


def condition(type_: str, value: str, reason: str, message: str = "m") -> dict[str, Any]:
    """A well-formed condition for generation 1."""
    return {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
        "lastTransitionTime": "2026-01-01T12:01:00Z",
    }


START = running(c.progressing({}, 1, "Running pulumi up at commit 0123abc (generation 1)", T0))
DONE = concluded(c.succeeded(START, 1, "pulumi up succeeded (create 1) at commit 0123abc", T1))
RETRY_MESSAGE = "Attempt 1 failed; retrying at 2026-01-01T12:01:10Z"


def retrying(reason: Reason, error: str, retry: str = RETRY_MESSAGE) -> Status:
    """The outcome of a failed attempt that will be retried."""
    return concluded(c.retrying(START, 1, reason, error, retry, T1), state="failed")


def stalled(reason: Reason, message: str) -> Status:
    """The outcome of an attempt that cannot succeed without a change."""
    return concluded(c.stalled(START, 1, reason, message, T1), state="failed")


def waiting(reason: Reason, message: str, ready: str = "False") -> Status:
    """Blocked on a prerequisite or a lock."""
    return c.waiting(START, 1, reason, message, T1, ready=ready)


STALL_REASONS = (
    Reason.INVALID_SPEC,
    Reason.SECRET_NOT_FOUND,
    Reason.CONFIG_MAP_NOT_FOUND,
    Reason.AUTHENTICATION_FAILED,
    Reason.ARTIFACT_DIGEST_MISMATCH,
    Reason.ARTIFACT_UNSAFE,
    Reason.SOURCE_UNAVAILABLE,
    Reason.PROGRAM_INVALID,
    Reason.STACK_NOT_FOUND,
    Reason.RETRIES_EXHAUSTED,
)
DESTROYING = f'Destroying the stack\'s resources before removing finalizer "{FINALIZER}"'
BLOCKED = f'destroy failed: boom. The finalizer "{FINALIZER}" stays until the stack is destroyed'


CRD_DEFAULT: Status = {"observedGeneration": 0}  # what the CRD gives a new Stack's status
SPEC2 = {"stack": "dev", "branch": "next"}
