"""Text rules shared by every message the operator writes (conditions, Events, outcomes, logs).

``truncate`` cuts a message to a byte limit. ``plain`` is the one function that takes
terminal codes out of text that came from a program (the Pulumi CLI, a language host, a
plugin, an installer): every such text passes through it where it enters a message,
status, Event or log line, so that none of them ever holds an escape sequence.
"""

from __future__ import annotations

import re

# ECMA-48 sequences introduced by ESC: control sequences (CSI: colours, cursor moves,
# erasing), strings ended by BEL or ST (OSC: window titles, hyperlinks; DCS, SOS, PM, APC),
# and the short ``ESC <intermediates> <final>`` escapes (character sets, keypad modes). An
# ESC that starts none of them, and what is left of a string never ended, go too.
_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC (to BEL or ST)
    r"|\x1b[ -/]*[0-~]"  # two-character escapes, with intermediates
    r"|\x1b"  # a lone ESC
)
# C0 controls other than tab and newline (carriage returns become newlines first), and DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain(text: str) -> str:
    r"""``text`` without terminal codes: what a terminal would show, as lines of text.

    Escape sequences (colours, cursor moves, hyperlinks, titles) and control characters
    are removed; a carriage return (``\r\n`` or alone, as progress bars use it) becomes
    a newline; tabs and newlines stay. Text without any of them is returned unchanged.
    JSON stays valid JSON (its strings cannot hold these characters unescaped).
    """
    if "\x1b" not in text and not _CONTROL.search(text):
        return text
    text = _ESCAPE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def truncate(text: str, limit: int, marker: str = "") -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, ending in ``marker`` if cut.

    Never splits a character; the result, marker included, is at most ``limit`` bytes.
    """
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(marker.encode())
    return data[:room].decode(errors="ignore") + marker
