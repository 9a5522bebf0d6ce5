"""Summary lines and the statistics they carry.

A summary line is ``bench=<name> key=value key=value ...``: keys are ``[a-z0-9_]+``, values
never contain spaces (numbers, or words joined by ``_``). ``Summary.line`` writes one and
``Summary.parse`` reads one back, so the benchmarks page's generator needs nothing but the lines.

Percentiles interpolate linearly between the two nearest ranks (numpy's default), so the
p99 of 200 samples lies between the 2nd- and 3rd-largest values.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

_KEY = re.compile(r"[a-z0-9_]+")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolating linearly; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    """The 50th percentile."""
    return percentile(values, 50.0)


def number(value: float, digits: int = 3) -> str:
    """A value for a summary line: at most ``digits`` decimals, trailing zeros dropped."""
    if math.isnan(value):
        return "nan"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text or "0"


TIMES = "\N{MULTIPLICATION SIGN}"
"""The sign a ratio ends with on the benchmarks page."""


def significant(value: float, missing: str = "?") -> str:
    """Two significant digits at most (``1,234``-style above 1,000); ``missing`` for NaN."""
    if math.isnan(value):
        return missing
    if value == 0:
        return "0"
    digits = 0 if abs(value) >= 10 else 1 if abs(value) >= 1 else 2
    return f"{value:,.{digits}f}"


def word(text: str) -> str:
    """A free-text value made space-free (spaces become ``_``)."""
    return "_".join(text.split()) or "-"


@dataclasses.dataclass(frozen=True)
class Summary:
    """One benchmark's results: its name and ordered ``key=value`` fields."""

    name: str
    fields: Mapping[str, str]

    @classmethod
    def of(cls, name: str, **values: float | str) -> Summary:
        """Build from numbers (formatted by ``number``) and words (made space-free)."""
        fields = {
            key: number(float(value)) if isinstance(value, int | float) else word(value)
            for key, value in values.items()
        }
        for key in fields:
            if not _KEY.fullmatch(key):
                msg = f"bad summary key {key!r}"
                raise ValueError(msg)
        return cls(name, fields)

    def extended(self, **values: float | str) -> Summary:
        """This summary with ``values`` appended (formatted as ``of`` does)."""
        more = Summary.of(self.name, **values)
        return Summary(self.name, {**self.fields, **more.fields})

    def line(self) -> str:
        """``bench=<name> key=value ...``."""
        return " ".join([f"bench={self.name}", *(f"{k}={v}" for k, v in self.fields.items())])

    @classmethod
    def parse(cls, line: str) -> Summary | None:
        """Read a summary line; None for anything else (blank lines, comments)."""
        pairs = [part.split("=", 1) for part in line.split()]
        if not pairs or len(pairs[0]) != 2 or pairs[0][0] != "bench":
            return None
        if any(len(pair) != 2 for pair in pairs):
            return None
        return cls(pairs[0][1], dict(pairs[1:]))

    def get(self, key: str) -> float:
        """A numeric field; NaN when absent or not a number."""
        try:
            return float(self.fields[key])
        except (KeyError, ValueError):
            return math.nan

    def text(self, key: str, default: str = "?") -> str:
        """A field as written (``_`` shown as spaces)."""
        return self.fields.get(key, default).replace("_", " ")
