"""The text rules every message shares: ``plain`` (no terminal codes) and ``truncate``."""

from __future__ import annotations

import json

import pytest

from controller.text import plain, truncate


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("\x1b[33mWarning\x1b[0m: x", "Warning: x", id="colours"),
        pytest.param("\x1b[1;4m${path}\x1b[0m", "${path}", id="bold-underline"),
        pytest.param("\x1b[2K\x1b[1Gdone", "done", id="erase-and-move"),
        pytest.param("\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\", "link", id="hyperlink"),
        pytest.param("\x1b]0;title\x07text", "text", id="window-title"),
        pytest.param("\x1b(Bcharset", "charset", id="short-escape"),
        pytest.param("50%\r100%\r\nend", "50%\n100%\nend", id="carriage-returns"),
        pytest.param("tab\tok\x00\x07\x7f", "tab\tok", id="controls"),
        pytest.param("trailing \x1b", "trailing ", id="lone-escape"),
        pytest.param("é ✓ plain\n", "é ✓ plain\n", id="unchanged"),
    ],
)
def test_plain_leaves_what_a_terminal_would_show(text: str, expected: str) -> None:
    """Escape sequences and control characters go; tabs, newlines and any letter stay."""
    assert plain(text) == expected


def test_plain_keeps_json_as_it_was() -> None:
    """JSON holds no raw control character: an escaped one is left alone."""
    document = json.dumps({"colour": "\x1b[31mred\x1b[0m", "lines": "a\r\nb"})
    assert plain(document) == document


def test_truncate_never_splits_a_character() -> None:
    """At most ``limit`` bytes, marker included."""
    assert truncate("ééé", 5, "…") == "é…"
    assert truncate("short", 10, "…") == "short"
