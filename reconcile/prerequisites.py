"""Whether a Stack's prerequisites allow it to run: other Stacks that must be Ready.

A prerequisite is ready when it exists in the same namespace, is ``Ready=True`` for its
current generation and, with ``succeededWithinDuration``, its last successful run ended
at most that long ago. ``unready`` names the first that is not, in the spec's order.
"""

from __future__ import annotations

import datetime

from controller.cache import ObjectKey
from controller.clock import parse_time
from reconcile.collaborators import ObjectView
from reconcile.spec import Prerequisite, StackSpec
from status import conditions as cond


def unready(
    view: ObjectView, key: ObjectKey, spec: StackSpec, now: datetime.datetime
) -> str | None:
    """Why the first unready prerequisite of the Stack at ``key`` blocks it, or None."""
    for prerequisite in spec.prerequisites:
        problem = _problem(view, ObjectKey(key.namespace, prerequisite.name), prerequisite, now)
        if problem is not None:
            return problem
    return None


def _problem(
    view: ObjectView, key: ObjectKey, prerequisite: Prerequisite, now: datetime.datetime
) -> str | None:
    other = view.get(key)
    name = prerequisite.name
    if other is None:
        return f'Prerequisite Stack "{name}" does not exist'
    status = other.get("status") or {}
    ready = cond.get_condition(status, cond.READY)
    generation = (other.get("metadata") or {}).get("generation")
    if (
        ready is None
        or ready.get("status") != "True"
        or status.get("observedGeneration") != generation
    ):
        return f'Prerequisite Stack "{name}" is not Ready'
    if prerequisite.succeeded_within is not None:
        ended = parse_time((status.get("lastUpdate") or {}).get("lastResyncTime"))
        age = (now - ended).total_seconds() if ended else float("inf")
        if age > prerequisite.succeeded_within:
            if ended is None:
                return f'Prerequisite Stack "{name}" records no successful update'
            return (  # no age in it: the message would change with every look
                f'Prerequisite Stack "{name}" last succeeded at {cond.now_rfc3339(ended)}, '
                f"more than {prerequisite.succeeded_within:.0f}s ago"
            )
    return None
