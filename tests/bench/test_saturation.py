"""The saturation bench reads the operator's own acknowledgment legs from its debug log."""

from __future__ import annotations

import json

from bench.readme import _saturation
from bench.saturation import acknowledgment_legs
from bench.stats import Summary


def line(key: str, **legs: float) -> str:
    """One ``Acknowledged`` JSON log line."""
    return json.dumps(
        {"event": "Acknowledged", "key": key, **{f"{k}_ms": v for k, v in legs.items()}}
    )


def test_only_the_sampled_stacks_acknowledgments_count() -> None:
    """Other events, other Stacks and non-JSON lines are skipped."""
    legs = {"delivery": 1.0, "queued": 2.0, "write": 30.0, "total": 33.0}
    log = "\n".join(
        [
            line("bench/s1", **legs),
            line("bench/other", delivery=9, queued=9, write=9, total=9),
            json.dumps({"event": "Run due", "key": "bench/s1"}),
            "not json",
            line("bench/s2", **{k: v * 2 for k, v in legs.items()}),
        ]
    )

    found = acknowledgment_legs(log, {"s1", "s2"})

    assert found == {
        "delivery": [1.0, 2.0],
        "queued": [2.0, 4.0],
        "write": [30.0, 60.0],
        "total": [33.0, 66.0],
    }


def summary(line: str) -> Summary:
    """A summary line parsed (it must parse)."""
    parsed = Summary.parse(line)
    assert parsed is not None
    return parsed


def test_the_row_shows_the_operators_share_when_measured() -> None:
    """With the op_* fields the result names the operator's own p99 and its legs."""
    fields = "stacks=1000 busy=2 samples=200 p50_ms=23 p99_ms=108 max_ms=225"
    own = "op_delivery_p99_ms=0.5 op_queued_p99_ms=0.2 op_write_p99_ms=60 op_total_p99_ms=61"
    _, _, result, _ = _saturation(summary(f"bench=saturation {fields} {own}"))
    assert "inside the operator, p99: 61 ms" in result
    assert "write 60" in result
    _, _, older, _ = _saturation(summary(f"bench=saturation {fields}"))
    assert "inside" not in older
