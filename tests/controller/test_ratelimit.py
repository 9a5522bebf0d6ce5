"""Rate limiters: exponential per-item backoff, the global token bucket, and max-of."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)


class StubLimiter:
    """A limiter that always answers the same and records what it was told to forget."""

    def __init__(self, delay: float, requeues: int) -> None:
        """Answer `delay` and `requeues` to every question."""
        self.delay = delay
        self.requeues = requeues
        self.asked: list[str] = []
        self.forgotten: list[str] = []

    def when(self, item: str) -> float:
        """Record the question and return the fixed delay."""
        self.asked.append(item)
        return self.delay

    def forget(self, item: str) -> None:
        """Record the item."""
        self.forgotten.append(item)

    def num_requeues(self, item: str) -> int:
        """Return the fixed count."""
        del item
        return self.requeues


def whens(limiter: RateLimiter[str], item: str, count: int) -> list[float]:
    """Return the delays of `count` consecutive when(item) calls."""
    return [limiter.when(item) for _ in range(count)]


@pytest.mark.parametrize(
    ("base", "max_delay", "expected"),
    [
        pytest.param(0.005, 1000.0, [0.005, 0.01, 0.02, 0.04, 0.08], id="controller-default"),
        pytest.param(0.001, 0.004, [0.001, 0.002, 0.004, 0.004], id="capped-at-max"),
        pytest.param(1.0, 1.0, [1.0, 1.0], id="base-equals-max"),
        pytest.param(0.0, 10.0, [0.0, 0.0], id="zero-base"),
    ],
)
def test_exponential_doubles_per_failure_up_to_max(
    base: float, max_delay: float, expected: list[float]
) -> None:
    """Each failure doubles the delay from base until max_delay caps it."""
    limiter = ItemExponentialFailureRateLimiter[str](base, max_delay)
    assert whens(limiter, "one", len(expected)) == expected


def test_exponential_default_reaches_1000_seconds_after_18_failures() -> None:
    """The default 5 ms backoff is 655.36 s at the 18th call and capped at 1000 s from the 19th."""
    limiter = ItemExponentialFailureRateLimiter[str]()
    delays = whens(limiter, "one", 20)
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0, 1000.0]


def test_exponential_never_overflows() -> None:
    """Thousands of failures keep returning the cap instead of raising OverflowError."""
    limiter = ItemExponentialFailureRateLimiter[str]()
    assert whens(limiter, "one", 3000)[-1] == 1000.0
    assert limiter.num_requeues("one") == 3000


def test_exponential_tracks_items_separately() -> None:
    """One item's failures do not lengthen another item's backoff."""
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)
    whens(limiter, "one", 3)
    assert limiter.when("two") == 0.005
    assert limiter.num_requeues("one") == 3
    assert limiter.num_requeues("two") == 1


def test_exponential_forget_resets_backoff() -> None:
    """After forget the count is zero and the next delay is base again."""
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)
    whens(limiter, "one", 4)
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
    assert limiter.when("one") == 0.005


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        pytest.param(0.015, [0.005, 0.01, 0.015, 0.015], id="lower-than-max"),
        pytest.param(0.08, [0.005, 0.01, 0.02, 0.04, 0.08, 0.08], id="higher-than-max"),
        pytest.param(0.0, [0.0, 0.0], id="zero"),
    ],
)
def test_exponential_per_item_cap_replaces_max(cap: float, expected: list[float]) -> None:
    """set_max_delay caps that item's backoff instead of max_delay and leaves others alone."""
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 0.02)
    limiter.set_max_delay("one", cap)
    assert whens(limiter, "one", len(expected)) == expected
    assert whens(limiter, "two", 4) == [0.005, 0.01, 0.02, 0.02]


def test_exponential_forget_clears_per_item_cap() -> None:
    """After forget the item is capped by max_delay again."""
    limiter = ItemExponentialFailureRateLimiter[str](0.005, 1000.0)
    limiter.set_max_delay("one", 0.01)
    whens(limiter, "one", 3)
    limiter.forget("one")
    assert whens(limiter, "one", 3) == [0.005, 0.01, 0.02]


@pytest.mark.parametrize(
    ("base", "max_delay"),
    [
        pytest.param(-0.1, 1.0, id="negative-base"),
        pytest.param(0.1, -1.0, id="negative-max"),
    ],
)
def test_exponential_rejects_negative_delays(base: float, max_delay: float) -> None:
    """Negative base or max delays are refused at construction."""
    with pytest.raises(ValueError, match="negative"):
        ItemExponentialFailureRateLimiter[str](base, max_delay)


def test_exponential_rejects_negative_per_item_cap() -> None:
    """A negative per-item cap is refused."""
    limiter = ItemExponentialFailureRateLimiter[str]()
    with pytest.raises(ValueError, match="negative"):
        limiter.set_max_delay("one", -1.0)


def test_bucket_allows_burst_then_spaces_calls_at_rate() -> None:
    """A full bucket lets burst calls through, then each call waits one more 1/qps."""
    limiter = BucketRateLimiter[str](qps=10.0, burst=3, clock=FakeClock())
    assert whens(limiter, "one", 3) == [0.0, 0.0, 0.0]
    assert whens(limiter, "one", 3) == pytest.approx([0.1, 0.2, 0.3])


def test_bucket_refills_with_time_up_to_burst() -> None:
    """Time refills tokens at qps, never beyond burst."""
    clock = FakeClock()
    limiter = BucketRateLimiter[str](qps=10.0, burst=3, clock=clock)
    whens(limiter, "one", 5)  # Three tokens used, two borrowed.
    clock.step(0.2)  # Pays back the two borrowed tokens.
    assert limiter.when("one") == pytest.approx(0.1)
    clock.step(60.0)
    assert whens(limiter, "one", 4) == pytest.approx([0.0, 0.0, 0.0, 0.1])


def test_bucket_is_shared_by_all_items_and_tracks_none() -> None:
    """Every item draws from the same bucket; forget gives nothing back; num_requeues is 0."""
    limiter = BucketRateLimiter[str](qps=1.0, burst=1, clock=FakeClock())
    assert limiter.when("one") == 0.0
    limiter.forget("one")
    assert limiter.when("two") == pytest.approx(1.0)
    assert limiter.num_requeues("one") == 0
    assert limiter.num_requeues("two") == 0


@pytest.mark.parametrize(
    ("qps", "burst"),
    [
        pytest.param(0.0, 1, id="zero-qps"),
        pytest.param(1.0, 0, id="zero-burst"),
    ],
)
def test_bucket_rejects_useless_settings(qps: float, burst: int) -> None:
    """A bucket that could never hand out a token is refused."""
    with pytest.raises(ValueError, match="qps must be positive"):
        BucketRateLimiter[str](qps=qps, burst=burst, clock=FakeClock())


def test_max_of_returns_longest_delay_and_asks_everyone() -> None:
    """when() is the maximum delay, and every limiter records the attempt."""
    short, long_ = StubLimiter(0.5, 1), StubLimiter(2.0, 7)
    limiter = MaxOfRateLimiter[str](short, long_)
    assert limiter.when("one") == 2.0
    assert short.asked == long_.asked == ["one"]


def test_max_of_num_requeues_is_maximum() -> None:
    """num_requeues() is the largest count any limiter reports."""
    limiter = MaxOfRateLimiter[str](StubLimiter(0.5, 1), StubLimiter(2.0, 7), StubLimiter(0, 3))
    assert limiter.num_requeues("one") == 7


def test_max_of_forgets_in_every_limiter() -> None:
    """forget() reaches every limiter."""
    first, second = StubLimiter(0.5, 1), StubLimiter(2.0, 7)
    MaxOfRateLimiter[str](first, second).forget("one")
    assert first.forgotten == second.forgotten == ["one"]


def test_max_of_needs_a_limiter() -> None:
    """A max-of nothing is refused."""
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter[str]()


def test_default_controller_limiter_is_exponential_until_bucket_runs_dry() -> None:
    """The default gives 5 ms per new item for 100 calls, then the 10 qps bucket dominates."""
    limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())
    first_hundred = [limiter.when(f"item-{n}") for n in range(100)]
    assert first_hundred == [0.005] * 100
    assert limiter.when("item-100") == pytest.approx(0.1)
    assert limiter.num_requeues("item-0") == 1


def test_default_controller_limiter_backs_off_one_item_to_1000_seconds() -> None:
    """One failing item backs off 5 ms, 10 ms, 20 ms ... and stays at 1000 s."""
    limiter: RateLimiter[str] = default_controller_rate_limiter(FakeClock())
    delays = whens(limiter, "one", 25)
    assert delays[:3] == [0.005, 0.01, 0.02]
    assert delays[-1] == 1000.0
    limiter.forget("one")
    assert limiter.num_requeues("one") == 0
