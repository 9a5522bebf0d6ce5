"""Go ``time.ParseDuration`` strings, as PKO's duration fields hold them.

Role: turn ``1h30m``, ``1.5h``, ``300ms`` or ``-2s`` into seconds, accepting exactly what Go
accepts: optional sign, then one or more ``<number><unit>`` parts (the number may have a
fraction; units ns, us, µs, μs, ms, s, m, h), or a bare ``0``.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Final

_DURATION_PART = re.compile(r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<unit>[^0-9.]+)")
_DURATION_UNITS: Final = MappingProxyType(
    {
        "ns": 1e-9,
        "us": 1e-6,
        "\u00b5s": 1e-6,  # Go accepts both the micro sign
        "\u03bcs": 1e-6,  # and the Greek small letter mu
        "ms": 1e-3,
        "s": 1.0,
        "m": 60.0,
        "h": 3600.0,
    }
)


def parse_go_duration(text: str) -> float:
    """Seconds in a Go ``time.ParseDuration`` string (``1h30m``, ``1.5h``, ``300ms``, ``-2s``).

    Raises:
        ValueError: ``text`` is not a Go duration.
    """
    sign, body = (-1.0, text[1:]) if text.startswith("-") else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    if not body:
        msg = f"invalid duration {text!r}"
        raise ValueError(msg)
    total, pos = 0.0, 0
    while pos < len(body):
        seconds, pos = _duration_part(text, body, pos)
        total += seconds
    return sign * total


def _duration_part(text: str, body: str, pos: int) -> tuple[float, int]:
    """One ``<number><unit>`` of ``body`` at ``pos``: its seconds and where the next begins."""
    part = _DURATION_PART.match(body, pos)
    if part is None or not (part["int"] or part["frac"]):
        msg = f"invalid duration {text!r}: expected a number at {body[pos:]!r}"
        raise ValueError(msg)
    unit = _DURATION_UNITS.get(part["unit"])
    if unit is None:
        msg = f"invalid duration {text!r}: unknown unit {part['unit']!r} (use ns, us, ms, s, m, h)"
        raise ValueError(msg)
    return float(f"{part['int'] or '0'}.{part['frac'] or '0'}") * unit, part.end()
