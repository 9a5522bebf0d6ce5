"""Rules on each status write: every version, and every version against the one before.

Role: the rules a status must keep at every moment, intermediate states included, and the
rules about how one write may follow another. Each rule yields what is wrong (nothing when
kept); ``EVERY_VERSION`` and ``TRANSITIONS`` pair each with its number in
``docs/status-contract.md``. ``tests.status.status_rules`` says when each table applies.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from tests.status.status_view import (
    HANDSHAKE,
    PROGRESSING,
    READY,
    RECONCILING,
    STALLED,
    Obj,
    StatusView,
    changed_paths,
    handled_request,
    is_before,
    is_int,
    mask_times,
    parse_time,
    same_int,
    short,
)

# metav1.Condition limits (apimachinery validation; the CRD schema repeats them).
TYPE_PATTERN = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
REASON_PATTERN = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MAX_TYPE, MAX_REASON, MAX_MESSAGE = 316, 1024, 32768
ORDER = {STALLED: 0, RECONCILING: 1, READY: 2}
TIME_RESOLUTION = datetime.timedelta(seconds=1)  # of metav1.Time: RFC 3339 without fractions

Rule = Callable[[StatusView], Iterable[str]]
"""A rule on one version: yields what is wrong."""
PairRule = Callable[[StatusView, StatusView], Iterable[str]]
"""A rule on a version and the one before it: yields what is wrong."""


# -- rules on every version ----------------------------------------------------------------


def _rule1_written_status_has_ready(v: StatusView) -> Iterator[str]:
    if not v.written:
        return
    if "observedGeneration" not in v.status:
        yield "status is written without observedGeneration"
    if v.condition(READY) is None:
        yield "status is written without a Ready condition"


def _rule2_observed_generation_is_an_int_not_ahead(v: StatusView) -> Iterator[str]:
    yield from _generation_field("status.observedGeneration", v.status, v.generation)
    for c in v.conditions:
        what = f"condition {c.get('type')} observedGeneration"
        yield from _generation_field(what, c, v.generation)


def _generation_field(what: str, holder: Obj, generation: object) -> Iterator[str]:
    if "observedGeneration" not in holder:
        return
    value = holder["observedGeneration"]
    if not is_int(value):
        yield f"{what} is {value!r}, not an integer (kstatus: Unknown)"
    elif value < 0:
        yield f"{what} is negative ({value})"
    elif is_int(generation) and value > generation:
        yield f"{what} {value} is ahead of metadata.generation {generation}"


def _rule4_not_reconciling_and_stalled(v: StatusView) -> Iterator[str]:
    if v.condition(RECONCILING) is not None and v.condition(STALLED) is not None:
        order = [t for t in (c.get("type") for c in v.conditions) if t in {RECONCILING, STALLED}]
        yield f"Reconciling and Stalled are both present (in the order {order})"


def _rule5_stalled_is_final_for_this_generation(v: StatusView) -> Iterator[str]:
    stalled = v.condition(STALLED)
    if stalled is None or stalled.get("status") != "True":
        return
    if v.state(READY) != "False":
        yield f"Stalled=True with Ready={v.state(READY)}, not False"
    observed = v.status.get("observedGeneration")
    if not same_int(observed, v.generation):
        yield (
            f"Stalled=True with status.observedGeneration {observed!r} != generation "
            f"{v.generation!r}: kstatus says InProgress instead of Failed"
        )
    if "observedGeneration" in stalled and not same_int(
        stalled["observedGeneration"], v.generation
    ):
        yield f"Stalled's observedGeneration {stalled['observedGeneration']!r} is not current"


def _rule6_ready_unknown_means_reconciling(v: StatusView) -> Iterator[str]:
    if v.state(READY) == "Unknown" and not v.is_true(RECONCILING):
        yield "Ready=Unknown without Reconciling=True"


def _rule7_abnormal_true_conditions_are_removed_not_false(v: StatusView) -> Iterator[str]:
    for type_ in (RECONCILING, STALLED):
        state = v.state(type_)
        if state is not None and state != "True":
            yield f"{type_}={state} is written; it must be removed instead"


def _rule10_transition_times_are_utc(v: StatusView) -> Iterator[str]:
    for c in v.conditions:
        parsed = parse_time(c.get("lastTransitionTime"))
        if parsed is not None and parsed.utcoffset() != datetime.timedelta(0):
            yield f"{c.get('type')} lastTransitionTime {c.get('lastTransitionTime')} is not UTC"


def _rule11_conditions_are_schema_valid(v: StatusView) -> Iterator[str]:
    raw = v.status.get("conditions")
    if raw is None:
        return
    if not isinstance(raw, list):
        yield f"status.conditions is a {type(raw).__name__}, not a list"
        return
    seen: set[str] = set()
    for index, c in enumerate(raw):
        if not isinstance(c, Mapping):
            yield f"status.conditions[{index}] is {short(c)}, not an object"
            continue
        yield from _condition_schema(c)
        type_ = c.get("type")
        if isinstance(type_, str) and type_ in seen:
            yield f"condition type {type_!r} appears more than once"
        seen.add(str(type_))


def _condition_schema(c: Obj) -> Iterator[str]:
    label = f"condition {short(c.get('type'))}"
    type_, reason, message = c.get("type"), c.get("reason"), c.get("message")
    if not isinstance(type_, str) or len(type_) > MAX_TYPE or not TYPE_PATTERN.fullmatch(type_):
        yield f"{label}: type is not a qualified name of at most {MAX_TYPE} characters"
    if c.get("status") not in {"True", "False", "Unknown"}:
        yield f"{label}: status {short(c.get('status'))} is not True, False or Unknown"
    if (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON
        or not REASON_PATTERN.fullmatch(reason)
    ):
        yield f"{label}: reason {short(reason)} is not a CamelCase reason of 1..{MAX_REASON}"
    if not isinstance(message, str):
        yield f"{label}: message is {short(message)}; it is required (it may be empty)"
    elif len(message) > MAX_MESSAGE:
        yield f"{label}: message has {len(message)} characters, more than {MAX_MESSAGE}"
    if parse_time(c.get("lastTransitionTime")) is None:
        time_ = short(c.get("lastTransitionTime"))
        yield f"{label}: lastTransitionTime {time_} is not an RFC 3339 date-time"


def _rule12_condition_order(v: StatusView) -> Iterator[str]:
    types = [str(c.get("type")) for c in v.conditions]
    ranks = [ORDER.get(t, len(ORDER)) for t in types]
    if ranks != sorted(ranks):
        yield f"conditions are ordered {types}, not Stalled, Reconciling, Ready, then others"


def _rule17_handshake_fields_agree(v: StatusView) -> Iterator[str]:
    values = {name: v.status[name] for name in HANDSHAKE if v.status.get(name)}
    if len({str(value) for value in values.values()}) > 1:
        yield f"the handled reconcile request differs between fields: {values}"


EVERY_VERSION: tuple[tuple[int, Rule], ...] = (
    (1, _rule1_written_status_has_ready),
    (2, _rule2_observed_generation_is_an_int_not_ahead),
    (4, _rule4_not_reconciling_and_stalled),
    (5, _rule5_stalled_is_final_for_this_generation),
    (6, _rule6_ready_unknown_means_reconciling),
    (7, _rule7_abnormal_true_conditions_are_removed_not_false),
    (10, _rule10_transition_times_are_utc),
    (11, _rule11_conditions_are_schema_valid),
    (12, _rule12_condition_order),
    (17, _rule17_handshake_fields_agree),
)


# -- rules on a version and the one before it ----------------------------------------------


def _rule1_first_write_starts_the_work(v: StatusView, before: StatusView) -> Iterator[str]:
    if before.written or not v.written:
        return
    ready = v.state(READY)
    if ready is not None and ready not in {"Unknown", "False"}:
        yield f"the first status write has Ready={ready}, not Unknown or False"
    if not (v.is_true(RECONCILING) or v.is_true(STALLED)):
        yield "the first status write has neither Reconciling=True nor Stalled=True"


def _rule10_transition_time_moves_iff_status_moves(
    v: StatusView, before: StatusView
) -> Iterator[str]:
    """Same status: the very same time. A flip: a time at most one second before the old one.

    See "Rule 10 and the clock" in ``tests.status.status_rules``: strings of one-second resolution,
    stamped from readings taken in either order within that second, may step back by one.
    """
    for c in v.conditions:
        type_ = c.get("type")
        old = before.condition(type_) if isinstance(type_, str) else None
        if old is None:
            continue
        new_time, old_time = c.get("lastTransitionTime"), old.get("lastTransitionTime")
        if c.get("status") == old.get("status"):
            if new_time != old_time:
                yield f"{type_} lastTransitionTime moved {old_time} -> {new_time}, status unchanged"
        elif is_before(new_time, old_time, TIME_RESOLUTION):
            yield (
                f"{type_} lastTransitionTime went back from {old_time} to {new_time}, more than "
                f"the clock's resolution ({TIME_RESOLUTION.total_seconds():g} s)"
            )


def _rule13_no_heartbeat_writes(v: StatusView, before: StatusView) -> Iterator[str]:
    if v.status == before.status or not same_int(v.generation, before.generation):
        return
    if v.is_true(RECONCILING) or before.is_true(RECONCILING):
        return  # live progress of a run may tick; the rule is about idle Stacks
    if mask_times(v.status) == mask_times(before.status):
        changed = ", ".join(changed_paths(before.status, v.status, "status"))
        yield f"an idle status write changed only timestamps: {changed}"


def _rule14_generation_moves_only_with_the_spec(v: StatusView, before: StatusView) -> Iterator[str]:
    new, old = v.generation, before.generation
    if not (is_int(new) and is_int(old)) or new == old:
        return
    if isinstance(new, int) and isinstance(old, int) and new < old:
        yield f"metadata.generation went back from {old} to {new}"
    elif v.obj.get("spec") == before.obj.get("spec") and not (v.deleting and not before.deleting):
        # The apiserver itself bumps a custom resource's generation when it sets
        # deletionTimestamp; that is not a status write.
        yield f"metadata.generation moved {old} -> {new} without a spec change"


def _rule15_the_write_ending_a_run_concludes_it(v: StatusView, before: StatusView) -> Iterator[str]:
    ended = before.status.get("currentUpdate") and not v.status.get("currentUpdate")
    if ended and v.reconciling_reason() == PROGRESSING:
        yield (
            "the write that ended the run (currentUpdate removed) left "
            "Reconciling=True/Progressing: it claims a run that is not happening"
        )


def _rule16_deletion_writes_report_the_step(v: StatusView, before: StatusView) -> Iterator[str]:
    if not v.deleting or v.status == before.status:
        return
    step = next((v.condition(t) for t in (RECONCILING, STALLED) if v.is_true(t)), None)
    if step is None:
        yield "a status write during deletion has neither Reconciling=True nor Stalled=True"
    elif not str(step.get("message") or "").strip():
        yield f"{step.get('type')} has no message naming the finalizer or what blocks it"
    if v.is_true(READY):
        yield "Ready=True is written while the Stack is being deleted"


def _rule17_requests_are_handled_with_the_conclusion(
    v: StatusView, before: StatusView
) -> Iterator[str]:
    handled = handled_request(v.status)
    if handled is None or handled == handled_request(before.status):
        return
    ready = v.state(READY)
    if ready not in {"True", "False"} or v.reconciling_reason() == PROGRESSING:
        yield (
            f"request {handled!r} is marked handled in a write that does not conclude the run "
            f"(Ready={ready}, Reconciling reason {v.reconciling_reason()})"
        )


TRANSITIONS: tuple[tuple[int, PairRule], ...] = (
    (1, _rule1_first_write_starts_the_work),
    (10, _rule10_transition_time_moves_iff_status_moves),
    (13, _rule13_no_heartbeat_writes),
    (14, _rule14_generation_moves_only_with_the_spec),
    (15, _rule15_the_write_ending_a_run_concludes_it),
    (16, _rule16_deletion_writes_report_the_step),
    (17, _rule17_requests_are_handled_with_the_conclusion),
)
