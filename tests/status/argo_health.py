"""Argo CD's built-in ``pulumi.com/Stack`` health check, encoded in Python as documented.

Role: say what Argo CD shows for a Stack (Healthy / Progressing / Degraded), so tests can
check that every status the operator writes reads as intended there too. A port, written
for this project, of the public Argo CD health check
``resource_customizations/pulumi.com/Stack/health.lua`` in ``argoproj/argo-cd`` (added by
PR #28534, merged in July 2026; releases cut after that merge carry it, older ones need the
``argocd-cm`` snippet of pulumi-kubernetes-operator PR #1263).

No Lua text is available from a package here, so the rules are encoded from the health
check's published description, in the Lua's order:

1. ``metadata.deletionTimestamp`` set: Progressing, "Pending deletion; blocked by
   finalizers: …".
2. no ``status``, or ``status.observedGeneration ~= metadata.generation``: Progressing,
   "Waiting for the operator to observe the latest spec change". Unlike kstatus, a missing
   observedGeneration is Progressing forever.
3. ``status.conditions`` in list order: Stalled=True is Degraded, Reconciling=True is
   Progressing, Ready=True is Healthy, each with the condition's message. Order-dependent
   like kstatus: Ready=True listed before Reconciling=True is Healthy.
4. otherwise Progressing, "Waiting for the stack to be reconciled": Ready=False without
   Stalled is never Degraded.

Guarantees: a pure function that never modifies its input. Values compare the way Lua 5.1
(gopher-lua, which Argo CD embeds) compares them: numbers numerically, otherwise only equal
values of the same type (``true ~= 1``, ``"1" ~= 1``); ``ipairs`` stops at the first null
condition; a non-table condition has no fields. Only the Stalled message is stated by the
published description; the punctuation of the synthesized messages may differ from the
Lua's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import Any

PENDING_DELETION = "Pending deletion"
WAITING_FOR_OBSERVATION = "Waiting for the operator to observe the latest spec change"
WAITING_FOR_RECONCILE = "Waiting for the stack to be reconciled"


class HealthStatus(enum.StrEnum):
    """Argo CD's health statuses (``health.HealthStatusCode``); the Stack check uses three."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    MISSING = "Missing"
    UNKNOWN = "Unknown"


@dataclasses.dataclass(frozen=True, slots=True)
class Health:
    """What the Lua returns: ``hs.status`` and ``hs.message``."""

    status: HealthStatus
    message: str


_BY_CONDITION = {
    "Stalled": HealthStatus.DEGRADED,
    "Reconciling": HealthStatus.PROGRESSING,
    "Ready": HealthStatus.HEALTHY,
}


def health(obj: Mapping[str, Any]) -> Health:
    """The health Argo CD assigns to one ``pulumi.com/Stack`` (the rules of the module doc)."""
    metadata = _table(obj.get("metadata"))
    if metadata.get("deletionTimestamp") is not None:
        return Health(HealthStatus.PROGRESSING, _pending_deletion(metadata))
    status = obj.get("status")
    if status is None or not lua_equal(
        _table(status).get("observedGeneration"), metadata.get("generation")
    ):
        return Health(HealthStatus.PROGRESSING, WAITING_FOR_OBSERVATION)
    for condition in _ipairs(_table(status).get("conditions")):
        type_ = condition.get("type")
        decided = _BY_CONDITION.get(type_) if isinstance(type_, str) else None
        if decided is not None and condition.get("status") == "True":
            return Health(decided, str(condition.get("message") or ""))
    return Health(HealthStatus.PROGRESSING, WAITING_FOR_RECONCILE)


def lua_equal(left: object, right: object) -> bool:
    """Lua 5.1 ``==`` on JSON values: numbers numerically, else same type and value."""
    if _is_number(left) and _is_number(right):
        return left == right
    return type(left) is type(right) and left == right


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _table(value: object) -> Mapping[str, Any]:
    """Field access on a Lua value: a non-table has no fields (indexing yields nil)."""
    return value if isinstance(value, Mapping) else {}


def _ipairs(value: object) -> Iterator[Mapping[str, Any]]:
    """``ipairs``: array elements in order, up to the first nil."""
    if not isinstance(value, list):
        return
    for item in value:
        if item is None:
            return
        yield _table(item)


def _pending_deletion(metadata: Mapping[str, Any]) -> str:
    finalizers = metadata.get("finalizers")
    if isinstance(finalizers, list) and finalizers:
        return f"{PENDING_DELETION}; blocked by finalizers: {', '.join(map(str, finalizers))}"
    return PENDING_DELETION
