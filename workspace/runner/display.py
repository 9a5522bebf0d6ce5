"""The Pulumi CLI's text display, read for a failure's message: its error, first, and no more.

A failed operation's message is the engine's error diagnostics when it sent any
(``engine``). When it sent none, the message comes from what the CLI printed: a command
that failed before the engine ran (on stderr), or a language host that reported its
program's errors itself and bailed (YAML's type errors: on stdout, inside the display).
``error_text`` keeps of that output what says what went wrong:

* dropped, the CLI's progress display: the operation's header (``Updating (dev):``), the
  ``@ updating....`` ticks, resource rows (`` +  pulumi:pulumi:Stack app-dev creating (0s)
  …``), the ``Diagnostics:`` header and the resource headers under it (``  pulumi:pulumi:Stack
  (app-dev):``), the ``Outputs:`` and ``Resources:`` sections, ``Duration:``, the update's
  permalink, blank lines;
* dropped, warnings that are not the error, each with the lines indented under it: the
  CLI's and the engine's ``warning:``, a language host's ``Warning:`` (YAML's deprecation
  of ``configuration:``), Python's ``…Warning:``, Node.js's ``(node:N) … Warning:`` and its
  ``(Use `node --trace-…` …)`` hint, npm's, pip's and yarn's ``WARN``/``warning``;
* kept, everything else, dedented, with the first error line (``error:``, ``Error:``,
  ``…Error:``, ``…Exception:``, ``panic:``, ``fatal:``, a Python traceback) and what follows
  it moved first.

When nothing is left (the output was all display and warnings), ``error_text`` is empty and
the caller says what else it has. The output is expected plain (``controller.text.plain``: the
CLI prints a language host's colours as it got them).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Iterator

_HEADER = re.compile(
    r"(?:Previewing (?:update|refresh|destroy|import)|Updating|Refreshing|Destroying|Importing)"
    r" \(.+\):"
)
_TICK = re.compile(r"@ \w[\w ]*\.*")
# A resource row, or a resource's header under "Diagnostics:": the step's symbol column,
# then a type token (``pulumi:pulumi:Stack``, ``kubernetes:core/v1:ConfigMap``) and a name.
_ROW = re.compile(r"[ +\-~<>=*!]{2,5}[\w.-]+:[\w./-]*:[\w./$-]+ \S.*")
_SECTION = re.compile(r"(?:Outputs|Resources):")  # a header over indented lines
_LINE = re.compile(
    r"Diagnostics:|Duration: .*|(?:View Live|View in Browser(?: \(Ctrl\+O\))?|Permalink): \S+"
)
_WARNING = re.compile(
    r"\s*(?:(?:\S+:\d+: )?[A-Za-z]*Warning:"  # Python's warnings, YAML's, "Warning:"
    r"|\(node:\d+\) (?:\[\w+\] )?\w*Warning:|\(Use `node --trace-"  # Node.js
    r"|(?i:warning)[: ]|(?:npm |yarn )?(?i:warn)\b)"  # the CLI's, npm's, pip's, yarn's
)
_ERROR = re.compile(
    r"\s*(?:(?:error|Error|ERROR|fatal|panic|[\w.]*(?:Error|Exception))\b(?: \[\w+\])?:"
    r"|npm (?:ERR!|error) |Traceback \(most recent call last\):)"
)


def error_text(output: str) -> str:
    """What of ``output`` says what went wrong, its first error first; "" if nothing does."""
    lines = output.splitlines()
    kept = [line for line in _without_warnings(_without_display(lines)) if line.strip()]
    return _error_first(textwrap.dedent("\n".join(kept)).splitlines())


def _without_display(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` without the CLI's progress display (headers, rows, sections, ticks)."""
    in_section = False
    for line in lines:
        if in_section and (not line.strip() or line[:1].isspace()):
            continue  # the body of "Outputs:" or "Resources:"
        in_section = bool(_SECTION.fullmatch(line))
        if in_section or any(p.fullmatch(line) for p in (_HEADER, _TICK, _ROW, _LINE)):
            continue
        yield line


def _without_warnings(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` without warning lines and the lines indented under each (blank ones aside)."""
    under: int | None = None  # the indentation of the warning being dropped
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if under is not None and (not line.strip() or indent > under):
            continue
        under = indent if _WARNING.match(line) else None
        if under is None:
            yield line


def _error_first(lines: list[str]) -> str:
    """``lines`` from the first error line on, then those before it."""
    first = next((i for i, line in enumerate(lines) if _ERROR.match(line)), 0)
    return "\n".join([*lines[first:], *lines[:first]])
