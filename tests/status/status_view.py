"""One version of a Stack as the status witness reads it: defensively, never raising.

Role: the reading half of the independent status witness (``tests.status.invariants``).
``StatusView`` exposes the metadata, status and conditions of one object version, and the
helpers below read and compare the values the rules look at. Nothing here shares code with
the operator (the constants are repeated on purpose), so the witness cannot inherit its bugs.

Guarantees: pure functions; a malformed object (a non-object status, a non-list
``conditions``, a non-object condition, a non-string time) reads as absent, never raises.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Iterator, Mapping
from typing import Any

Obj = Mapping[str, Any]

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
PROGRESSING, PROGRESSING_WITH_RETRY = "Progressing", "ProgressingWithRetry"
HANDSHAKE = ("observedReconcileRequest", "lastHandledReconcileAt")
"""The status fields recording the handled reconcile request (PKO's and Flux's names)."""
REQUEST_ANNOTATIONS = ("pulumi.com/reconciliation-request", "reconcile.fluxcd.io/requestedAt")
TIME_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


@dataclasses.dataclass(frozen=True)
class StatusView:
    """One object version, read defensively: a malformed status never raises."""

    obj: Obj
    metadata: Obj
    status: Obj
    conditions: tuple[Obj, ...]

    @classmethod
    def of(cls, obj: Obj) -> StatusView:
        """The view of ``obj`` (its non-object conditions are left out)."""
        status = mapping_of(obj.get("status"))
        raw = status.get("conditions")
        items = raw if isinstance(raw, list) else []
        conditions = tuple(c for c in items if isinstance(c, Mapping))
        return cls(obj, mapping_of(obj.get("metadata")), status, conditions)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.metadata.get('namespace', '')}/{self.metadata.get('name', '')}"

    @property
    def resource_version(self) -> str:
        """``metadata.resourceVersion`` ('' when absent)."""
        return str(self.metadata.get("resourceVersion", ""))

    @property
    def generation(self) -> object:
        """``metadata.generation`` as found (None when absent)."""
        return self.metadata.get("generation")

    @property
    def written(self) -> bool:
        """Whether the status is a write: present, and not the CRD's ``{observedGeneration: 0}``."""
        default = set(self.status) == {"observedGeneration"} and same_int(
            self.status["observedGeneration"], 0
        )
        return bool(self.status) and not default

    @property
    def deleting(self) -> bool:
        """Whether ``metadata.deletionTimestamp`` is set."""
        return bool(self.metadata.get("deletionTimestamp"))

    @property
    def suspended(self) -> bool:
        """Whether ``spec.suspend`` is true."""
        return mapping_of(self.obj.get("spec")).get("suspend") is True

    def condition(self, type_: str) -> Obj | None:
        """The first condition of ``type_`` (the one kstatus and Argo read)."""
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def state(self, type_: str) -> str | None:
        """The status of condition ``type_``, or None when absent."""
        found = self.condition(type_)
        return None if found is None else str(found.get("status"))

    def is_true(self, type_: str) -> bool:
        """Whether condition ``type_`` is present with status True."""
        return self.state(type_) == "True"

    def reconciling_reason(self) -> str | None:
        """The reason of Reconciling=True, or None when Reconciling is not True."""
        found = self.condition(RECONCILING)
        return str(found.get("reason")) if found and found.get("status") == "True" else None


def mapping_of(value: object) -> Obj:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer as JSON means it (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def same_int(left: object, right: object) -> bool:
    """Whether both are integers (see ``is_int``) and equal."""
    return is_int(left) and is_int(right) and left == right


def short(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 date-time with a zone (what metav1.Time writes), or None."""
    if not isinstance(value, str) or not TIME_PATTERN.fullmatch(value):
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None


def is_before(first: object, second: object, slack: datetime.timedelta) -> bool:
    """Whether time ``first`` is more than ``slack`` before ``second`` (False if unreadable)."""
    a, b = parse_time(first), parse_time(second)
    return a is not None and b is not None and b - a > slack


def mask_times(value: object, key: str = "") -> object:
    """``value`` with every RFC 3339 time replaced by a marker (request tokens kept)."""
    if isinstance(value, Mapping):
        return {k: mask_times(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_times(v, key) for v in value]
    is_token = key in {*HANDSHAKE, "reconcileRequest"}
    if isinstance(value, str) and not is_token and parse_time(value) is not None:
        return "<time>"
    return value


def changed_paths(old: object, new: object, path: str) -> Iterator[str]:
    """The paths (under ``path``) of every leaf that differs between ``old`` and ``new``."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for k in sorted({*old, *new}, key=str):
            yield from changed_paths(old.get(k), new.get(k), f"{path}.{k}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from changed_paths(a, b, f"{path}[{index}]")
    elif old != new:
        yield path


def handled_request(status: Obj) -> str | None:
    """The reconcile request ``status`` records as handled, or None."""
    value = next((status[name] for name in HANDSHAKE if status.get(name)), None)
    return None if value is None else str(value)


def same_object(view: StatusView, before: StatusView) -> bool:
    """Whether two versions are of one incarnation (same uid; same key if a uid is missing)."""
    uid, old_uid = view.metadata.get("uid"), before.metadata.get("uid")
    if uid and old_uid:
        return bool(uid == old_uid)
    return view.key == before.key
