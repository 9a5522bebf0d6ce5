"""Status invariants: the golden rules of status-conventions §6, judged from object versions.

Role: an independent witness of the status contract (design §3). ``check`` judges one version
of a Stack, optionally against the version seen just before it. ``StackWatcher`` records
every version of every Stack in a namespace through a watch, checks each one as it arrives,
and at the end checks the last version of each Stack as a final state, including what kstatus
(``tests.status.kstatus``) and Argo CD (``tests.status.argo_health``) make of it.

When each rule is checked. ◐ marks the rules §6 says hold for every intermediate status; the
rules about how a write looks or changes hold for every write, so they are checked on every
version too; the remaining state rules are checked only on final states.

Whose versions are judged. The witness blames the operator only for what it controls: its
status writes. The every-version rules judge a version whose status differs from the one
before it (a write), and the first version seen of a Stack (or the first after a gap), whose
author is unknown. A version with the status of the one before it was made by someone else:
a user's spec or metadata edit, the finalizer patch, the apiserver setting
deletionTimestamp. It shows the old status against the new metadata (a user who edits a
Stalled Stack makes a version with Stalled=True and a stale observedGeneration, which kstatus
rightly reads InProgress), so the status rules are not applied to it again; the transition
rules still are (G14 judges exactly such versions). The CRD defaults a new Stack's status to
``{observedGeneration: 0}``: that is the apiserver's, not a write, and counts as no status.

Every version:
  G1 ◐ a written status has ``observedGeneration`` and Ready;
  G2 ◐ observedGeneration (of the status and of each condition) is an int in 0..generation;
  G4 ◐ never Reconciling and Stalled together;
  G5 ◐ Stalled=True ⇒ Ready=False and observedGeneration == generation;
  G6 ◐ Ready=Unknown ⇒ Reconciling=True;
  G7 ◐ Reconciling and Stalled are only ever True (removed, never False);
  G10 lastTransitionTime is UTC; G11 schema validity; G12 order Stalled, Reconciling, Ready,
  others; G17 the two handshake fields agree.
Every version against the one before it (same uid):
  G1 ◐ the first status write (after none, or the CRD's default) has Ready Unknown/False and
  Reconciling or Stalled True;
  G10 lastTransitionTime stays while status stays; a flip never takes it back by more than
  the clock's one-second resolution (below);
  G13 no idle write that changes only timestamps;
  G14 generation never decreases and moves only with the spec;
  G15 the write that ends a run (drops ``currentUpdate``) concludes it;
  G16 a status write during deletion reports the deletion step;
  G17 a request is marked handled only in a write that concludes the run.
Final, not being deleted (``final=True``, ``check_final``):
  G1 a status was written (the CRD's default is not one);
  G3 every condition carries observedGeneration; Ready=True ⇒ status, conditions and
  ``lastUpdate`` are all about the current generation;
  G6 Reconciling=True ⇒ Ready≠True;
  G8 Ready=True ⇒ no Stalled/Reconciling present; otherwise Ready carries Stalled's reason and
  message, or Reconciling's reason (except ProgressingWithRetry: then Ready has the error);
  G9 Ready=False carries the error, not a bare count;
  G15 Reconciling=True/Progressing only while ``currentUpdate`` names the run;
  G17 a request annotation is handled (unless suspended);
  G18 kstatus and Argo CD read the status as its conditions mean (below).
Final, being deleted: G18 only (kstatus Terminating, Argo Progressing).

G18 mapping of a final status: Stalled=True → kstatus Failed / Argo Degraded; else
Reconciling=True → InProgress / Progressing; else Ready=True → Current / Healthy; anything
else is a violation (no one is working on it and nothing is decided). ``StackWatcher`` adds a
history rule to G17: the request annotation value that changed last must be the handled one.

Left to other tests: G13's "zero PATCHes" (an audit of API calls), G15's crash simulation,
G16's metrics and events, and G19-G28 (events and metrics). Reasons are this project's
(``Progressing``, ``ProgressingWithRetry``); the constants are repeated here on purpose so
that the witness does not share code with what it checks.

G10 and the clock. metav1.Time has one-second resolution: a flip within the second the
condition last changed keeps the string, and two flips inside one second may carry clock
readings taken in either order (a time read when the reconciler decided, written just after
a write stamped later in the same second), so the strings of consecutive flips may go back
by one second. Only a step back of more than one second is a lie; a time that moves while
the status stays is always one (no clock is involved).

Guarantees: ``check`` is pure, never raises on a malformed object (it reports it), and names
every violation by object, resourceVersion, rule id and detail.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, cast

from kubernetes import client, watch
from urllib3.exceptions import HTTPError

from tests.status import argo_health, kstatus
from tests.status.argo_health import HealthStatus
from tests.status.kstatus import KStatus

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
PROGRESSING, PROGRESSING_WITH_RETRY = "Progressing", "ProgressingWithRetry"
HANDSHAKE = ("observedReconcileRequest", "lastHandledReconcileAt")
REQUEST_ANNOTATIONS = ("pulumi.com/reconciliation-request", "reconcile.fluxcd.io/requestedAt")

# metav1.Condition limits (apimachinery validation; the CRD schema repeats them).
TYPE_PATTERN = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
REASON_PATTERN = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MAX_TYPE, MAX_REASON, MAX_MESSAGE = 316, 1024, 32768
TIME_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
BARE_COUNT = re.compile(r"\s*\d+\s+[\w\s]*failures?(\(s\))?\.?\s*", re.IGNORECASE)
ORDER = {STALLED: 0, RECONCILING: 1, READY: 2}
TIME_RESOLUTION = datetime.timedelta(seconds=1)  # of metav1.Time: RFC 3339 without fractions


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: which object (``namespace/name``), which version, which rule, why."""

    key: str
    resource_version: str
    rule: str
    detail: str

    def __str__(self) -> str:
        """One line: object, resourceVersion, rule id, detail."""
        return f"{self.key} (resourceVersion {self.resource_version}) {self.rule}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class _View:
    """One object version, read defensively: a malformed status never raises."""

    obj: Obj
    metadata: Obj
    status: Obj
    conditions: tuple[Obj, ...]

    @classmethod
    def of(cls, obj: Obj) -> _View:
        status = _mapping(obj.get("status"))
        raw = status.get("conditions")
        items = raw if isinstance(raw, list) else []
        conditions = tuple(c for c in items if isinstance(c, Mapping))
        return cls(obj, _mapping(obj.get("metadata")), status, conditions)

    @property
    def key(self) -> str:
        return f"{self.metadata.get('namespace', '')}/{self.metadata.get('name', '')}"

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion", ""))

    @property
    def generation(self) -> object:
        return self.metadata.get("generation")

    @property
    def written(self) -> bool:
        """Whether the status is a write: present, and not the CRD's ``{observedGeneration: 0}``."""
        default = set(self.status) == {"observedGeneration"} and _same_int(
            self.status["observedGeneration"], 0
        )
        return bool(self.status) and not default

    @property
    def deleting(self) -> bool:
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def suspended(self) -> bool:
        return _mapping(self.obj.get("spec")).get("suspend") is True

    def condition(self, type_: str) -> Obj | None:
        """The first condition of ``type_`` (the one kstatus and Argo read)."""
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def state(self, type_: str) -> str | None:
        """The status of condition ``type_``, or None when absent."""
        found = self.condition(type_)
        return None if found is None else str(found.get("status"))

    def is_true(self, type_: str) -> bool:
        return self.state(type_) == "True"

    def reconciling_reason(self) -> str | None:
        found = self.condition(RECONCILING)
        return str(found.get("reason")) if found and found.get("status") == "True" else None


Rule = Callable[[_View], Iterable[str]]
PairRule = Callable[[_View, _View], Iterable[str]]


# -- public API ----------------------------------------------------------------------------


def check(obj: Obj, previous: Obj | None = None, *, final: bool = False) -> list[Violation]:
    """Every rule that applies to ``obj`` (see the module docstring's table).

    ``previous`` is the version of the same object seen just before ``obj`` (ignored if it
    belongs to another incarnation, i.e. another uid); ``final`` adds the final-state rules.
    The every-version rules judge ``obj`` only when its status differs from ``previous``'s
    (or there is no previous version to compare with): an unchanged status is not a write.
    """
    view = _View.of(obj)
    before = None if previous is None else _View.of(previous)
    if before is not None and not _same_object(view, before):
        before = None
    written = before is None or view.status != before.status
    found = _apply(view, EVERY_VERSION) if written else []
    if before is not None:
        found += _apply_pairs(view, before, TRANSITIONS)
    if final:
        found += _apply(view, FINAL_DELETING if view.deleting else FINAL)
    return found


def check_final(obj: Obj) -> list[Violation]:
    """Only the final-state rules (what ``final=True`` adds to ``check``)."""
    view = _View.of(obj)
    return _apply(view, FINAL_DELETING if view.deleting else FINAL)


def expected_outcome(obj: Obj) -> tuple[KStatus, HealthStatus] | None:
    """What kstatus and Argo CD should say about a final status (G18), or None if undecided."""
    view = _View.of(obj)
    if view.deleting:
        return KStatus.TERMINATING, HealthStatus.PROGRESSING
    if view.is_true(STALLED):
        return KStatus.FAILED, HealthStatus.DEGRADED
    if view.is_true(RECONCILING):
        return KStatus.IN_PROGRESS, HealthStatus.PROGRESSING
    if view.is_true(READY):
        return KStatus.CURRENT, HealthStatus.HEALTHY
    return None


def _apply(view: _View, rules: Iterable[tuple[str, Rule]]) -> list[Violation]:
    return [
        Violation(view.key, view.resource_version, rule_id, detail)
        for rule_id, rule in rules
        for detail in rule(view)
    ]


def _apply_pairs(
    view: _View, before: _View, rules: Iterable[tuple[str, PairRule]]
) -> list[Violation]:
    return [
        Violation(view.key, view.resource_version, rule_id, detail)
        for rule_id, rule in rules
        for detail in rule(view, before)
    ]


# -- rules on every version ----------------------------------------------------------------


def _g1_written_status_has_ready(v: _View) -> Iterator[str]:
    if not v.written:
        return
    if "observedGeneration" not in v.status:
        yield "status is written without observedGeneration"
    if v.condition(READY) is None:
        yield "status is written without a Ready condition"


def _g2_observed_generation_is_an_int_not_ahead(v: _View) -> Iterator[str]:
    yield from _generation_field("status.observedGeneration", v.status, v.generation)
    for c in v.conditions:
        what = f"condition {c.get('type')} observedGeneration"
        yield from _generation_field(what, c, v.generation)


def _generation_field(what: str, holder: Obj, generation: object) -> Iterator[str]:
    if "observedGeneration" not in holder:
        return
    value = holder["observedGeneration"]
    if not _is_int(value):
        yield f"{what} is {value!r}, not an integer (kstatus: Unknown)"
    elif value < 0:
        yield f"{what} is negative ({value})"
    elif _is_int(generation) and value > generation:
        yield f"{what} {value} is ahead of metadata.generation {generation}"


def _g4_not_reconciling_and_stalled(v: _View) -> Iterator[str]:
    if v.condition(RECONCILING) is not None and v.condition(STALLED) is not None:
        order = [t for t in (c.get("type") for c in v.conditions) if t in {RECONCILING, STALLED}]
        yield f"Reconciling and Stalled are both present (in the order {order})"


def _g5_stalled_is_final_for_this_generation(v: _View) -> Iterator[str]:
    stalled = v.condition(STALLED)
    if stalled is None or stalled.get("status") != "True":
        return
    if v.state(READY) != "False":
        yield f"Stalled=True with Ready={v.state(READY)}, not False"
    observed = v.status.get("observedGeneration")
    if not _same_int(observed, v.generation):
        yield (
            f"Stalled=True with status.observedGeneration {observed!r} != generation "
            f"{v.generation!r}: kstatus says InProgress instead of Failed"
        )
    if "observedGeneration" in stalled and not _same_int(
        stalled["observedGeneration"], v.generation
    ):
        yield f"Stalled's observedGeneration {stalled['observedGeneration']!r} is not current"


def _g6_ready_unknown_means_reconciling(v: _View) -> Iterator[str]:
    if v.state(READY) == "Unknown" and not v.is_true(RECONCILING):
        yield "Ready=Unknown without Reconciling=True"


def _g7_abnormal_true_conditions_are_removed_not_false(v: _View) -> Iterator[str]:
    for type_ in (RECONCILING, STALLED):
        state = v.state(type_)
        if state is not None and state != "True":
            yield f"{type_}={state} is written; it must be removed instead"


def _g10_transition_times_are_utc(v: _View) -> Iterator[str]:
    for c in v.conditions:
        parsed = _parse_time(c.get("lastTransitionTime"))
        if parsed is not None and parsed.utcoffset() != datetime.timedelta(0):
            yield f"{c.get('type')} lastTransitionTime {c.get('lastTransitionTime')} is not UTC"


def _g11_conditions_are_schema_valid(v: _View) -> Iterator[str]:
    raw = v.status.get("conditions")
    if raw is None:
        return
    if not isinstance(raw, list):
        yield f"status.conditions is a {type(raw).__name__}, not a list"
        return
    seen: set[str] = set()
    for index, c in enumerate(raw):
        if not isinstance(c, Mapping):
            yield f"status.conditions[{index}] is {_short(c)}, not an object"
            continue
        yield from _condition_schema(c)
        type_ = c.get("type")
        if isinstance(type_, str) and type_ in seen:
            yield f"condition type {type_!r} appears more than once"
        seen.add(str(type_))


def _condition_schema(c: Obj) -> Iterator[str]:
    label = f"condition {_short(c.get('type'))}"
    type_, reason, message = c.get("type"), c.get("reason"), c.get("message")
    if not isinstance(type_, str) or len(type_) > MAX_TYPE or not TYPE_PATTERN.fullmatch(type_):
        yield f"{label}: type is not a qualified name of at most {MAX_TYPE} characters"
    if c.get("status") not in {"True", "False", "Unknown"}:
        yield f"{label}: status {_short(c.get('status'))} is not True, False or Unknown"
    if (
        not isinstance(reason, str)
        or len(reason) > MAX_REASON
        or not REASON_PATTERN.fullmatch(reason)
    ):
        yield f"{label}: reason {_short(reason)} is not a CamelCase reason of 1..{MAX_REASON}"
    if not isinstance(message, str):
        yield f"{label}: message is {_short(message)}; it is required (it may be empty)"
    elif len(message) > MAX_MESSAGE:
        yield f"{label}: message has {len(message)} characters, more than {MAX_MESSAGE}"
    if _parse_time(c.get("lastTransitionTime")) is None:
        time_ = _short(c.get("lastTransitionTime"))
        yield f"{label}: lastTransitionTime {time_} is not an RFC 3339 date-time"


def _g12_condition_order(v: _View) -> Iterator[str]:
    types = [str(c.get("type")) for c in v.conditions]
    ranks = [ORDER.get(t, len(ORDER)) for t in types]
    if ranks != sorted(ranks):
        yield f"conditions are ordered {types}, not Stalled, Reconciling, Ready, then others"


def _g17_handshake_fields_agree(v: _View) -> Iterator[str]:
    values = {name: v.status[name] for name in HANDSHAKE if v.status.get(name)}
    if len({str(value) for value in values.values()}) > 1:
        yield f"the handled reconcile request differs between fields: {values}"


EVERY_VERSION: tuple[tuple[str, Rule], ...] = (
    ("G1", _g1_written_status_has_ready),
    ("G2", _g2_observed_generation_is_an_int_not_ahead),
    ("G4", _g4_not_reconciling_and_stalled),
    ("G5", _g5_stalled_is_final_for_this_generation),
    ("G6", _g6_ready_unknown_means_reconciling),
    ("G7", _g7_abnormal_true_conditions_are_removed_not_false),
    ("G10", _g10_transition_times_are_utc),
    ("G11", _g11_conditions_are_schema_valid),
    ("G12", _g12_condition_order),
    ("G17", _g17_handshake_fields_agree),
)


# -- rules on a version and the one before it ----------------------------------------------


def _g1_first_write_starts_the_work(v: _View, before: _View) -> Iterator[str]:
    if before.written or not v.written:
        return
    ready = v.state(READY)
    if ready is not None and ready not in {"Unknown", "False"}:
        yield f"the first status write has Ready={ready}, not Unknown or False"
    if not (v.is_true(RECONCILING) or v.is_true(STALLED)):
        yield "the first status write has neither Reconciling=True nor Stalled=True"


def _g10_transition_time_moves_iff_status_moves(v: _View, before: _View) -> Iterator[str]:
    """Same status: the very same time. A flip: a time at most one second before the old one.

    See "G10 and the clock" in the module docstring: strings of one-second resolution,
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
        elif _before(new_time, old_time, TIME_RESOLUTION):
            yield (
                f"{type_} lastTransitionTime went back from {old_time} to {new_time}, more than "
                f"the clock's resolution ({TIME_RESOLUTION.total_seconds():g} s)"
            )


def _g13_no_heartbeat_writes(v: _View, before: _View) -> Iterator[str]:
    if v.status == before.status or not _same_int(v.generation, before.generation):
        return
    if v.is_true(RECONCILING) or before.is_true(RECONCILING):
        return  # live progress of a run may tick; the rule is about idle Stacks
    if _mask_times(v.status) == _mask_times(before.status):
        changed = ", ".join(_changed_paths(before.status, v.status, "status"))
        yield f"an idle status write changed only timestamps: {changed}"


def _g14_generation_moves_only_with_the_spec(v: _View, before: _View) -> Iterator[str]:
    new, old = v.generation, before.generation
    if not (_is_int(new) and _is_int(old)) or new == old:
        return
    if isinstance(new, int) and isinstance(old, int) and new < old:
        yield f"metadata.generation went back from {old} to {new}"
    elif v.obj.get("spec") == before.obj.get("spec") and not (v.deleting and not before.deleting):
        # The apiserver itself bumps a custom resource's generation when it sets
        # deletionTimestamp; that is not a status write.
        yield f"metadata.generation moved {old} -> {new} without a spec change"


def _g15_the_write_ending_a_run_concludes_it(v: _View, before: _View) -> Iterator[str]:
    ended = before.status.get("currentUpdate") and not v.status.get("currentUpdate")
    if ended and v.reconciling_reason() == PROGRESSING:
        yield (
            "the write that ended the run (currentUpdate removed) left "
            "Reconciling=True/Progressing: it claims a run that is not happening"
        )


def _g16_deletion_writes_report_the_step(v: _View, before: _View) -> Iterator[str]:
    if not v.deleting or v.status == before.status:
        return
    step = next((v.condition(t) for t in (RECONCILING, STALLED) if v.is_true(t)), None)
    if step is None:
        yield "a status write during deletion has neither Reconciling=True nor Stalled=True"
    elif not str(step.get("message") or "").strip():
        yield f"{step.get('type')} has no message naming the finalizer or what blocks it"
    if v.is_true(READY):
        yield "Ready=True is written while the Stack is being deleted"


def _g17_requests_are_handled_with_the_conclusion(v: _View, before: _View) -> Iterator[str]:
    handled = _handled(v.status)
    if handled is None or handled == _handled(before.status):
        return
    ready = v.state(READY)
    if ready not in {"True", "False"} or v.reconciling_reason() == PROGRESSING:
        yield (
            f"request {handled!r} is marked handled in a write that does not conclude the run "
            f"(Ready={ready}, Reconciling reason {v.reconciling_reason()})"
        )


TRANSITIONS: tuple[tuple[str, PairRule], ...] = (
    ("G1", _g1_first_write_starts_the_work),
    ("G10", _g10_transition_time_moves_iff_status_moves),
    ("G13", _g13_no_heartbeat_writes),
    ("G14", _g14_generation_moves_only_with_the_spec),
    ("G15", _g15_the_write_ending_a_run_concludes_it),
    ("G16", _g16_deletion_writes_report_the_step),
    ("G17", _g17_requests_are_handled_with_the_conclusion),
)


# -- final-state rules ---------------------------------------------------------------------


def _g1_a_status_exists(v: _View) -> Iterator[str]:
    if not v.written:
        yield (
            f"no status was ever written (status {dict(v.status)}): kstatus reads a Stack "
            "without status as Current, and one with only the CRD's default as InProgress forever"
        )


def _g3_ready_is_about_this_generation(v: _View) -> Iterator[str]:
    missing = [str(c.get("type")) for c in v.conditions if "observedGeneration" not in c]
    if missing:
        yield f"conditions without observedGeneration: {', '.join(missing)}"
    if not v.is_true(READY):
        return
    observed = v.status.get("observedGeneration")
    if not _same_int(observed, v.generation):
        yield f"Ready=True with status.observedGeneration {observed!r} != {v.generation!r}"
    stale = [
        f"{c.get('type')}={c['observedGeneration']!r}"
        for c in v.conditions
        if "observedGeneration" in c and not _same_int(c["observedGeneration"], v.generation)
    ]
    if stale:
        yield f"Ready=True with conditions of other generations: {', '.join(stale)}"
    last = _mapping(v.status.get("lastUpdate"))
    if "generation" in last and not _same_int(last["generation"], v.generation):
        yield (
            f"Ready=True claims generation {v.generation!r}, but status.lastUpdate ran "
            f"generation {last['generation']!r}: that spec was never applied"
        )
    if last.get("state") not in {None, "succeeded"}:
        yield f"Ready=True while status.lastUpdate.state is {last.get('state')!r}"


def _g6_reconciling_is_not_ready(v: _View) -> Iterator[str]:
    if v.is_true(RECONCILING) and v.is_true(READY):
        yield "Reconciling=True and Ready=True in a final status"


def _g8_ready_summarises_the_abnormal_conditions(v: _View) -> Iterator[str]:
    ready = v.condition(READY)
    if ready is None:
        return
    if ready.get("status") == "True":
        present = [t for t in (STALLED, RECONCILING) if v.condition(t) is not None]
        if present:
            yield f"Ready=True while {' and '.join(present)} is present"
        return
    stalled = v.condition(STALLED)
    if stalled is not None and stalled.get("status") == "True":
        same = (ready.get("reason"), ready.get("message")) == (
            stalled.get("reason"),
            stalled.get("message"),
        )
        if not same:
            yield f"Ready ({ready.get('reason')}) does not carry Stalled's reason and message"
        return
    reason = v.reconciling_reason()
    if reason not in {None, PROGRESSING_WITH_RETRY} and ready.get("reason") != reason:
        yield f"Ready's reason {ready.get('reason')!r} differs from Reconciling's {reason!r}"


def _g9_ready_false_carries_the_error(v: _View) -> Iterator[str]:
    ready = v.condition(READY)
    if ready is None or ready.get("status") != "False":
        return
    message = ready.get("message")
    if not isinstance(message, str) or not message.strip():
        yield "Ready=False has no message: the underlying error is missing"
    elif BARE_COUNT.fullmatch(message):
        yield f"Ready=False says only {message!r}, not the underlying error"


def _g15_no_stale_reconciling(v: _View) -> Iterator[str]:
    if v.reconciling_reason() == PROGRESSING and not v.status.get("currentUpdate"):
        yield "Reconciling=True/Progressing with no status.currentUpdate: no run is in flight"


def _g17_request_annotation_is_handled(v: _View) -> Iterator[str]:
    annotations = _mapping(v.metadata.get("annotations"))
    requested = [str(annotations[a]) for a in REQUEST_ANNOTATIONS if annotations.get(a)]
    if requested and not v.suspended and _handled(v.status) not in requested:
        yield f"reconcile request {requested} is not handled (status: {_handled(v.status)!r})"


def _g18_kstatus_and_argo_agree_with_the_conditions(v: _View) -> Iterator[str]:
    computed = kstatus.read_status(v.obj).status
    assessed = argo_health.health(v.obj).status
    expected = expected_outcome(v.obj)
    if expected is None:
        yield (
            f"final status is none of Stalled=True, Reconciling=True, Ready=True "
            f"(kstatus {computed}, Argo {assessed}): nothing is decided and no one is working"
        )
        return
    if (computed, assessed) != expected:
        yield (
            f"kstatus {computed} / Argo {assessed}, but the conditions mean "
            f"{expected[0]} / {expected[1]}"
        )


FINAL: tuple[tuple[str, Rule], ...] = (
    ("G1", _g1_a_status_exists),
    ("G3", _g3_ready_is_about_this_generation),
    ("G6", _g6_reconciling_is_not_ready),
    ("G8", _g8_ready_summarises_the_abnormal_conditions),
    ("G9", _g9_ready_false_carries_the_error),
    ("G15", _g15_no_stale_reconciling),
    ("G17", _g17_request_annotation_is_handled),
    ("G18", _g18_kstatus_and_argo_agree_with_the_conditions),
)
FINAL_DELETING: tuple[tuple[str, Rule], ...] = (
    ("G18", _g18_kstatus_and_argo_agree_with_the_conditions),
)


# -- helpers -------------------------------------------------------------------------------


def _mapping(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_int(left: object, right: object) -> bool:
    return _is_int(left) and _is_int(right) and left == right


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _parse_time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not TIME_PATTERN.fullmatch(value):
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None


def _before(first: object, second: object, slack: datetime.timedelta) -> bool:
    """Whether time ``first`` is more than ``slack`` before ``second`` (False if unreadable)."""
    a, b = _parse_time(first), _parse_time(second)
    return a is not None and b is not None and b - a > slack


def _mask_times(value: object, key: str = "") -> object:
    """``value`` with every RFC 3339 time replaced by a marker (request tokens kept)."""
    if isinstance(value, Mapping):
        return {k: _mask_times(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_times(v, key) for v in value]
    is_token = key in {*HANDSHAKE, "reconcileRequest"}
    if isinstance(value, str) and not is_token and _parse_time(value) is not None:
        return "<time>"
    return value


def _changed_paths(old: object, new: object, path: str) -> Iterator[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for k in sorted({*old, *new}, key=str):
            yield from _changed_paths(old.get(k), new.get(k), f"{path}.{k}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _changed_paths(a, b, f"{path}[{index}]")
    elif old != new:
        yield path


def _handled(status: Obj) -> str | None:
    value = next((status[name] for name in HANDSHAKE if status.get(name)), None)
    return None if value is None else str(value)


def _same_object(view: _View, before: _View) -> bool:
    uid, old_uid = view.metadata.get("uid"), before.metadata.get("uid")
    if uid and old_uid:
        return bool(uid == old_uid)
    return view.key == before.key


# -- the watcher ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Observation:
    """One version of one Stack as the watcher saw it, and what ``check`` found in it."""

    event: str  # LISTED (a list or relist), ADDED, MODIFIED or DELETED
    obj: Obj
    violations: tuple[Violation, ...]
    after_gap: bool = False  # versions may have been missed just before this one
    seen_at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def resource_version(self) -> str:
        """The version's ``metadata.resourceVersion``."""
        return str(_mapping(self.obj.get("metadata")).get("resourceVersion", ""))


class StackWatcher:
    """Records and checks every version of every ``stacks.pulumi.com`` in one namespace.

    Entering lists the namespace's Stacks, then a thread watches from the list's
    resourceVersion: each watch ends after ``timeout_seconds`` and is renewed from the last
    resourceVersion seen (bookmarks included), so no version is lost; a 410 Gone relists
    (versions may be missed then, so the next one is not compared with the last recorded);
    other errors pause briefly and watch again from the last resourceVersion. Every version
    is deep-copied and checked against the one before it as it arrives (intermediate
    rules); ``final_check`` applies the final-state rules to the last version of each Stack
    that still exists. Exiting stops the watch (closing its socket; the ProtocolError that
    a closed stream raises is swallowed) and joins the thread within ``join_timeout``.

    All methods are thread-safe. ``observe`` is what the thread calls for each version; it
    is public so that unit tests can feed versions without a cluster.
    """

    RETRY_DELAY = 0.5  # seconds after a failed watch or list before the next attempt

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        *,
        timeout_seconds: int = 30,
        join_timeout: float = 10.0,
    ) -> None:
        """Prepare a watcher; nothing runs until ``start`` (or ``with``)."""
        self._api = client.CustomObjectsApi(api_client)
        self._namespace = namespace
        self._timeout = timeout_seconds
        self._join_timeout = join_timeout
        self._lock = threading.Condition()
        self._history: dict[str, list[Observation]] = {}  # name -> versions, oldest first
        self._gone: set[str] = set()  # names whose last event was a deletion
        self._errors: list[str] = []  # failures that may have lost versions
        self._restarts = 0  # watches renewed after their timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None  # the stream in flight, for stop()

    def __enter__(self) -> Self:
        """Start watching."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop watching."""
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """List the namespace's Stacks, then watch them from a thread."""
        if self._thread is not None:
            raise RuntimeError("StackWatcher.start() called twice")
        resource_version = self._list(gap=False)
        self._thread = threading.Thread(
            target=self._run,
            args=(resource_version,),
            name=f"stack-watcher-{self._namespace}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the watch and join the thread (a thread still alive is recorded as an error)."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        thread.join(0)
        waited = 0.0
        while thread.is_alive() and waited < self._join_timeout:
            stream = self._watch
            if stream is not None:  # re-sent: a stream may start just after the first try
                stream.stop()
            thread.join(0.1)
            waited += 0.1
        if thread.is_alive():
            self._fail(f"the watch thread did not stop within {self._join_timeout} s")

    def _run(self, resource_version: str) -> None:
        relist = False
        try:
            while not self._stop.is_set():
                try:
                    if relist:
                        resource_version, relist = self._list(gap=True), False
                    else:
                        resource_version = self._watch_once(resource_version)
                except client.ApiException as err:
                    relist = err.status == 410  # our resourceVersion expired: relist
                    if not relist:
                        self._pause(err)
                except (HTTPError, OSError) as err:  # ProtocolError: a stream closed by stop()
                    self._pause(err)
        except Exception as err:  # noqa: BLE001 - the thread must report its death, not hide it
            self._fail(f"the watch thread failed: {err!r}")

    def _pause(self, err: Exception) -> None:
        if self._stop.is_set():
            return
        log.warning("Stack watch failed; watching again: %s", err)
        self._stop.wait(self.RETRY_DELAY)

    def _list(self, *, gap: bool) -> str:
        listing = cast(
            "Obj",
            self._api.list_namespaced_custom_object(GROUP, VERSION, self._namespace, PLURAL),
        )
        items = [item for item in listing.get("items") or () if isinstance(item, Mapping)]
        names = {str(_mapping(item.get("metadata")).get("name")) for item in items}
        with self._lock:
            self._gone.update(set(self._history) - names)
        for item in items:
            if not self._recorded(item):
                self.observe("LISTED", item, gap=gap)
        return str(_mapping(listing.get("metadata")).get("resourceVersion", ""))

    def _watch_once(self, resource_version: str) -> str:
        stream = watch.Watch()
        self._watch = stream
        try:
            if self._stop.is_set():  # stop() may have run before self._watch was set
                return resource_version
            for event in stream.stream(
                self._api.list_namespaced_custom_object,
                GROUP, VERSION, self._namespace, PLURAL,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._timeout,
                _request_timeout=(10, self._timeout + 30),
            ):  # fmt: skip
                raw: Obj = event["raw_object"]
                resource_version = str(_mapping(raw.get("metadata")).get("resourceVersion", ""))
                if event["type"] != "BOOKMARK":
                    self.observe(str(event["type"]), raw)
        finally:
            self._watch = None
        if not self._stop.is_set():
            with self._lock:
                self._restarts += 1
        return resource_version

    def _fail(self, message: str) -> None:
        log.error("StackWatcher: %s", message)
        with self._lock:
            self._errors.append(message)

    # -- recording ---------------------------------------------------------------------

    def observe(self, event: str, obj: Obj, *, gap: bool = False) -> None:
        """Record one version and check it against the version recorded before it.

        ``gap``: versions may have been missed just before this one (a relist after 410),
        so it is checked on its own.
        """
        snapshot = copy.deepcopy(dict(obj))
        name = str(_mapping(snapshot.get("metadata")).get("name"))
        with self._lock:
            history = self._history.setdefault(name, [])
            previous = history[-1].obj if history and not gap else None
            violations = tuple(check(snapshot, previous))
            history.append(Observation(event, snapshot, violations, after_gap=gap))
            if event == "DELETED":
                self._gone.add(name)
            else:
                self._gone.discard(name)
            self._lock.notify_all()

    def _recorded(self, obj: Obj) -> bool:
        metadata = _mapping(obj.get("metadata"))
        with self._lock:
            history = self._history.get(str(metadata.get("name")), [])
            return bool(history) and history[-1].resource_version == str(
                metadata.get("resourceVersion")
            )

    # -- reading -----------------------------------------------------------------------

    @property
    def restarts(self) -> int:
        """How many watches ended at their timeout and were renewed."""
        with self._lock:
            return self._restarts

    def names(self) -> list[str]:
        """Names of every Stack seen, sorted."""
        with self._lock:
            return sorted(self._history)

    def observations(self, name: str) -> list[Observation]:
        """Every recorded version of Stack ``name``, oldest first."""
        with self._lock:
            return list(self._history.get(name, ()))

    def transitions(self, since: float = 0.0) -> collections.Counter[tuple[str, str, str]]:
        """Condition flips seen in versions recorded at or after ``since`` (monotonic time).

        A flip is a condition that appeared or changed ``status`` from one version to the
        next — exactly when ``lastTransitionTime`` must move — counted by (type, new status,
        new reason) over all Stacks, as the operator's transition counter counts them.
        Versions after a gap are not compared.
        """
        flips: collections.Counter[tuple[str, str, str]] = collections.Counter()
        with self._lock:
            histories = [list(h) for h in self._history.values()]
        for history in histories:
            for before, after in itertools.pairwise(history):
                if after.seen_at < since or after.after_gap or after.event == "DELETED":
                    continue
                old, new = _View.of(before.obj), _View.of(after.obj)
                for type_ in (READY, RECONCILING, STALLED):
                    now = new.condition(type_)
                    if now is not None and old.state(type_) != now.get("status"):
                        flips[(type_, str(now.get("status")), str(now.get("reason")))] += 1
        return flips

    def versions(self, name: str) -> list[Obj]:
        """Every recorded object version of Stack ``name``, oldest first."""
        return [o.obj for o in self.observations(name)]

    def wait_for(self, name: str, resource_version: str, timeout: float = 10.0) -> None:
        """Block until version ``resource_version`` of ``name`` is recorded (else TimeoutError)."""

        def seen() -> bool:
            return any(o.resource_version == resource_version for o in self._history.get(name, ()))

        with self._lock:
            if not self._lock.wait_for(seen, timeout):
                msg = f"the watcher did not see {name} at resourceVersion {resource_version}"
                raise TimeoutError(msg)

    def violations(self) -> list[Violation]:
        """Violations found in the versions as they arrived (intermediate and transition rules)."""
        with self._lock:
            return [v for history in self._history.values() for o in history for v in o.violations]

    def final_check(self) -> list[Violation]:
        """Final-state rules (and G18, G17 history) on the last version of each existing Stack."""
        with self._lock:
            alive = {n: list(h) for n, h in self._history.items() if n not in self._gone}
        found: list[Violation] = []
        for name in sorted(alive):
            history = alive[name]
            found += check_final(history[-1].obj)
            found += _unhandled_request(history)
        return found

    def assert_clean(self, *, final: bool = True) -> None:
        """Fail listing every violation (and watcher failure); ``final`` adds ``final_check``."""
        found = self.violations() + (self.final_check() if final else [])
        with self._lock:
            found += [Violation(self._namespace, "-", "watch", e) for e in self._errors]
        if found:
            lines = "\n".join(f"  {v}" for v in found)
            msg = f"{len(found)} status invariant violation(s):\n{lines}"
            raise AssertionError(msg)


def _unhandled_request(history: list[Observation]) -> list[Violation]:
    """G17 across versions: the request annotation value that changed last is the handled one.

    Only versions of the last incarnation (its uid) count; suspended or deleting Stacks are
    exempt (requests are not handled while suspended, as with ``flux reconcile``).
    """
    last = _View.of(history[-1].obj)
    latest: tuple[str, str, str] | None = None  # annotation, value, resourceVersion set at
    values: dict[str, object] = {}
    for observation in history:
        view = _View.of(observation.obj)
        if not _same_object(last, view):
            continue
        annotations = _mapping(view.metadata.get("annotations"))
        for name in REQUEST_ANNOTATIONS:
            value = annotations.get(name)
            if value and value != values.get(name):
                latest = (name, str(value), view.resource_version)
            values[name] = value
    if latest is None or last.suspended or last.deleting or _handled(last.status) == latest[1]:
        return []
    name, value, since = latest
    detail = (
        f"the latest reconcile request {name}={value!r} (resourceVersion {since}) was never "
        f"handled: status records {_handled(last.status)!r}"
    )
    return [Violation(last.key, last.resource_version, "G17", detail)]
