"""The kstatus contract as pure functions: (current status, what happened) → new status.

Three condition types, as kstatus reads them: ``Ready`` (positive polarity, always
present), ``Reconciling`` and ``Stalled`` (abnormal-true: present only when True, removed
otherwise, never both). The functions below are the only way conditions change:

| function      | Ready                       | Reconciling               | Stalled      |
| ------------- | --------------------------- | ------------------------- | ------------ |
| progressing   | Unknown, Progressing        | True, Progressing         | removed      |
| succeeded     | True, Succeeded             | removed                   | removed      |
| retrying      | False, the failure's reason | True, ProgressingWithRetry| removed      |
| waiting       | False/Unknown, reason       | True, same reason         | removed      |
| stalled       | False, reason               | removed                   | True, reason |
| deleting      | Unknown/False, reason       | True, reason              | removed      |

Every write sets ``status.observedGeneration`` and each condition's ``observedGeneration``
to the generation being reported on. ``lastTransitionTime`` moves only when a condition's
``status`` changes (a new reason or message alone keeps it). Conditions are kept in a fixed
order (Stalled, Reconciling, Ready, then any others) so identical states serialise
identically and an unchanged status costs no write. Messages are cut to the API limit
(32768; counted in UTF-8 bytes, which is never more characters than the API counts).
These are status contract rules 2-12 (``docs/status-contract.md``) as far as one status goes.
"""

from __future__ import annotations

import copy
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from controller.text import truncate

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
ORDER = (STALLED, RECONCILING, READY)
MAX_MESSAGE = 32768
"""metav1.Condition's limit on ``message``; longer messages are cut to this many UTF-8 bytes."""
TRUNCATED = "… [truncated]"
"""The end of a cut message."""

Status = dict[str, Any]


class Reason(enum.StrEnum):
    """Every condition reason this operator writes (a closed set: metrics label on it)."""

    PROGRESSING = "Progressing"
    PROGRESSING_WITH_RETRY = "ProgressingWithRetry"
    SUCCEEDED = "Succeeded"
    UPDATE_FAILED = "UpdateFailed"
    PREVIEW_FAILED = "PreviewFailed"
    REFRESH_DRIFT = "RefreshDriftDetected"
    UPDATE_CONFLICT = "UpdateConflict"
    DEPENDENCY_NOT_READY = "DependencyNotReady"
    SOURCE_NOT_READY = "SourceNotReady"
    INTERRUPTED = "Interrupted"
    UPDATE_TIMED_OUT = "UpdateTimedOut"
    INVALID_SPEC = "InvalidSpec"
    SECRET_NOT_FOUND = "SecretNotFound"  # noqa: S105 - a reason, not a password
    CONFIG_MAP_NOT_FOUND = "ConfigMapNotFound"
    SOURCE_UNAVAILABLE = "SourceUnavailable"
    AUTHENTICATION_FAILED = "AuthenticationFailed"
    ARTIFACT_DIGEST_MISMATCH = "ArtifactDigestMismatch"
    ARTIFACT_UNSAFE = "ArtifactUnsafe"
    PROGRAM_INVALID = "ProgramInvalid"
    STACK_NOT_FOUND = "StackNotFound"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    SUSPENDED = "Suspended"
    DESTROYING = "Destroying"
    DELETION_BLOCKED = "DeletionBlocked"
    RUNNER_FAILED = "RunnerFailed"
    DEPENDENCY_INSTALL_FAILED = "DependencyInstallFailed"


def now_rfc3339(now: datetime.datetime) -> str:
    """RFC 3339 UTC with seconds precision, as metav1.Time serialises."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in ``status``, or None."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == type_:
            found: Mapping[str, Any] = condition
            return found
    return None


def _set(  # noqa: PLR0913 - one condition's fields, all required
    status: Status,
    type_: str,
    value: str,
    reason: Reason,
    message: str,
    *,
    generation: int,
    now: datetime.datetime,
) -> None:
    old = get_condition(status, type_)
    changed = old is None or old.get("status") != value
    condition = {
        "type": type_,
        "status": value,
        "reason": str(reason),
        "message": truncate(message, MAX_MESSAGE, TRUNCATED),
        "observedGeneration": generation,
        "lastTransitionTime": now_rfc3339(now) if changed else old["lastTransitionTime"],  # type: ignore[index]
    }
    others = [c for c in status.get("conditions") or () if c.get("type") != type_]
    status["conditions"] = _ordered([*others, condition])


def _remove(status: Status, type_: str) -> None:
    conditions = [c for c in status.get("conditions") or () if c.get("type") != type_]
    status["conditions"] = _ordered(conditions)


def _ordered(conditions: list[Any]) -> list[Any]:
    def rank(condition: Mapping[str, Any]) -> tuple[int, str]:
        type_ = str(condition.get("type"))
        return (ORDER.index(type_) if type_ in ORDER else len(ORDER), type_)

    return sorted((dict(c) for c in conditions), key=rank)


def _start(status: Mapping[str, Any], generation: int) -> Status:
    new: Status = copy.deepcopy(dict(status))
    new["observedGeneration"] = generation
    return new


def progressing(
    status: Mapping[str, Any], generation: int, message: str, now: datetime.datetime
) -> Status:
    """Work for ``generation`` has started (or is under way): kstatus InProgress."""
    new = _start(status, generation)
    _remove(new, STALLED)
    _set(new, RECONCILING, "True", Reason.PROGRESSING, message, generation=generation, now=now)
    _set(new, READY, "Unknown", Reason.PROGRESSING, message, generation=generation, now=now)
    return new


def succeeded(
    status: Mapping[str, Any], generation: int, message: str, now: datetime.datetime
) -> Status:
    """``generation`` is applied: kstatus Current."""
    new = _start(status, generation)
    _remove(new, STALLED)
    _remove(new, RECONCILING)
    _set(new, READY, "True", Reason.SUCCEEDED, message, generation=generation, now=now)
    return new


def retrying(  # noqa: PLR0913 - the two messages are different facts
    status: Mapping[str, Any],
    generation: int,
    reason: Reason,
    error: str,
    retry_message: str,
    now: datetime.datetime,
) -> Status:
    """The last attempt failed with ``error``; another is scheduled: kstatus InProgress."""
    new = _start(status, generation)
    _remove(new, STALLED)
    _set(
        new, RECONCILING, "True", Reason.PROGRESSING_WITH_RETRY, retry_message,
        generation=generation, now=now,
    )  # fmt: skip
    _set(new, READY, "False", reason, error, generation=generation, now=now)
    return new


def waiting(  # noqa: PLR0913 - each argument is a separate fact
    status: Mapping[str, Any],
    generation: int,
    reason: Reason,
    message: str,
    now: datetime.datetime,
    *,
    ready: str = "False",
) -> Status:
    """Blocked on something outside (a prerequisite, a lock): kstatus InProgress."""
    new = _start(status, generation)
    _remove(new, STALLED)
    _set(new, RECONCILING, "True", reason, message, generation=generation, now=now)
    _set(new, READY, ready, reason, message, generation=generation, now=now)
    return new


def stalled(
    status: Mapping[str, Any],
    generation: int,
    reason: Reason,
    message: str,
    now: datetime.datetime,
) -> Status:
    """Will not succeed without a change to the Stack or what it references: kstatus Failed."""
    new = _start(status, generation)
    _remove(new, RECONCILING)
    _set(new, STALLED, "True", reason, message, generation=generation, now=now)
    _set(new, READY, "False", reason, message, generation=generation, now=now)
    return new


def without_stale_stall(
    status: Mapping[str, Any],
    generation: int,
    now: datetime.datetime,
    before: Mapping[str, Any] | None = None,
) -> Mapping[str, Any]:
    """``status`` as written to an object at ``generation``: no Stalled for an older one.

    A verdict is computed for the generation a pass read; by the time it is written the
    object may be newer (a spec edit, or the API server marking it for deletion, which
    bumps a custom resource's generation). Stalled=True then describes a generation that
    is gone: it becomes Reconciling=True (same reason, the message saying which generation
    awaits reconciling), so that Stalled=True always means the object's own generation.
    A status with nothing stale is returned as it is. ``before`` is the status being
    replaced: a Reconciling=True there keeps its lastTransitionTime.
    """
    stall = get_condition(status, STALLED)
    observed = int(status.get("observedGeneration") or 0)
    if stall is None or stall.get("status") != "True" or observed >= generation:
        return status
    new: Status = copy.deepcopy(dict(status))
    _remove(new, STALLED)
    try:
        reason = Reason(str(stall.get("reason")))
    except ValueError:
        reason = Reason.PROGRESSING
    message = (
        f"generation {generation} awaits reconciling; generation {observed} stalled: "
        f"{stall.get('message') or ''}"
    )
    _set(new, RECONCILING, "True", reason, message, generation=observed, now=now)
    was = get_condition(before or {}, RECONCILING)
    if was is not None and was.get("status") == "True" and was.get("lastTransitionTime"):
        _set_time(new, RECONCILING, str(was["lastTransitionTime"]))
    return new


def _set_time(status: Status, type_: str, when: str) -> None:
    """Give condition ``type_`` of ``status`` the lastTransitionTime ``when``."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == type_:
            condition["lastTransitionTime"] = when


def deleting(  # noqa: PLR0913 - each argument is a separate fact
    status: Mapping[str, Any],
    generation: int,
    reason: Reason,
    message: str,
    now: datetime.datetime,
    *,
    ready: str = "Unknown",
) -> Status:
    """Finalization is running (``Destroying``) or blocked (``DeletionBlocked``).

    The same shape as ``waiting``: kstatus reads it as Terminating (deletionTimestamp).
    """
    return waiting(status, generation, reason, message, now, ready=ready)
