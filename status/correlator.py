"""client-go's ``EventCorrelator`` (``tools/record/events_cache.go``), in Python.

Role: decide, for each event an operator posts, whether it becomes a new Event, raises the
count of an earlier one, or is dropped, with client-go's defaults:

- **Dedupe.** An event identical to a recent one (same involved object, type, reason,
  message and source) raises that Event's ``count`` and ``lastTimestamp`` instead of
  creating another object. The object's ``resourceVersion`` is not part of the identity
  (``ObjectRef.identity``), so status writes in between do not defeat it.
- **Aggregation.** Events about one object with the same type and reason but different
  messages are grouped. When a group reaches 10 distinct messages, no more than 600 s apart
  (the window slides with each event), that event and later ones become one Event whose
  message is ``"(combined from similar events): <latest message>"`` and whose count rises.
- **Spam filter.** Per involved object and source, a token bucket of burst 25 refilled at
  one token per 300 s. It runs after dedupe, so count-raising writes spend tokens too; an
  event over the limit is dropped, but dedupe has already counted it, so the next write
  that goes through carries the full count (client-go does the same).
- LRU caches of 4096 keys each for dedupe, aggregation and the buckets.

These are status contract rules 20 and 22 (``docs/status-contract.md``).

Guarantees: pure bookkeeping, no I/O; time comes from the caller (monotonic seconds). Not
thread-safe: the recorder calls it under its lock.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
from collections.abc import Callable
from typing import Generic, TypeVar

from controller.text import truncate
from status.eventref import ObjectRef

MAX_MESSAGE = 1024
"""Longest Event message, in UTF-8 bytes (so also in characters); longer ones are cut."""

CACHE_SIZE = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_REFILL = 1.0 / 300.0  # tokens per second
COMBINED_PREFIX = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")


def truncate_message(message: str) -> str:
    """``message`` cut to ``MAX_MESSAGE`` bytes of UTF-8, ending in "…" if cut."""
    return truncate(message, MAX_MESSAGE, "…")


@dataclasses.dataclass(frozen=True, slots=True)
class Occurrence:
    """One call of ``post()``, with its fields already cut to the API's limits."""

    ref: ObjectRef
    type: str
    reason: str
    message: str
    action: str
    stamp: datetime.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    """What the correlator decided to send: create ``name`` (count 1) or raise its count."""

    occurrence: Occurrence
    name: str
    count: int
    first: datetime.datetime

    @property
    def namespace(self) -> str:
        """The Event's namespace: the object's, or ``default`` for cluster-scoped objects."""
        return self.occurrence.ref.namespace or "default"


@dataclasses.dataclass(frozen=True, slots=True)
class _Seen:
    """Dedupe record: the Event that stands for a key, and how often the key occurred."""

    name: str
    count: int
    first: datetime.datetime


@dataclasses.dataclass(slots=True)
class _Group:
    """Aggregation record: distinct messages seen (insertion-ordered) and the last time."""

    messages: dict[str, None]
    last: float


@dataclasses.dataclass(slots=True)
class _Bucket:
    """Spam-filter token bucket: ``tokens`` available as of ``last``."""

    tokens: float
    last: float


class _LRU(Generic[K, V]):
    """A dict that forgets its least recently used key beyond ``size`` keys."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


class EventCorrelator:
    """Dedupe, aggregation and spam filter of client-go's ``EventCorrelator`` (module doc).

    Pure bookkeeping: no I/O, time from the ``now`` argument (monotonic seconds). Not
    thread-safe; the recorder calls it under its lock. ``name_for`` picks the name of each
    new Event.
    """

    def __init__(self, name_for: Callable[[ObjectRef], str]) -> None:
        """Start with empty caches."""
        self._name_for = name_for
        # Each keyed by tuples of strings; dedupe keys are tagged "event" or "aggregate".
        self._seen: _LRU[tuple[str, ...], _Seen] = _LRU(CACHE_SIZE)
        self._groups: _LRU[tuple[str, ...], _Group] = _LRU(CACHE_SIZE)
        self._buckets: _LRU[tuple[str, ...], _Bucket] = _LRU(CACHE_SIZE)

    def correlate(self, occurrence: Occurrence, now: float) -> Write | None:
        """The write for ``occurrence`` at ``now``, or None if the spam filter drops it."""
        occurrence, key = self._aggregate(occurrence, now)
        write = self._observe(occurrence, key)
        return write if self._allow(occurrence.ref, now) else None

    def _aggregate(self, occ: Occurrence, now: float) -> tuple[Occurrence, tuple[str, ...]]:
        group_key = (*occ.ref.identity(), occ.type, occ.reason)
        group = self._groups.get(group_key)
        if group is None or now - group.last > AGGREGATE_INTERVAL:
            group = _Group(messages={}, last=now)
        group.messages[occ.message] = None
        group.last = now
        self._groups.put(group_key, group)
        if len(group.messages) < AGGREGATE_MAX_EVENTS:
            return occ, ("event", *group_key, occ.message)
        # Keep the set below the threshold, so each new distinct message aggregates again
        # (client-go pops an arbitrary element; we pop the oldest).
        del group.messages[next(iter(group.messages))]
        combined = truncate_message(COMBINED_PREFIX + occ.message)
        return dataclasses.replace(occ, message=combined), ("aggregate", *group_key)

    def _observe(self, occ: Occurrence, key: tuple[str, ...]) -> Write:
        seen = self._seen.get(key)
        if seen is None:
            seen = _Seen(name=self._name_for(occ.ref), count=1, first=occ.stamp)
        else:
            seen = dataclasses.replace(seen, count=seen.count + 1)
        self._seen.put(key, seen)
        return Write(occurrence=occ, name=seen.name, count=seen.count, first=seen.first)

    def _allow(self, ref: ObjectRef, now: float) -> bool:
        key = ref.identity()
        bucket = self._buckets.get(key) or _Bucket(tokens=float(SPAM_BURST), last=now)
        bucket.tokens = min(float(SPAM_BURST), bucket.tokens + (now - bucket.last) * SPAM_REFILL)
        bucket.last = now
        allowed = bucket.tokens >= 1.0
        if allowed:
            bucket.tokens -= 1.0
        self._buckets.put(key, bucket)
        return allowed
