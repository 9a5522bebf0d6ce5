"""The status contract as executable rules, judged on object versions of a Stack.

Role: the judging half of the independent status witness (``tests.status.invariants`` is
the recording half). ``check`` judges one version of a Stack, optionally against the version
seen just before it; ``check_final`` judges a version as the settled state;
``unhandled_request`` judges a whole history. The rules themselves are in
``tests.status.write_rules`` and ``tests.status.final_rules``; each ``Violation`` names the
rule it breaks by its number in ``docs/status-contract.md``.

When each rule is checked. Some rules hold for every status the operator writes, including
intermediate ones; the rules about how a write looks or changes hold for every write too;
the remaining state rules hold only once a Stack has settled.

Whose versions are judged. The witness blames the operator only for what it controls: its
status writes. The every-version rules judge a version whose status differs from the one
before it (a write), and the first version seen of a Stack (or the first after a gap), whose
author is unknown. A version with the status of the one before it was made by someone else:
a user's spec or metadata edit, the finalizer patch, the apiserver setting
deletionTimestamp. It shows the old status against the new metadata (a user who edits a
Stalled Stack makes a version with Stalled=True and a stale observedGeneration, which kstatus
rightly reads InProgress), so the status rules are not applied to it again; the transition
rules still are (rule 14 judges exactly such versions). The CRD defaults a new Stack's
status to ``{observedGeneration: 0}``: that is the apiserver's, not a write, and counts as
no status.

Every version (status contract rule numbers):
  1 a written status has ``observedGeneration`` and Ready;
  2 observedGeneration (of the status and of each condition) is an int in 0..generation;
  4 never Reconciling and Stalled together;
  5 Stalled=True ⇒ Ready=False and observedGeneration == generation;
  6 Ready=Unknown ⇒ Reconciling=True;
  7 Reconciling and Stalled are only ever True (removed, never False);
  10 lastTransitionTime is UTC; 11 schema validity; 12 order Stalled, Reconciling, Ready,
  others; 17 the two handshake fields agree.
Every version against the one before it (same uid):
  1 the first status write (after none, or the CRD's default) has Ready Unknown/False and
  Reconciling or Stalled True;
  10 lastTransitionTime stays while status stays; a flip never takes it back by more than
  the clock's one-second resolution (below);
  13 no idle write that changes only timestamps;
  14 generation never decreases and moves only with the spec;
  15 the write that ends a run (drops ``currentUpdate``) concludes it;
  16 a status write during deletion reports the deletion step;
  17 a request is marked handled only in a write that concludes the run.
Final, not being deleted (``final=True``, ``check_final``):
  1 a status was written (the CRD's default is not one);
  3 every condition carries observedGeneration; Ready=True ⇒ status, conditions and
  ``lastUpdate`` are all about the current generation;
  6 Reconciling=True ⇒ Ready≠True;
  8 Ready=True ⇒ no Stalled/Reconciling present; otherwise Ready carries Stalled's reason and
  message, or Reconciling's reason (except ProgressingWithRetry: then Ready has the error);
  9 Ready=False carries the error, not a bare count;
  15 Reconciling=True/Progressing only while ``currentUpdate`` names the run;
  17 a request annotation is handled (unless suspended);
  18 kstatus and Argo CD read the status as its conditions mean (``expected_outcome``):
  Stalled=True → kstatus Failed / Argo Degraded; else Reconciling=True → InProgress /
  Progressing; else Ready=True → Current / Healthy; anything else is a violation (no one
  is working on it and nothing is decided).
Final, being deleted: 18 only (kstatus Terminating, Argo Progressing).
History (``unhandled_request``): 17, the request annotation value that changed last is the
handled one.

Left to other tests (see ``docs/status-contract.md``): rule 13's "zero PATCHes" (an audit
of API calls), rule 15's crash simulation, rule 16's metrics and events, and rules 19-28
(events and metrics). Reasons are this project's (``Progressing``, ``ProgressingWithRetry``).

Rule 10 and the clock. metav1.Time has one-second resolution: a flip within the second the
condition last changed keeps the string, and two flips inside one second may carry clock
readings taken in either order (a time read when the reconciler decided, written just after
a write stamped later in the same second), so the strings of consecutive flips may go back
by one second. Only a step back of more than one second is a lie; a time that moves while
the status stays is always one (no clock is involved).

Guarantees: pure functions, never raising on a malformed object (they report it), naming
every violation by object, resourceVersion, rule number and detail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from tests.status.final_rules import FINAL, FINAL_DELETING, expected_outcome
from tests.status.status_view import (
    REQUEST_ANNOTATIONS,
    Obj,
    StatusView,
    handled_request,
    mapping_of,
    same_object,
)
from tests.status.write_rules import EVERY_VERSION, TRANSITIONS, PairRule, Rule

__all__ = ["Violation", "check", "check_final", "expected_outcome", "unhandled_request"]


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: which object (``namespace/name``), which version, which rule, why.

    ``rule`` is the rule's number in ``docs/status-contract.md``.
    """

    key: str
    resource_version: str
    rule: int
    detail: str

    def __str__(self) -> str:
        """One line: object, resourceVersion, rule, detail."""
        where = f"{self.key} (resourceVersion {self.resource_version})"
        return f"{where} status contract rule {self.rule}: {self.detail}"


# -- public API ----------------------------------------------------------------------------


def check(obj: Obj, previous: Obj | None = None, *, final: bool = False) -> list[Violation]:
    """Every rule that applies to ``obj`` (see the module docstring's table).

    ``previous`` is the version of the same object seen just before ``obj`` (ignored if it
    belongs to another incarnation, i.e. another uid); ``final`` adds the final-state rules.
    The every-version rules judge ``obj`` only when its status differs from ``previous``'s
    (or there is no previous version to compare with): an unchanged status is not a write.
    """
    view = StatusView.of(obj)
    before = None if previous is None else StatusView.of(previous)
    if before is not None and not same_object(view, before):
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
    view = StatusView.of(obj)
    return _apply(view, FINAL_DELETING if view.deleting else FINAL)


def _apply(view: StatusView, rules: Iterable[tuple[int, Rule]]) -> list[Violation]:
    return [
        Violation(view.key, view.resource_version, rule_id, detail)
        for rule_id, rule in rules
        for detail in rule(view)
    ]


def _apply_pairs(
    view: StatusView, before: StatusView, rules: Iterable[tuple[int, PairRule]]
) -> list[Violation]:
    return [
        Violation(view.key, view.resource_version, rule_id, detail)
        for rule_id, rule in rules
        for detail in rule(view, before)
    ]


def unhandled_request(versions: Sequence[Obj]) -> list[Violation]:
    """Rule 17 across ``versions`` of one Stack (oldest first): the latest request is handled.

    The request annotation value that changed last must be the one the status records.

    Only versions of the last incarnation (its uid) count; suspended or deleting Stacks are
    exempt (requests are not handled while suspended, as with ``flux reconcile``).
    """
    last = StatusView.of(versions[-1])
    latest: tuple[str, str, str] | None = None  # annotation, value, resourceVersion set at
    values: dict[str, object] = {}
    for version in versions:
        view = StatusView.of(version)
        if not same_object(last, view):
            continue
        annotations = mapping_of(view.metadata.get("annotations"))
        for name in REQUEST_ANNOTATIONS:
            value = annotations.get(name)
            if value and value != values.get(name):
                latest = (name, str(value), view.resource_version)
            values[name] = value
    if (
        latest is None
        or last.suspended
        or last.deleting
        or handled_request(last.status) == latest[1]
    ):
        return []
    name, value, since = latest
    detail = (
        f"the latest reconcile request {name}={value!r} (resourceVersion {since}) was never "
        f"handled: status records {handled_request(last.status)!r}"
    )
    return [Violation(last.key, last.resource_version, 17, detail)]
