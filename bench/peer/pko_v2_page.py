"""The benchmarks page's PKO v2 table, from one run's ``bench=pko-v2`` line.

``block`` gives the Markdown ``bench.readme`` puts after the PKO v1.16 table: a sentence
saying what ran, a table of both sides (ours under the pod runner, PKO v2 as the bench runs
it), and the verdict on the issue's target: our cached PATCH → Ready no slower than PKO
v2's, with no pod left running against its pod per Stack. A line that says ``skipped`` or
``error`` (or none) gives one sentence saying so and why.
"""

from __future__ import annotations

import math

from bench.peer.pko_v2_build import SKIPPED
from bench.stats import TIMES, Summary, significant, word

HEAD = (
    "| measured | this operator (pod runner) | PKO v2 | PKO ÷ ours |",
    "| --- | --- | --- | --- |",
)
TITLE = "Beside PKO v2 on a node cluster (`bench=pko-v2`"

Row = tuple[str, str, str, str]


def block(summary: Summary | None) -> list[str]:
    """The lines for ``summary`` (the ``pko-v2`` line of the run, if it has one)."""
    if summary is None:
        return [f"{TITLE}): not run."]
    if "error" in summary.fields:
        return [f"{TITLE}): failed, {summary.text('error')}."]
    if "skipped" in summary.fields:
        return [f"{TITLE}): skipped, {_reason(summary.fields['skipped'])}."]
    version = summary.fields.get("version", "?")
    return [
        (
            f"{TITLE}, same run): PKO {version}'s manager and agent built from its source, "
            "its workspace running our image; ours with `--runner=pod` and its defaults; the "
            "pods row's TypeScript program and Stack for both, each on a namespace of its own "
            "(method and findings below the table's notes)."
        ),
        "",
        *HEAD,
        *("| " + " | ".join(row) + " |" for row in rows(summary)),
        "",
        verdict(summary),
    ]


def rows(p: Summary) -> list[Row]:
    """Both sides' figures, one row each."""
    samples, idle = _whole(p.get("samples")), _whole(p.get("idle_window"))
    timeout = _whole(p.get("cached_timeout"))
    return [
        _row(
            "create → Ready (first run: a new pod, `npm ci`, the plugin step, `up`)",
            p,
            "first_s",
            "s",
        ),
        _row(f"spec PATCH → Ready (a new `value` config; median of {samples})", p, "cached_s", "s"),
        _row(f"… changes not Ready within {timeout} s", p, "cached_timeouts", ""),
        _row("API requests per change (the operator's)", p, "requests_per_run", ""),
        _row("operator RSS after the runs", p, "rss_mib", "MiB"),
        _row(f"pods left running after {idle} idle s (1 Stack)", p, "idle_pods", ""),
        _row(
            "memory of the node's pods then (cgroup, page cache included)", p, "idle_mem_mib", "MiB"
        ),
        (
            "fresh workspace pods deleted on an `Update` conflict",
            "—",
            _figure(p.get("pko_init_conflicts"), ""),
            "—",
        ),
        (
            "pod templates its StatefulSet had (each spec change a new pod)",
            "—",
            _figure(p.get("pko_pod_revisions"), ""),
            "—",
        ),
    ]


def verdict(p: Summary) -> str:
    """The target's sentence: met when ours is no slower and leaves no pod running."""
    ours, theirs = p.get("pso_cached_s"), p.get("pko_cached_s")
    idle_ours, idle_theirs = p.get("pso_idle_pods"), p.get("pko_idle_pods")
    known = not any(math.isnan(v) for v in (ours, theirs, idle_ours, idle_theirs))
    met = known and ours <= theirs and idle_ours == 0
    return (
        "Target: our pod runner's cached PATCH → Ready no slower than PKO v2's, with no pod "
        f"left running against its one per Stack: **{'met' if met else 'not met'}** "
        f"({_figure(ours, 's')} against {_figure(theirs, 's')}; {_figure(idle_ours, '')} "
        f"against {_figure(idle_theirs, '')} pods idle)."
    )


def _row(label: str, p: Summary, key: str, unit: str) -> Row:
    """``label``, ours, PKO v2's, and PKO's ÷ ours ("—" unless both were measured)."""
    ours, theirs = p.get(f"pso_{key}"), p.get(f"pko_{key}")
    measured = ours and theirs and not (math.isnan(ours) or math.isnan(theirs))
    ratio = f"{theirs / ours:.2f}{TIMES}" if measured else "—"
    return label, _figure(ours, unit), _figure(theirs, unit), ratio


def _figure(value: float, unit: str) -> str:
    """A count as it is, else two significant figures (``significant``); "—" when absent."""
    whole = not math.isnan(value) and value == int(value)
    text = f"{int(value):,}" if whole else significant(value, missing="—")
    return f"{text} {unit}".strip() if text != "—" else text


def _whole(value: float) -> str:
    return "?" if math.isnan(value) else f"{value:.0f}"


def _reason(field: str) -> str:
    """The skip reason as the bench gave it (its own reason verbatim, variable included)."""
    return SKIPPED if field == word(SKIPPED) else field.replace("_", " ")
