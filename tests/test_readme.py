"""The README's reference tables agree with the code: flags, condition reasons, Events.

(The metrics tables are checked against a running operator's /metrics in
``tests/e2e/test_observability.py``.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pulumi_stack_operator.config import ENV_PREFIX, build_parser
from reconcile.verdict import EVENTS
from status.conditions import Reason

README = Path(__file__).parents[1] / "README.md"
CODE = re.compile(r"`([^`]+)`")


def section(heading: str) -> str:
    """The README text under ``heading`` up to the next heading of the same or higher level."""
    text = README.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + 1
    pattern = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE)
    end = pattern.search(text, start + len(heading))
    return text[start : end.start() if end else len(text)]


def table(text: str, header: str) -> list[list[str]]:
    """Rows (cells stripped) of the Markdown table starting with ``header`` in ``text``."""
    lines = text[text.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_every_flag_and_its_variable_is_documented_and_nothing_else() -> None:
    """The Configuration table lists exactly the parser's flags, each with PSO_<NAME>."""
    rows = table(section("## Configuration"), "| flag | environment |")
    documented = {CODE.findall(row[0])[0].split(" ")[0]: row[1] for row in rows}
    parser = build_parser()
    flags = {
        action.option_strings[0]: action.dest
        for action in parser._actions  # noqa: SLF001 - argparse has no public accessor
        if action.option_strings and action.dest != "help"
    }
    assert set(documented) == set(flags)
    for flag, dest in flags.items():
        assert f"`{ENV_PREFIX}{dest.upper()}`" in documented[flag], flag
    booleans = [a for a in parser._actions if isinstance(a, argparse.BooleanOptionalAction)]  # noqa: SLF001
    for action in booleans:
        assert f"--no-{action.option_strings[0][2:]}" in section("## Configuration")


def test_every_condition_reason_is_documented_and_every_documented_one_exists() -> None:
    """Each Reason appears in the Status section; the what-to-do table names only Reasons."""
    status = section("### Status")
    shown = set(CODE.findall(status))
    assert {str(r) for r in Reason} <= shown
    advice = table(status, "| reason | what to do |")
    assert {CODE.findall(row[0])[0] for row in advice} <= {str(r) for r in Reason}


def test_the_events_table_is_exactly_what_the_reconciler_posts() -> None:
    """Reason and type of every Event, both ways (posts go through ``EVENTS`` only)."""
    rows = table(section("### Events"), "| reason | type | when |")
    documented = {CODE.findall(row[0])[0]: row[1] for row in rows}
    assert documented == {str(reason): type_ for reason, type_ in EVENTS.items()}
    package = Path(__file__).parents[1] / "reconcile"
    posts = {path.name: path.read_text().count("_events.post(") for path in package.rglob("*.py")}
    # One post, in the effects executor, whose Event type comes from EVENTS.
    assert {name: n for name, n in posts.items() if n} == {"effects.py": 1}
