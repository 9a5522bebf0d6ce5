"""The memory bench's row: RSS per fleet size, and tracing's cost when measured."""

from __future__ import annotations

from bench.readme import _memory
from bench.stats import Summary


def test_the_row_names_each_size_and_the_traced_one_apart() -> None:
    """Sizes in order; the traced RSS is its own clause, never taken for a fleet size."""
    sizes = Summary.of("memory", n0_rss_mib=55.0, n1000_rss_mib=74.0, n5000_rss_mib=146.0,
                       per_stack_kib=18.0, obj_kib=2.9)  # fmt: skip
    row = _memory(sizes)[2]
    assert row.startswith("empty: 55 MiB · 1,000: 74 MiB · 5,000: 146 MiB")
    assert "tracing on" not in row
    traced = _memory(sizes.extended(n1000_traced_rss_mib=91.0))[2]
    assert traced.startswith("empty: 55 MiB · 1,000: 74 MiB · 5,000: 146 MiB (")
    assert traced.endswith("; tracing on, 1,000: 91 MiB")
    assert _memory(sizes)[3] == _memory(sizes.extended(n1000_traced_rss_mib=91.0))[3]


def test_the_target_judges_both_limits_at_1000_with_the_figure() -> None:
    """< 100 MB and ≤ 60 MiB, each met or not, the RSS to a tenth; absent: not measured."""
    assert _memory(Summary.of("memory", n1000_rss_mib=59.6))[3] == (
        "< 100 MB at 1,000: **met**; ≤ 60 MiB at 1,000: **met** (59.6 MiB)"
    )
    assert _memory(Summary.of("memory", n1000_rss_mib=74.0))[3] == (
        "< 100 MB at 1,000: **met**; ≤ 60 MiB at 1,000: **not met** (74.0 MiB)"
    )
    assert "not measured" in _memory(Summary.of("memory", n0_rss_mib=55.0))[3]
