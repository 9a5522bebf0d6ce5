"""Rate limiters that decide how long a failed key waits before it is retried.

The `RateLimiter` protocol and its implementations follow client-go's
`util/workqueue/default_rate_limiters.go`: `when(item)` returns the delay in seconds
for the next retry (and records the attempt), `forget(item)` stops tracking the item,
`num_requeues(item)` reports how many failures are being tracked. Limiters compose with
`MaxOfRateLimiter`; `default_controller_rate_limiter()` is client-go's
`DefaultTypedControllerRateLimiter`.

Guarantees: every limiter is safe to call from several threads, never raises on
arithmetic overflow, and reads time (the token bucket only) from an injected `Clock`.
What they leave to callers: calling `forget(item)` once the item succeeds. "Remember to
call Forget! If you don't, you may end up tracking failures forever." (client-go).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controller.clock import Clock

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

# client-go's DefaultTypedControllerRateLimiter: per-item exponential backoff from 5 ms to
# 1000 s, and an overall 10 qps / burst 100 token bucket which "is only for retry speed and
# its only the overall factor (not per item)".
DEFAULT_BASE_DELAY = 0.005
DEFAULT_MAX_DELAY = 1000.0
DEFAULT_QPS = 10.0
DEFAULT_BURST = 100


class RateLimiter(Protocol[K_contra]):
    """Decides the retry delay of an item; the work queue's `add_rate_limited` asks it."""

    def when(self, item: K_contra) -> float:
        """Record a retry of `item` and return how many seconds it should wait first."""
        ...

    def forget(self, item: K_contra) -> None:
        """Stop tracking `item`: its next failure starts from scratch."""
        ...

    def num_requeues(self, item: K_contra) -> int:
        """Return how many failures of `item` are currently tracked."""
        ...


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Per-item exponential backoff: `base * 2**failures`, capped at the item's max delay.

    The first `when(item)` returns `base`, then `2*base`, `4*base`, ... up to the cap. The
    cap is `max_delay` unless `set_max_delay(item, seconds)` gave the item its own cap,
    which then replaces `max_delay` for that item (lower or higher) until `forget(item)`
    clears it together with the failure count. The reconciler uses this to honour a
    per-object retry ceiling. The computation never overflows: an exponent too large for
    a float simply yields the cap.
    """

    def __init__(
        self, base: float = DEFAULT_BASE_DELAY, max_delay: float = DEFAULT_MAX_DELAY
    ) -> None:
        """Back off from `base` seconds, doubling per failure, up to `max_delay` seconds."""
        if base < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self._base = base
        self._max_delay = max_delay
        self._lock = threading.Lock()
        # Guarded by _lock. _failures[item] is the number of when() calls since the last
        # forget(item); _caps[item] is the item's own cap, set by set_max_delay().
        self._failures: dict[K, int] = {}
        self._caps: dict[K, float] = {}

    def when(self, item: K) -> float:
        """Return `base * 2**failures` capped at the item's max delay, then count a failure."""
        with self._lock:
            exponent = self._failures.get(item, 0)
            self._failures[item] = exponent + 1
            cap = self._caps.get(item, self._max_delay)
        try:
            backoff = math.ldexp(self._base, exponent)
        except OverflowError:
            return cap
        return min(backoff, cap)

    def forget(self, item: K) -> None:
        """Drop the item's failure count and its own cap."""
        with self._lock:
            self._failures.pop(item, None)
            self._caps.pop(item, None)

    def num_requeues(self, item: K) -> int:
        """Return the number of `when(item)` calls since the last `forget(item)`."""
        with self._lock:
            return self._failures.get(item, 0)

    def set_max_delay(self, item: K, seconds: float) -> None:
        """Cap the item's backoff at `seconds` instead of `max_delay`, until `forget(item)`."""
        if seconds < 0:
            raise ValueError("max delay must not be negative")
        with self._lock:
            self._caps[item] = seconds


class BucketRateLimiter(Generic[K]):
    """One token bucket shared by all items: `qps` tokens per second, at most `burst` saved.

    Each `when()` takes a token, like golang.org/x/time/rate's `Reserve().Delay()`: while
    tokens are left the delay is 0; once the bucket is empty the token is borrowed from the
    future and the delay is the time until it refills, so back-to-back calls get 1/qps,
    2/qps, ... The bucket starts full. `forget` is a no-op and `num_requeues` is always 0:
    the bucket limits overall retry speed, not any one item.
    """

    def __init__(self, qps: float, burst: int, clock: Clock) -> None:
        """Refill `qps` tokens per second into a bucket of `burst` tokens, timed by `clock`."""
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        # Guarded by _lock: the token count (negative when borrowed) as of time _last.
        self._tokens = float(burst)
        self._last = clock.now()

    def when(self, item: K) -> float:
        """Take one token and return the seconds until it is actually available."""
        del item  # The bucket is global.
        with self._lock:
            now = max(self._clock.now(), self._last)
            refilled = self._tokens + (now - self._last) * self._qps
            self._tokens = min(refilled, float(self._burst)) - 1.0
            self._last = now
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def forget(self, item: K) -> None:
        """Do nothing: the bucket tracks no item."""
        del item

    def num_requeues(self, item: K) -> int:
        """Return 0: the bucket tracks no item."""
        del item
        return 0


class MaxOfRateLimiter(Generic[K]):
    """The most restrictive of several limiters.

    `when` asks every limiter (each records the attempt) and returns the longest delay;
    `num_requeues` is the maximum; `forget` forgets in all of them.
    """

    def __init__(self, *limiters: RateLimiter[K]) -> None:
        """Combine `limiters` (at least one)."""
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: K) -> float:
        """Return the longest delay of all limiters, asking each one."""
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: K) -> None:
        """Forget the item in every limiter."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """Return the largest requeue count of all limiters."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock) -> MaxOfRateLimiter[K]:
    """Return client-go's default: max of exponential (5 ms to 1000 s) and bucket (10 qps, 100).

    A reconciler that needs per-item caps builds the same pair itself and keeps the
    `ItemExponentialFailureRateLimiter` to call `set_max_delay` on.
    """
    exponential: ItemExponentialFailureRateLimiter[K] = ItemExponentialFailureRateLimiter(
        DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY
    )
    bucket: BucketRateLimiter[K] = BucketRateLimiter(DEFAULT_QPS, DEFAULT_BURST, clock)
    return MaxOfRateLimiter(exponential, bucket)
