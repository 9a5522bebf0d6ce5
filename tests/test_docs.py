"""The README and the pages under ``docs/`` agree with the code, the Makefile and each other.

What is checked, each in both directions where a direction makes sense:

- the site: ``mkdocs build --strict`` succeeds, and does fail on a broken anchor or a page
  left out of ``nav``; every page is in ``nav`` and linked from the README, which stays short
  and says what each runner guarantees;
- reference tables: the flags table is exactly the parser's flags, the Events table exactly
  ``EVENTS``, the reason catalogue exactly ``Reason`` (and each of its rows is a status the
  condition functions write, read by kstatus as it says, and in the Conditions table), the
  make targets table exactly the Makefile's documented targets;
- names anywhere in a page's prose: every operator flag, metric, condition or Event reason
  and make target a page names exists (other tools' flags and names are listed here);
- examples: every shell block either runs here (only ``make help`` and ``make -n``) or is
  marked ``<!-- not run: why -->``; every Stack in a YAML block uses only the CRD's fields.

The metrics tables are also checked against a running operator's ``/metrics`` in
``tests/e2e/test_observability.py``, which reads them with ``section`` and ``table``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from bench import readme as bench_page
from pulumi_stack_operator.config import ENV_PREFIX, build_parser
from reconcile.verdict import EVENTS
from status import conditions as c
from status.conditions import Reason
from testbed import kstatus

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MKDOCS = REPO / "mkdocs.yml"
CONFIGURATION, STATUS, REASONS = DOCS / "configuration.md", DOCS / "status.md", DOCS / "reasons.md"
METRICS, DEVELOPMENT = DOCS / "metrics.md", DOCS / "development.md"
RUNNERS = DOCS / "runners-and-security.md"
CODE = re.compile(r"`([^`\n]+)`")
README_LIMIT = 220
"""Hard limit on the README's lines (it aims at about 200)."""


# -- reading pages ---------------------------------------------------------------------


def pages() -> list[Path]:
    """The README and every page under ``docs/``."""
    return [README, *sorted(DOCS.glob("*.md"))]


def section(path: Path, heading: str) -> str:
    """The text of ``path`` under ``heading`` up to the next heading of the same or higher level.

    ``heading`` is the whole line (``"## Events"``); raises ``ValueError`` if it is absent.
    """
    text = path.read_text(encoding="utf-8")
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + 1
    pattern = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE)
    end = pattern.search(text, start + len(heading))
    return text[start : end.start() if end else len(text)]


def table(text: str, header: str) -> list[list[str]]:
    """Rows (cells stripped) of the Markdown table whose header line starts with ``header``."""
    lines = text[text.index(header) :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its language, its text, and the line before it (a marker)."""

    path: Path
    line: int
    lang: str
    body: str
    before: str


FENCE = re.compile(r"^ *```(\S*)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
SHELLS = frozenset({"sh", "bash", "console", "shell"})
NOT_RUN = re.compile(r"^<!-- not run: (\S.*?) -->$")


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``path`` (or of ``text``, read as that page), in order."""
    text = path.read_text(encoding="utf-8") if text is None else text
    found = []
    for match in FENCE.finditer(text):
        lines_before = [line for line in text[: match.start()].splitlines() if line.strip()]
        line = text.count("\n", 0, match.start()) + 1
        before = lines_before[-1] if lines_before else ""
        found.append(Block(path, line, match[1], match[2], before))
    return found


def prose(text: str) -> str:
    """``text`` without its fenced blocks."""
    return FENCE.sub("", text)


def spans() -> Iterator[tuple[Path, str]]:
    """Every inline code span of every page's prose, with its page."""
    for path in pages():
        for span in CODE.findall(prose(path.read_text(encoding="utf-8"))):
            yield path, span


def links(path: Path) -> list[str]:
    """The targets of the Markdown links of ``path`` (inline links only)."""
    return re.findall(r"\]\(([^)\s]+)\)", prose(path.read_text(encoding="utf-8")))


def nav_pages() -> list[str]:
    """The page files ``mkdocs.yml`` lists in ``nav``, in order."""

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    config = yaml.safe_load(MKDOCS.read_text(encoding="utf-8"))
    return list(walk(config["nav"]))


# -- the site --------------------------------------------------------------------------


def build_site(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``out`` (offline; a few seconds)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``make docs``'s build passes: no broken link or anchor, no page outside ``nav``."""
    built = build_site(MKDOCS, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "reasons" / "index.html").is_file()


def test_the_strict_build_fails_on_a_broken_anchor_and_an_unlisted_page(tmp_path: Path) -> None:
    """Positive controls: the configuration really turns both mistakes into failures."""
    copy = tmp_path / "repo"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(MKDOCS, copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    original = index.read_text(encoding="utf-8")
    index.write_text(original + "\n[gone](reasons.md#no-such-reason)\n", encoding="utf-8")
    broken = build_site(copy / "mkdocs.yml", tmp_path / "site1")
    assert broken.returncode != 0
    assert "no-such-reason" in broken.stdout + broken.stderr
    index.write_text(original, encoding="utf-8")
    (copy / "docs" / "stray.md").write_text("# Stray\n", encoding="utf-8")
    unlisted = build_site(copy / "mkdocs.yml", tmp_path / "site2")
    assert unlisted.returncode != 0
    assert "stray.md" in unlisted.stdout + unlisted.stderr


def test_every_page_is_in_the_nav_and_linked_from_the_readme() -> None:
    """docs/*.md, the nav and the README's links to docs/ name the same pages."""
    on_disk = {path.name for path in DOCS.glob("*.md")}
    assert sorted(nav_pages()) == sorted(on_disk)
    linked = {
        target.split("#", 1)[0].removeprefix("docs/")
        for target in links(README)
        if target.startswith("docs/")
    }
    assert linked == on_disk - {"index.md"}


def test_the_readmes_links_resolve() -> None:
    """Every relative link of the README names a file of the repository."""
    relative = [t for t in links(README) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert relative
    for target in relative:
        assert (REPO / target.split("#", 1)[0]).exists(), target


def test_the_readme_is_short_and_says_what_each_runner_guarantees() -> None:
    """At most ``README_LIMIT`` lines; each runner's promise is stated and linked."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_LIMIT
    runners = section(README, "## Where programs run")
    assert "`--runner=local`" in runners
    assert "one trust domain" in runners
    assert "`--runner=pod`" in runners
    assert "never sees the operator's token" in runners
    assert "(docs/runners-and-security.md)" in runners
    full = RUNNERS.read_text(encoding="utf-8")
    assert "\n### The local runner\n" in full
    assert "\n### The pod runner\n" in full


# -- flags ----------------------------------------------------------------------------


def operator_flags() -> dict[str, str]:
    """The operator's flags (``--name`` → dest), ``--help`` aside."""
    parser = build_parser()
    return {
        action.option_strings[0]: action.dest
        for action in parser._actions  # noqa: SLF001 - argparse has no public accessor
        if action.option_strings and action.dest != "help"
    }


def test_every_flag_and_its_variable_is_documented_and_nothing_else() -> None:
    """The flags table lists exactly the parser's flags, each with PSO_<NAME>."""
    flags_section = section(CONFIGURATION, "## Flags")
    rows = table(flags_section, "| flag | environment |")
    documented = {CODE.findall(row[0])[0].split(" ")[0]: row[1] for row in rows}
    flags = operator_flags()
    assert set(documented) == set(flags)
    for flag, dest in flags.items():
        assert f"`{ENV_PREFIX}{dest.upper()}`" in documented[flag], flag
    parser = build_parser()
    booleans = [a for a in parser._actions if isinstance(a, argparse.BooleanOptionalAction)]  # noqa: SLF001
    for action in booleans:
        assert f"--no-{action.option_strings[0][2:]}" in flags_section


FOREIGN_FLAGS: Mapping[str, frozenset[str]] = {
    "kubectl": frozenset(
        {
            "--server-side",
            "--force-conflicts",
            "--overwrite",
            "--for",
            "--force",
            "--grace-period",
            "--all-namespaces",
            "--type",
        }
    ),
    "kubectl, hack/dev.py": frozenset({"--timeout"}),
    "helm": frozenset({"--wait", "--namespace", "--create-namespace", "--set"}),
    "docker": frozenset({"--build-arg"}),
    "pytest-xdist": frozenset({"--dist"}),
    "pulumi": frozenset(
        {
            "--event-log",
            "--skip-preview",
            "--yes",
            "--no-dependencies",
            "--target-dependents",
            "--run-program",
            "--otel-traces",
        }
    ),
    "git": frozenset({"--depth"}),
    "yarn, pnpm": frozenset({"--frozen-lockfile", "--immutable"}),
    "uv": frozenset({"--seed", "--frozen"}),
    "poetry": frozenset({"--no-root"}),
    "ruff": frozenset({"--check"}),
    "mkdocs": frozenset({"--strict"}),
    "kube-apiserver": frozenset({"--advertise-address"}),
    "prometheus": frozenset({"--enable-feature"}),
}
"""Flags of other programs that the pages name, by program."""
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def own_tool_sources() -> str:
    """The text of this repository's own tools (``hack/``, ``testbed/``, ``bench/``, Makefile)."""
    files = [
        REPO / "Makefile",
        *(REPO / "hack").rglob("*"),
        *(REPO / "testbed").rglob("*.py"),
        *(REPO / "bench").rglob("*.py"),
    ]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files if p.is_file())


def unknown_flags(named: Mapping[str, set[str]], tools: str) -> dict[str, set[str]]:
    """The flags of ``named`` (flag → pages) that neither the operator nor a known tool has."""
    operator = set(operator_flags()) | {"--help"}
    operator |= {f"--no-{flag[2:]}" for flag in operator}
    foreign = set().union(*FOREIGN_FLAGS.values())
    return {
        flag: where
        for flag, where in named.items()
        if flag not in operator
        and flag not in foreign
        and not re.search(re.escape(flag) + r"(?![\w-])", tools)
    }


def test_every_flag_a_page_names_exists() -> None:
    """A ``--flag`` in a page's prose is the operator's, one of our tools', or listed above."""
    named: dict[str, set[str]] = {}
    for path, span in spans():
        for flag in FLAG.findall(span):
            named.setdefault(flag, set()).add(path.name)
    tools = own_tool_sources()
    assert "--max-update-failures" in named  # the scan sees the flags
    assert unknown_flags(named, tools) == {}
    # Positive control: a misspelt operator flag is caught.
    assert unknown_flags({"--max-update-failure": {"x.md"}}, tools) == {
        "--max-update-failure": {"x.md"}
    }


# -- metrics --------------------------------------------------------------------------

METRIC = re.compile(
    r"\b((?:pulumi_stack|workqueue|controller_runtime|rest_client|leader_election)_\w*[a-z0-9])\b"
)
PACKAGES = ("controller", "status", "workspace", "reconcile", "pulumi_stack_operator")


def exported_names() -> set[str]:
    """Metric names the code declares, and those kube-state-metrics makes from our config.

    Counters count also with ``_total``; the kube-state-metrics names are those of
    ``manifests/kube-state-metrics/stacks.yaml``.
    """
    names: set[str] = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            names |= set(re.findall(r"\"([a-z_]+)\"", path.read_text(encoding="utf-8")))
    names = {n for n in names if METRIC.fullmatch(n)}
    names |= {f"{name}_total" for name in names if not name.endswith("_total")}
    config = yaml.safe_load(
        (REPO / "manifests" / "kube-state-metrics" / "stacks.yaml").read_text(encoding="utf-8")
    )
    for resource in config["spec"]["resources"]:
        prefix = resource["metricNamePrefix"]
        names |= {f"{prefix}_{metric['name']}" for metric in resource["metrics"]}
    return names


def test_every_metric_a_page_names_exists() -> None:
    """Each metric name in a page's prose is declared by the code (or kube-state-metrics')."""
    exported = exported_names()
    assert "pulumi_stack_condition_transitions_total" in exported
    assert "pulumi_stack_ready" in exported  # kube-state-metrics'
    named = {(path.name, name) for path, span in spans() for name in METRIC.findall(span)}
    assert ("metrics.md", "pulumi_stack_condition") in named
    unknown = {(page, name) for page, name in named if name not in exported | set(PACKAGES)}
    assert unknown == set()


def test_the_metrics_tables_name_only_declared_metrics() -> None:
    """Every row of the two metrics tables is a metric the code declares."""
    exported = exported_names()
    for heading in ("## Stack metrics", "## Controller metrics"):
        rows = table(section(METRICS, heading), "| metric | type | labels")
        assert rows
        for row in rows:
            for name in CODE.findall(row[0]):
                assert name in exported, name


# -- condition and Event reasons --------------------------------------------------------


def test_every_condition_reason_is_in_the_conditions_table() -> None:
    """Each Reason appears in the status page's Conditions table."""
    shown = set(CODE.findall(section(STATUS, "## Conditions")))
    assert {str(r) for r in Reason} <= shown


def test_the_events_table_is_exactly_what_the_reconciler_posts() -> None:
    """Reason and type of every Event, both ways (posts go through ``EVENTS`` only)."""
    rows = table(section(STATUS, "## Events"), "| reason | type | when |")
    documented = {CODE.findall(row[0])[0]: row[1] for row in rows}
    assert documented == {str(reason): type_ for reason, type_ in EVENTS.items()}
    package = REPO / "reconcile"
    posts = {path.name: path.read_text().count("_events.post(") for path in package.rglob("*.py")}
    # One post, in the effects executor, whose Event type comes from EVENTS.
    assert {name: n for name, n in posts.items() if n} == {"effects.py": 1}


OTHER_NAMES = frozenset(
    {
        # The Pulumi Kubernetes Operator's reasons (migration notes, benchmarks).
        "StackUpdateFailed",
        "RetryingAfterFailure",
        "StackUpdateDetected",
        "NotReadyInProgress",
        # Kubernetes' and Linux's own names.
        "ReadWriteMany",
        "SetStatusCondition",
        # The test suite's status witness (tests/status/invariants.py).
        "StackWatcher",
        "VmRSS",
    }
)
"""CamelCase names the pages use that are neither reasons nor names in the code."""
CAMEL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+")


def alert_names() -> set[str]:
    """The alerts of the PrometheusRule ``manifests/prometheus`` installs."""
    rule = REPO / "manifests" / "prometheus" / "rules" / "prometheus_rule.yaml"
    return set(re.findall(r"^\s*- alert: (\w+)$", rule.read_text(encoding="utf-8"), re.MULTILINE))


def code_words() -> set[str]:
    """Every CamelCase word of the shipped packages and the test bed."""
    words: set[str] = set()
    for package in (*PACKAGES, "testbed"):
        for path in (REPO / package).rglob("*.py"):
            words |= set(CAMEL.findall(path.read_text(encoding="utf-8")))
    return words


def unknown_names(named: set[str], known: set[str]) -> set[str]:
    """The CamelCase names of ``named`` that are not in ``known``."""
    return {name for name in named if CAMEL.fullmatch(name) and name not in known}


def test_every_reason_a_page_names_exists() -> None:
    """A CamelCase name in a page's prose is a reason, an alert, a name in the code or listed.

    So a misspelt condition or Event reason (``UpdateFailure``) fails here.
    """
    known = {str(r) for r in Reason} | set(EVENTS) | alert_names() | code_words() | OTHER_NAMES
    named = {span for _, span in spans()}
    assert "UpdateConflict" in named
    assert unknown_names(named, known) == set()
    assert unknown_names({"UpdateFailure"}, known) == {"UpdateFailure"}  # positive control


# -- the reason catalogue ---------------------------------------------------------------

SITUATION = re.compile(r"`(Ready|Reconciling|Stalled)=(True|False|Unknown)`(?: \(([^)]*)\))?")
DELETING = "while being deleted"
Condition = tuple[str, str, str | None]  # type, status, reason (None: any reason)


@dataclasses.dataclass(frozen=True)
class Written:
    """One way a reason is written: the conditions present, and whether during deletion."""

    reason: str
    conditions: frozenset[Condition]
    deleting: bool


def catalogue_row(cells: list[str]) -> tuple[Written, str]:
    """A row of the reason catalogue as (how it is written, the kstatus it states)."""
    reason = CODE.findall(cells[0])[0]
    conditions = set()
    for type_, value, note in SITUATION.findall(cells[1]):
        named = CODE.fullmatch(note) if note else None
        conditions.add((type_, value, named[1] if named else (None if note else reason)))
    return Written(reason, frozenset(conditions), DELETING in cells[1]), cells[2]


def catalogue(text: str | None = None) -> list[tuple[Written, str]]:
    """Every row of the reason catalogue (of ``text`` if given, else of the page)."""
    text = REASONS.read_text(encoding="utf-8") if text is None else text
    return [catalogue_row(row) for row in table(text, "| reason | conditions | kstatus |")]


def test_the_catalogue_names_every_reason_and_nothing_else() -> None:
    """The catalogue's reasons are exactly ``Reason``, each with an anchor to link to."""
    rows = catalogue()
    assert {written.reason for written, _ in rows} == {str(r) for r in Reason}
    text = REASONS.read_text(encoding="utf-8")
    for reason in Reason:
        assert f'<a id="{str(reason).lower()}"></a>`{reason}`' in text, reason


T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def writable() -> set[tuple[frozenset[tuple[str, str, str]], bool]]:
    """Every condition set the functions of ``status.conditions`` write, with any reason."""
    found = set()
    for reason in Reason:
        statuses = [
            (c.progressing({}, 1, "m", T0), False),
            (c.succeeded({}, 1, "m", T0), False),
            (c.retrying({}, 1, reason, "m", "m", T0), False),
            (c.waiting({}, 1, reason, "m", T0, ready="False"), False),
            (c.waiting({}, 1, reason, "m", T0, ready="Unknown"), False),
            (c.stalled({}, 1, reason, "m", T0), False),
            (c.deleting({}, 1, reason, "m", T0, ready="Unknown"), True),
            (c.deleting({}, 1, reason, "m", T0, ready="False"), True),
        ]
        for status, deleting in statuses:
            conditions = frozenset(
                (x["type"], x["status"], x["reason"]) for x in status["conditions"]
            )
            found.add((conditions, deleting))
    return found


def is_writable(
    written: Written, options: set[tuple[frozenset[tuple[str, str, str]], bool]]
) -> bool:
    """Whether one of ``options`` has ``written``'s conditions (a None reason matches any)."""

    def matches(option: frozenset[tuple[str, str, str]]) -> bool:
        mine = {(t, s): r for t, s, r in written.conditions}
        theirs = {(t, s): r for t, s, r in option}
        return mine.keys() == theirs.keys() and all(
            r is None or r == theirs[key] for key, r in mine.items()
        )

    return any(d == written.deleting and matches(o) for o, d in options)


def kstatus_of(written: Written) -> str:
    """What kstatus computes for a Stack with ``written``'s conditions, observed and current."""
    metadata: dict[str, Any] = {"name": "s", "namespace": "n", "generation": 1}
    if written.deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conditions = [
        {
            "type": type_,
            "status": value,
            "reason": reason or "AnyFailure",
            "message": "m",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        for type_, value, reason in sorted(written.conditions, key=lambda x: x[0])
    ]
    obj = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": metadata,
        "status": {"observedGeneration": 1, "conditions": conditions},
    }
    return str(kstatus.compute(obj).status)


def test_each_catalogue_row_is_written_by_the_code_and_read_as_it_says() -> None:
    """Each row's conditions come from ``status.conditions``; kstatus reads them as stated."""
    options = writable()
    for written, stated in catalogue():
        assert is_writable(written, options), written
        assert kstatus_of(written) == stated, written


def test_a_wrong_catalogue_row_is_caught() -> None:
    """Positive controls: a shape no function writes, and a wrong kstatus verdict."""
    header = "| reason | conditions | kstatus | what it means | what to do |\n| --- |\n"
    odd = (
        "| `UpdateFailed` | `Ready=False`, `Stalled=True`, `Reconciling=True` | Failed | x | y |\n"
    )
    wrong = (
        "| `UpdateFailed` | `Ready=False`, `Reconciling=True` (`ProgressingWithRetry`) "
        "| Current | x | y |\n"
    )
    ((odd_row, _),) = catalogue(header + odd)
    assert not is_writable(odd_row, writable())
    ((wrong_row, stated),) = catalogue(header + wrong)
    assert is_writable(wrong_row, writable())
    assert kstatus_of(wrong_row) != stated


STATUS_TOKEN = re.compile(r"(True|False|Unknown)|`([A-Z]\w+)`|(same reason)")


def status_cell(cell: str) -> list[tuple[str, str | None]]:
    """A cell of the Conditions table as (status, reason) pairs; None: the row's reason."""
    pairs: list[tuple[str, str | None]] = []
    current = ""
    for word, reason, same in STATUS_TOKEN.findall(cell):
        if word:
            current = word
        elif reason:
            pairs.append((current, reason))
        elif same:
            pairs.append((current, None))
    return pairs


def conditions_table() -> set[Written]:
    """The Conditions table of the status page as the ways each reason is written.

    A row's reasons are those of its Ready cell, else of its Stalled cell; the other cells
    add their one condition (``same reason``: the row's reason) or none (a dash).
    """
    rows = table(section(STATUS, "## Conditions"), "| situation | Ready | Reconciling | Stalled |")
    found = set()
    for situation, *cells in rows:
        by_type = dict(
            zip(("Ready", "Reconciling", "Stalled"), map(status_cell, cells), strict=True)
        )
        lead = "Ready" if any(r for _, r in by_type["Ready"]) else "Stalled"
        for value, reason in by_type[lead]:
            assert reason is not None, situation
            conditions = {(lead, value, reason)}
            for type_, pairs in by_type.items():
                if type_ != lead and pairs:
                    ((other, named),) = pairs
                    conditions.add((type_, other, named or reason))
            found.add(Written(reason, frozenset(conditions), "deleted" in situation))
    return found


def test_the_catalogue_agrees_with_the_conditions_table() -> None:
    """Both tables say the same about how each reason is written (rows of any reason aside)."""
    exact = {written for written, _ in catalogue() if all(r for *_, r in written.conditions)}
    assert exact == conditions_table()


# -- make targets ---------------------------------------------------------------------


def makefile_targets() -> tuple[set[str], set[str]]:
    """The Makefile's targets, and those with a ``## `` help text."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    every = set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.MULTILINE))
    helped = set(re.findall(r"^([a-z][a-z0-9-]*):.*## ", text, re.MULTILINE))
    return every, helped


MAKE = re.compile(r"(?:^|\s)make ([a-z][a-z0-9-]*)")


def test_every_make_target_a_page_names_exists() -> None:
    """``make X`` in a page's prose or shell blocks names a target of the Makefile."""
    every, _ = makefile_targets()
    named = {(path.name, target) for path, span in spans() for target in MAKE.findall(span)}
    for path in pages():
        for block in blocks(path):
            if block.lang in SHELLS:
                named |= {(path.name, t) for t in MAKE.findall(block.body)}
    assert ("README.md", "dev") in named
    assert {(page, t) for page, t in named if t not in every} == set()


def test_the_commands_table_lists_every_documented_target() -> None:
    """The development page's Commands table is exactly the targets ``make help`` shows."""
    rows = table(section(DEVELOPMENT, "## Commands"), "| command | what it does |")
    listed = {CODE.findall(row[0])[0].removeprefix("make ") for row in rows}
    assert listed == makefile_targets()[1]


# -- shell blocks ---------------------------------------------------------------------

RUNNABLE = re.compile(r"make (help|-n [a-z][a-z0-9 -]*)")


def commands(block: Block) -> list[str]:
    """The command lines of a shell block, comments and blank lines dropped."""
    found = []
    for line in block.body.splitlines():
        command = re.sub(r"(^|\s)#.*$", "", line).strip()
        if command:
            found.append(command)
    return found


def unmarked(every: list[Block]) -> list[Block]:
    """Shell blocks with no ``not run`` marker whose commands are not all runnable here."""
    return [
        block
        for block in every
        if block.lang in SHELLS
        and not NOT_RUN.match(block.before)
        and not all(RUNNABLE.fullmatch(command) for command in commands(block))
    ]


def test_every_shell_block_runs_here_or_says_why_not() -> None:
    """An unmarked shell block may hold only quick offline commands, and they succeed."""
    every = [block for path in pages() for block in blocks(path)]
    assert unmarked(every) == []
    runnable = [b for b in every if b.lang in SHELLS and not NOT_RUN.match(b.before)]
    assert runnable  # at least `make help` runs
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    for block in runnable:
        for command in commands(block):
            done = subprocess.run(
                command.split(),
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            assert done.returncode == 0, f"{block.path.name}:{block.line}: {command}\n{done.stderr}"
            assert done.stdout.strip(), command


def test_an_unmarked_block_that_cannot_run_is_caught() -> None:
    """Positive control: a cluster command without a marker is reported; with one it is not."""
    text = (
        "Text.\n\n```sh\nkubectl get stacks\n```\n\n"
        "<!-- not run: needs a cluster -->\n```sh\nkubectl get stacks\n```\n"
    )
    found = blocks(README, text)
    assert [b.line for b in unmarked(found)] == [3]


# -- YAML examples --------------------------------------------------------------------


def stack_schema() -> dict[str, Any]:
    """The CRD's OpenAPI schema of a Stack's ``spec``."""
    crd = yaml.safe_load((REPO / "manifests" / "crd" / "stacks.pulumi.com.yaml").read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def unknown_fields(value: object, schema: Mapping[str, Any], path: str) -> list[str]:
    """The paths in ``value`` that ``schema`` neither declares nor leaves open.

    Keys outside ``properties`` are checked against ``additionalProperties`` when it is a
    schema, and accepted when it is true or the object preserves unknown fields.
    """
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        properties, extra = schema.get("properties", {}), schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            if key in properties:
                found += unknown_fields(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(item, extra, f"{path}.{key}")
            elif extra is not True:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [e for v in value for e in unknown_fields(v, schema["items"], path)]
    return []


def stack_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every Stack ``spec`` of the pages' YAML blocks (whole Stacks and ``spec:`` fragments)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for path in pages():
        for block in blocks(path):
            if block.lang != "yaml":
                continue
            found.extend(
                (f"{path.name}:{block.line}", doc["spec"])
                for doc in yaml.safe_load_all(block.body)
                if isinstance(doc, dict) and (doc.get("kind") == "Stack" or set(doc) == {"spec"})
            )
    return found


def test_every_stack_example_uses_only_the_crds_fields() -> None:
    """No example names a field the apiserver would prune or refuse."""
    schema, specs = stack_schema(), stack_specs()
    assert any(where.startswith("README.md") for where, _ in specs)
    for where, spec in specs:
        assert unknown_fields(spec, schema, "spec") == [], where
    # Positive controls: a misspelt field, and one inside a map of references.
    assert unknown_fields({"projectrepo": "x"}, schema, "spec") == ["spec.projectrepo"]
    refs = {"envRefs": {"A": {"type": "Secret", "secrt": {}}}}
    assert unknown_fields(refs, schema, "spec") == ["spec.envRefs.A.secrt"]


# -- the benchmarks page ----------------------------------------------------------------


def test_the_benchmarks_page_holds_the_generated_table_once() -> None:
    """``make bench`` rewrites between one pair of markers on the page the README links."""
    text = bench_page.PAGE.read_text(encoding="utf-8")
    assert bench_page.PAGE == DOCS / "benchmarks.md"
    assert text.count(bench_page.START) == 1
    assert text.count(bench_page.END) == 1
    assert text.index(bench_page.START) < text.index(bench_page.END)
