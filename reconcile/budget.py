"""Keep what a run puts into ``status`` within what etcd stores.

etcd refuses an object over ~1.5 MiB, and a Stack's status shares that with its spec and
metadata. Stack outputs are the one unbounded part a run writes (a program may export a
whole file), so each output larger than ``OUTPUT_LIMIT`` bytes of JSON, and then the
largest ones until all fit in ``OUTPUTS_LIMIT``, are replaced by
``"[truncated: N bytes]"``. Messages are cut elsewhere (conditions, Events, lastUpdate).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

OUTPUT_LIMIT = 32 * 1024  # bytes of JSON for one output
OUTPUTS_LIMIT = 256 * 1024  # bytes of JSON for all outputs together


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def truncated(size: int) -> str:
    """What replaces an output of ``size`` bytes."""
    return f"[truncated: {size} bytes]"


def capped_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """``outputs`` with the ones over budget replaced (see the module docstring)."""
    sizes = {name: _size(value) for name, value in outputs.items()}
    capped = {
        name: truncated(sizes[name]) if sizes[name] > OUTPUT_LIMIT else value
        for name, value in outputs.items()
    }
    total = _size(capped)
    for name in sorted(capped, key=lambda n: sizes[n], reverse=True):
        if total <= OUTPUTS_LIMIT:
            break
        if isinstance(capped[name], str) and capped[name] == truncated(sizes[name]):
            continue
        before = _size(capped[name])
        capped[name] = truncated(sizes[name])
        total -= before - _size(capped[name])
    return capped
