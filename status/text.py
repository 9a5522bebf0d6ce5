"""Text limits shared by every message the operator writes (conditions, Events, outcomes)."""

from __future__ import annotations


def truncate(text: str, limit: int, marker: str = "") -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, ending in ``marker`` if cut.

    Never splits a character; the result, marker included, is at most ``limit`` bytes.
    """
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(marker.encode())
    return data[:room].decode(errors="ignore") + marker
