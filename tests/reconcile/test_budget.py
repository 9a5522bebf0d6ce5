"""Stack outputs are capped before they go into status."""

from __future__ import annotations

import json

from reconcile.budget import OUTPUT_LIMIT, OUTPUTS_LIMIT, capped_outputs


def test_small_outputs_are_kept_as_they_are() -> None:
    """Outputs within budget pass unchanged."""
    outputs = {"url": "https://example", "count": 3, "nested": {"a": [1, 2]}, "s": "[secret]"}
    assert capped_outputs(outputs) == outputs


def test_an_output_over_its_limit_is_replaced_by_its_size() -> None:
    """One oversized output becomes a marker with its size."""
    big = "x" * (OUTPUT_LIMIT + 10)
    capped = capped_outputs({"big": big, "small": "ok"})
    assert capped == {"big": f"[truncated: {len(json.dumps(big))} bytes]", "small": "ok"}


def test_many_mid_sized_outputs_are_cut_largest_first_until_they_fit() -> None:
    """Outputs that together exceed the budget are cut, largest first."""
    outputs = {f"o{i}": "y" * (OUTPUT_LIMIT - 100 - i) for i in range(20)}
    capped = capped_outputs(outputs)
    assert len(json.dumps(capped, separators=(",", ":"))) <= OUTPUTS_LIMIT
    kept = [name for name, value in capped.items() if not value.startswith("[truncated")]
    cut = [name for name in capped if name not in kept]
    assert kept
    assert cut
    # the largest (lowest index) went first
    assert max(int(n[1:]) for n in cut) < min(int(n[1:]) for n in kept)


def test_a_1_6_mb_output_fits_in_a_status() -> None:
    """The 1.6 MB output that once looped forever becomes a short marker."""
    capped = capped_outputs({"file": "z" * 1_600_000})
    assert len(json.dumps(capped)) < 100
