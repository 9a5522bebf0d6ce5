"""``reconcile.spec.durations``: Go duration strings, as time.ParseDuration reads them."""

from __future__ import annotations

import pytest

from reconcile.spec import parse_go_duration

# -- Go durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("1h30m", 5400.0, id="hours-minutes"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("1.5h", 5400.0, id="fractional-hours"),
        pytest.param(".5h", 1800.0, id="leading-dot"),
        pytest.param("1.h", 3600.0, id="trailing-dot"),
        pytest.param("300ms", 0.3, id="milliseconds"),
        pytest.param("2us", 2e-6, id="microseconds-u"),
        pytest.param("2\u00b5s", 2e-6, id="microseconds-micro-sign"),
        pytest.param("2\u03bcs", 2e-6, id="microseconds-greek-mu"),
        pytest.param("5ns", 5e-9, id="nanoseconds"),
        pytest.param("1h0.5m10s", 3640.0, id="three-parts"),
        pytest.param("0", 0.0, id="bare-zero"),
        pytest.param("+2s", 2.0, id="plus-sign"),
        pytest.param("-1m", -60.0, id="negative"),
    ],
)
def test_go_duration(text: str, seconds: float) -> None:
    """Go duration strings convert to seconds as time.ParseDuration does."""
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1", id="no-unit"),
        pytest.param("h", id="no-number"),
        pytest.param(".h", id="dot-only"),
        pytest.param("1x", id="unknown-unit"),
        pytest.param("1h 30m", id="space"),
        pytest.param("1e3s", id="exponent"),
        pytest.param("-", id="sign-only"),
        pytest.param("1d", id="days"),
    ],
)
def test_go_duration_rejects(text: str) -> None:
    """Strings time.ParseDuration rejects raise ValueError."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)
