"""A Python port of kstatus ``Compute`` for custom resources, for asserting what tools conclude.

Role: say what kstatus-based tools (Flux health checks, Helm 4 ``--wait``, cli-utils pollers,
``kpt live status``) conclude from one object, so tests can check that every status the
operator writes reads as intended, and so the benchmarks can say what those tools conclude
from another operator's status. A port, written for this project, of the Go package
``pkg/kstatus/status`` of the public ``kubernetes-sigs/cli-utils`` repository as of commit
5895ad6 (October 2025); Flux's fork ``fluxcd/cli-utils`` (May 2026), which Flux and Helm 4's
``--wait`` use, is algorithmically identical there:

- ``compute`` is ``Compute`` (status.go): ``check_generic_properties``
  (``checkGenericProperties``, generic.go: deletionTimestamp, then ``check_generation``
  = ``checkGeneration``, then the walk over Reconciling/Stalled in list order), then the
  Ready fallback ``check_ready_condition`` (``checkReadyCondition``), then the default
  "Resource is current".
- ``read_status`` is the polling layer (polling/statusreaders/common.go,
  ``errResourceToResourceStatus`` and ``errIdentifierToResourceStatus``): no object is
  NotFound, an error from ``Compute`` is Unknown.
- ``aggregate`` is ``AggregateStatus`` (polling/aggregator/aggregator.go).

Guarantees: pure functions that never modify their input. Types and values are compared the
way the Go code does: condition types and statuses case-sensitively; integers only as int64
(``unstructured.NestedInt64``), so a bool, a float (even ``1.0``), a string or an explicit
null is an error, as it is for Go's JSON decoding; strings only as strings
(``NestedString``); ``status.conditions`` is decoded like ``GetObjectWithConditions`` (a
``runtime.DefaultUnstructuredConverter`` into ``BasicCondition``), so a non-object status, a
non-list ``conditions``, a non-object condition or a non-string type/status/reason/message
is an error.

Left out: the built-in kinds' rules (``GetLegacyConditionsFn``, core.go), which never apply
to a custom resource, and ``Augment``. Messages of the Ready fallback are our reading of the
Go code; only statuses and synthesized condition reasons are part of the upstream test
vectors.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
RECONCILING, STALLED, READY = "Reconciling", "Stalled", "Ready"
LATEST_GENERATION_NOT_OBSERVED = "LatestGenerationNotObserved"


class KStatus(enum.StrEnum):
    """The six kstatus results (``status.Status``)."""

    IN_PROGRESS = "InProgress"
    FAILED = "Failed"
    CURRENT = "Current"
    TERMINATING = "Terminating"
    NOT_FOUND = "NotFound"
    UNKNOWN = "Unknown"


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    """A standard condition kstatus reports alongside its result (``status.Condition``)."""

    type: str
    status: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What ``Compute`` returns (``status.Result``): status, message, synthesized conditions."""

    status: KStatus
    message: str
    conditions: tuple[Condition, ...] = ()


class ComputeError(ValueError):
    """``Compute`` returned an error (a malformed field); pollers report Unknown for it."""


@dataclasses.dataclass(frozen=True, slots=True)
class _BasicCondition:
    """The four fields ``GetObjectWithConditions`` decodes (``BasicCondition``)."""

    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


def compute(obj: Mapping[str, Any]) -> Result:
    """``Compute(u)`` for a custom resource; raises ComputeError where Go returns an error."""
    result = check_generic_properties(obj)
    if result is not None:
        return result
    result = check_ready_condition(obj)
    if result is not None:
        return result
    return Result(KStatus.CURRENT, "Resource is current")


def read_status(obj: Mapping[str, Any] | None) -> Result:
    """What a kstatus poller reports: NotFound for no object, Unknown for a Compute error.

    Mirrors ``errResourceToResourceStatus`` / ``errIdentifierToResourceStatus``: ``None``
    stands for the 404 of the GET.
    """
    if obj is None:
        return Result(KStatus.NOT_FOUND, "Resource not found")
    try:
        return compute(obj)
    except ComputeError as err:
        return Result(KStatus.UNKNOWN, str(err))


def aggregate(statuses: Iterable[KStatus], desired: KStatus) -> KStatus:
    """``AggregateStatus``: any Failed wins, then any Unknown, then all-desired, else InProgress.

    An empty set counts as having the desired status.
    """
    all_desired, any_unknown = True, False
    for status in statuses:
        if status is KStatus.FAILED:
            return KStatus.FAILED
        any_unknown = any_unknown or status is KStatus.UNKNOWN
        all_desired = all_desired and status is desired
    if any_unknown:
        return KStatus.UNKNOWN
    return desired if all_desired else KStatus.IN_PROGRESS


def check_generic_properties(obj: Mapping[str, Any]) -> Result | None:
    """``checkGenericProperties``: deletion, generation, then Reconciling/Stalled in list order.

    Returns None when these properties decide nothing.
    """
    deletion = _nested_string(obj, "metadata", "deletionTimestamp")
    if deletion:
        return Result(KStatus.TERMINATING, "Resource scheduled for deletion")
    result = check_generation(obj)
    if result is not None:
        return result
    for condition in get_object_with_conditions(obj):
        if condition.status != "True":
            continue
        if condition.type == RECONCILING:
            return Result(KStatus.IN_PROGRESS, condition.message, (_standard(condition),))
        if condition.type == STALLED:
            return Result(KStatus.FAILED, condition.message, (_standard(condition),))
    return None


def check_generation(obj: Mapping[str, Any]) -> Result | None:
    """``checkGeneration``: InProgress when observedGeneration differs (lower or higher).

    Skipped when ``metadata.generation`` or ``status.observedGeneration`` is absent
    (upstream: "TODO(mortent): Verify behavior of not set vs does not exist").
    """
    generation = _nested_int64(obj, "metadata", "generation")
    if generation is None:
        return None
    observed = _nested_int64(obj, "status", "observedGeneration")
    if observed is None or observed == generation:
        return None
    kind = obj.get("kind")
    message = (
        f"{kind if isinstance(kind, str) else ''} generation is {generation}, "
        f"but latest observed generation is {observed}"
    )
    return _in_progress(LATEST_GENERATION_NOT_OBSERVED, message)


def check_ready_condition(obj: Mapping[str, Any]) -> Result | None:
    """``checkReadyCondition``: the first Ready with True/False/Unknown decides.

    True is Current; False and Unknown are InProgress with a Reconciling condition carrying
    Ready's reason (Ready=False never gives Failed). Other status values are skipped.
    """
    for condition in get_object_with_conditions(obj):
        if condition.type != READY:
            continue
        if condition.status == "True":
            return Result(KStatus.CURRENT, "Resource is Ready")
        if condition.status in {"False", "Unknown"}:
            return _in_progress(condition.reason, condition.message)
    return None


def get_object_with_conditions(obj: Mapping[str, Any]) -> list[_BasicCondition]:
    """``GetObjectWithConditions``: ``status.conditions`` decoded, or ComputeError."""
    status = obj.get("status")
    if status is None:
        return []
    if not isinstance(status, Mapping):
        msg = f"status: cannot decode {type(status).__name__} into an object"
        raise ComputeError(msg)
    conditions = status.get("conditions")
    if conditions is None:
        return []
    if not isinstance(conditions, list):
        msg = f"status.conditions: cannot decode {type(conditions).__name__} into a slice"
        raise ComputeError(msg)
    return [_decode_condition(index, item) for index, item in enumerate(conditions)]


def _decode_condition(index: int, item: object) -> _BasicCondition:
    if item is None:  # the converter leaves a null element as the zero value
        return _BasicCondition()
    if not isinstance(item, Mapping):
        msg = f"status.conditions[{index}]: cannot decode {type(item).__name__} into an object"
        raise ComputeError(msg)
    fields: dict[str, str] = {}
    for name in ("type", "status", "reason", "message"):
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            msg = f"status.conditions[{index}].{name}: cannot decode {value!r} into a string"
            raise ComputeError(msg)
        fields[name] = value or ""
    return _BasicCondition(**fields)


def _standard(condition: _BasicCondition) -> Condition:
    return Condition(condition.type, "True", condition.reason, condition.message)


def _in_progress(reason: str, message: str) -> Result:
    """``newInProgressStatus``: InProgress with a synthesized Reconciling condition."""
    return Result(KStatus.IN_PROGRESS, message, (Condition(RECONCILING, "True", reason, message),))


def _nested(obj: Mapping[str, Any], *fields: str) -> tuple[object, bool]:
    """``unstructured.NestedFieldNoCopy``: (value, found); a non-object on the way is an error."""
    value: object = obj
    for depth, field in enumerate(fields):
        if value is None:
            return None, False
        if not isinstance(value, Mapping):
            path = "." + ".".join(fields[: depth + 1])
            msg = f"{path} accessor error: {value!r} is of the type {type(value).__name__}"
            raise ComputeError(msg)
        if field not in value:
            return None, False
        value = value[field]
    return value, True


def _nested_string(obj: Mapping[str, Any], *fields: str) -> str | None:
    """``unstructured.NestedString``: None when absent; any non-string (even null) is an error."""
    value, found = _nested(obj, *fields)
    if not found:
        return None
    if not isinstance(value, str):
        path = ".".join(fields)
        msg = f"looking up {path} from resource: {value!r} is not a string"
        raise ComputeError(msg)
    return value


def _nested_int64(obj: Mapping[str, Any], *fields: str) -> int | None:
    """``unstructured.NestedInt64``: None when absent; anything but an int64 is an error."""
    value, found = _nested(obj, *fields)
    if not found:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not INT64_MIN <= value <= INT64_MAX:
        path = ".".join(fields)
        msg = f"looking up {path} from resource: {value!r} is not an int64"
        raise ComputeError(msg)
    return value
