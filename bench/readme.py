"""The benchmarks page's results table, generated from summary lines; nothing else writes it.

``render`` turns the lines of one run (``bench=<name> key=value ...``) into Markdown: a
sentence on the machine and its load, one table row per benchmark (what was measured, the
result, the design target and whether it was met), notes on method, and the lines
themselves. ``rewrite`` replaces exactly the text between ``<!-- bench:start -->`` and
``<!-- bench:end -->`` in the page (``PAGE``: ``docs/benchmarks.md``, which the README
links) and leaves every other byte alone. The module keeps its name from when the table was
in the README.

``python -m bench.readme [results]`` (default ``bench/results.txt``) rewrites that page
from a results file, e.g. after editing this renderer.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bench.peer import pko_v2_page
from bench.stats import TIMES, Summary, significant

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
"""The page whose markers enclose the results table."""
RESULTS = Path(__file__).resolve().parent / "results.txt"

Row = tuple[str, str, str, str]  # benchmark, what is measured, result, target


def load(path: Path) -> dict[str, Summary]:
    """The summary lines of a results file, by benchmark name (the last line wins)."""
    found: dict[str, Summary] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        summary = Summary.parse(line)
        if summary is not None:
            found[summary.name] = summary
    return found


def rewrite(page: Path, block: str) -> None:
    """Replace the text between the markers of ``page`` with ``block``.

    Raises ``ValueError`` when ``page`` lacks either marker (nothing is written then).
    """
    text = page.read_text(encoding="utf-8")
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        msg = f"{page} lacks the {START} … {END} markers"
        raise ValueError(msg)
    page.write_text(f"{head}{START}\n{block.strip()}\n{END}{tail}", encoding="utf-8")


# -- number formatting ------------------------------------------------------------------


def _n(value: float, digits: int = 0) -> str:
    """``1,000``-style numbers; ``?`` for a missing value."""
    if math.isnan(value):
        return "?"
    return f"{value:,.{digits}f}"


def _sig(value: float) -> str:
    """Two significant digits at most, never in scientific notation."""
    return significant(value)


def _met(ok: bool) -> str:  # noqa: FBT001 - a verdict, read aloud
    return "**met**" if ok else "**not met**"


def _sizes(summary: Summary, pattern: str) -> list[int]:
    """The numbers N of keys matching ``pattern`` (one group), ascending."""
    return sorted({int(m.group(1)) for key in summary.fields if (m := re.fullmatch(pattern, key))})


# -- one row per benchmark ----------------------------------------------------------------


def _latency(s: Summary) -> Row:
    sizes = _sizes(s, r"n(\d+)_p99_ms")
    result = " · ".join(
        f"{_n(n)} Stack{'s' if n > 1 else ''}: {_sig(s.get(f'n{n}_p50_ms'))} / "
        f"{_sig(s.get(f'n{n}_p99_ms'))} ms"
        for n in sizes
    )
    largest = sizes[-1] if sizes else 0
    verdict = (
        _met(s.get(f"n{largest}_p99_ms") < 250) if largest >= 1000 else "not measured at 1,000"
    )
    what = (
        "spec PATCH sent → the bench's watch sees `Reconciling=True` with the new "
        f"`observedGeneration`; p50 / p99 of {_n(s.get('samples'))} changes, fleet of "
        "idle Ready Stacks, default flags"
    )
    return ("status latency", what, result, f"p99 < 250 ms at 1,000: {verdict}")


def _saturation(s: Summary) -> Row:
    what = (
        f"as above, with both workers busy in a slow update ({_n(s.get('busy'))} slow Stacks "
        f"among {_n(s.get('stacks'))}); p50 / p99 of {_n(s.get('samples'))} changes to other "
        "Stacks, until the watch sees their acknowledgment"
    )
    result = (
        f"{_sig(s.get('p50_ms'))} / {_sig(s.get('p99_ms'))} ms (max {_sig(s.get('max_ms'))} ms)"
    )
    if "op_total_p99_ms" in s.fields:
        result += (
            f"; inside the operator, p99: {_sig(s.get('op_total_p99_ms'))} ms (delivery "
            f"{_sig(s.get('op_delivery_p99_ms'))}, queued {_sig(s.get('op_queued_p99_ms'))}, "
            f"write {_sig(s.get('op_write_p99_ms'))})"
        )
    target = f"p99 < 100 ms: {_met(s.get('p99_ms') < 100)}"
    return ("latency under saturation", what, result, target)


def _idle(s: Summary) -> Row:
    what = (
        f"{_n(s.get('stacks'))} Ready Stacks, `--resync-period={_n(s.get('resync_s'))}`, "
        f"{_n(s.get('window_s'))} s window ({_n(s.get('reconciles'))} re-evaluations)"
    )
    result = (
        f"{_n(s.get('status_writes'))} status writes, {_n(s.get('stack_writes'))} Stack "
        f"versions, {_n(s.get('events'))} Events; {_sig(s.get('api_per_stack_hour'))} API "
        f"requests per Stack per hour; operator CPU {_sig(s.get('cpu_pct'))} % of a core"
    )
    quiet = s.get("status_writes") == 0 and s.get("events") == 0 and s.get("stack_writes") == 0
    return ("idle cost", what, result, f"0 writes, 0 Events: {_met(quiet)}")


def _overhead(s: Summary) -> Row:
    what = (
        f"`files` program, one resource updated; medians of {_n(s.get('runs'))} runs per "
        "side, interleaved"
    )
    result = (
        f"operator {_sig(s.get('op_e2e_s'))} s (patch → Ready), of which its Pulumi "
        f"run {_sig(s.get('op_run_s'))} s; bare `pulumi up` {_sig(s.get('cli_up_s'))} s → "
        f"**{s.get('ratio_e2e'):.2f}{TIMES}** (the run alone {s.get('ratio_run'):.2f}{TIMES})"
    )
    if "ratio_cli" in s.fields:
        result += (
            f"; breakdown (debug log): the operator's own `pulumi up` "
            f"{_sig(s.get('op_cli_up_s'))} s vs bare {_sig(s.get('debug_cli_up_s'))} s "
            f"({s.get('ratio_cli'):.2f}{TIMES}); around it: announce "
            f"{_sig(s.get('op_announce_s'))} s, checkout {_sig(s.get('op_checkout_s'))} s, "
            f"conclude {_sig(s.get('op_conclude_s'))} s"
        )
    if "ratio_flags" in s.fields:
        result += (
            f"; whose: the bare CLI driven as the runner drives it (engine flags, "
            f"`--event-log`) {_sig(s.get('flagged_cli_up_s'))} s, "
            f"{s.get('ratio_flags'):.2f}{TIMES} the plain one (the CLI's own), the "
            f"operator's `up` {s.get('ratio_operator'):.2f}{TIMES} that (the operator's)"
        )
    if "ratio_traced" in s.fields:
        result += (
            f"; tracing on (`--otel-endpoint`, a real Collector receiving "
            f"{_n(s.get('traced_spans_per_run'))} spans per run): operator "
            f"{_sig(s.get('traced_op_e2e_s'))} s vs bare {_sig(s.get('traced_cli_up_s'))} s → "
            f"{s.get('ratio_traced'):.2f}{TIMES}; every other row is measured with it off, "
            "the default, which loads no OpenTelemetry code"
        )
    return ("overhead", what, result, f"≤ 1.10{TIMES}: {_met(s.get('ratio_e2e') <= 1.10)}")


_RUNTIMES = (  # summary key prefix, label, what its first run installs ("" for nothing)
    ("ts", "TypeScript", "`npm ci`"),
    ("py", "Python", "venv + pip"),
    ("yaml", "YAML", ""),
)
_KINDS = ("nodejs", "python", "plugins")  # the dependency metrics' kinds


def _first_and_cached(s: Summary, prefix: str, label: str, tool: str) -> str:
    """``TypeScript: 25 s (`npm ci` 17 s, plugin step 0.25 s) → 2.5 s``."""
    plugins = f"plugin step {_sig(s.get(f'{prefix}_plugins_s'))} s"
    spent = f"{tool} {_sig(s.get(f'{prefix}_deps_s'))} s, {plugins}" if tool else plugins
    return (
        f"{label}: {_sig(s.get(f'{prefix}_cold_e2e_s'))} s ({spent}) → "
        f"{_sig(s.get(f'{prefix}_cached_e2e_s'))} s"
    )


def _hits(s: Summary, kind: str) -> str:
    """``nodejs 5/5``: the cached runs' hits of all their lookups."""
    hits = s.get(f"{kind}_hits")
    return f"{kind} {_n(hits)}/{_n(hits + s.get(f'{kind}_misses'))}"


def _programs(s: Summary) -> Row:
    what = (
        "each runtime's test program: first run (create → Ready; a fresh operator's empty "
        "dependency cache, download caches and plugin store) → cached run (config PATCH → "
        f"Ready; median of {_n(s.get('runs'))}); then cached TypeScript runs interleaved "
        "with a bare `pulumi up` of the same program, as in the overhead row"
    )
    runtimes = " · ".join(_first_and_cached(s, *runtime) for runtime in _RUNTIMES)
    hits = ", ".join(_hits(s, kind) for kind in _KINDS)
    ratio, run_ratio = s.get("ts_ratio_e2e"), s.get("ts_ratio_run")
    overhead = (
        f"cached TypeScript: operator {_sig(s.get('ts_op_e2e_s'))} s, of which its run "
        f"{_sig(s.get('ts_op_run_s'))} s; bare `pulumi up` {_sig(s.get('ts_cli_up_s'))} s → "
        f"**{ratio:.2f}{TIMES}** (the run alone {run_ratio:.2f}{TIMES})"
    )
    result = f"{runtimes}; cache hits in the cached runs: {hits}; {overhead}"
    target = f"cached TypeScript ≤ 1.10{TIMES}: {_met(ratio <= 1.10)}"
    return ("programs (dependencies)", what, result, target)


def _memory(s: Summary) -> Row:
    sizes = _sizes(s, r"n(\d+)_rss_mib")
    result = " · ".join(
        f"{'empty' if n == 0 else _n(n)}: {_n(s.get(f'n{n}_rss_mib'))} MiB" for n in sizes
    )
    result += (
        f" (≈ {_sig(s.get('per_stack_kib'))} KiB per Stack; one Stack is "
        f"{_sig(s.get('obj_kib'))} KiB of JSON)"
    )
    for n in _sizes(s, r"n(\d+)_traced_rss_mib"):
        result += f"; tracing on, {_n(n)}: {_n(s.get(f'n{n}_traced_rss_mib'))} MiB"
    what = "operator RSS (`VmRSS`) after it has evaluated every cached Stack"
    return ("memory", what, result, _memory_target(s.get("n1000_rss_mib")))


def _memory_target(rss_mib: float) -> str:
    """Both targets at 1,000 Stacks: the design's < 100 MB and the tighter ≤ 60 MiB."""
    if math.isnan(rss_mib):
        return "< 100 MB, ≤ 60 MiB at 1,000: not measured at 1,000"
    below_100_mb = _met(rss_mib * 1.048576 < 100)  # MiB → MB
    return (
        f"< 100 MB at 1,000: {below_100_mb}; ≤ 60 MiB at 1,000: {_met(rss_mib <= 60)} "
        f"({rss_mib:.1f} MiB)"
    )


def _parallel(s: Summary) -> Row:
    workers = _sizes(s, r"w(\d+)_per_min")
    rates = " · ".join(
        f"{w} worker{'s' if w > 1 else ''}: {_sig(s.get(f'w{w}_per_min'))}/min" for w in workers
    )
    busy = " / ".join(_n(s.get(f"w{w}_busy_pct")) for w in workers)
    cpu = " / ".join(_sig(s.get(f"w{w}_cpu_s")) for w in workers)
    what = (
        f"{_n(s.get('updates'))} new Stacks at once, each update sleeping "
        f"{_n(s.get('delay_s'))} s in its provider; `--workers` "
        + ", ".join(str(w) for w in workers)
    )
    result = f"{rates}; CPU s per update {cpu}; machine CPUs busy {busy} %"
    return ("parallel updates", what, result, "scales with workers until the CPU is the limit")


def _startup(s: Summary) -> Row:
    what = (
        f"process start → probes answer → cache synced → all {_n(s.get('stacks'))} Stacks "
        "evaluated (no run due)"
    )
    result = (
        f"{_sig(s.get('serving_s'))} s → {_sig(s.get('synced_s'))} s → "
        f"{_sig(s.get('evaluated_s'))} s; {_n(s.get('api_calls'))} API calls "
        f"({_n(s.get('api_get'))} GET); then {_n(s.get('status_writes'))} status writes, "
        f"{_n(s.get('stack_writes'))} Stack versions, {_n(s.get('events'))} Events"
    )
    return ("start-up", what, result, "—")


POD_RATIO = 2.0  # a cached pod run against a bare `pulumi up`
WARM_RATIO = 1.2  # a run handed to a warm pod against a bare `pulumi up`


POD_LEGS = (
    ("schedule", "schedule"),
    ("start", "pod start"),
    ("checkout", "checkout"),
    ("install", "install"),
    ("cli", "CLI"),
    ("other", "other"),
)
"""A new pod's run: each ``split_<leg>_s`` and how the row names it."""
WARM_LEGS = (
    ("handover", "handover"),
    ("checkout", "checkout"),
    ("install", "install"),
    ("cli", "CLI"),
    ("operator", "the operator's own legs"),
    ("other", "other"),
)
"""A run handed to a warm pod: each ``warm_split_<leg>_s`` and how the row names it."""


def _legs(s: Summary, prefix: str, labels: tuple[tuple[str, str], ...]) -> str:
    """``label 1.2 s, …`` for each ``<prefix>_<leg>_s`` of ``labels``, in order."""
    return ", ".join(f"{label} {_sig(s.get(f'{prefix}_{leg}_s'))} s" for leg, label in labels)


def _pods(s: Summary) -> Row:
    workers = _n(s.get("workers"))
    what = (
        f"the cached TypeScript program, one run: pod runner vs local runner vs bare "
        f"`pulumi up` (medians of {_n(s.get('runs'))} interleaved runs each); where a pod "
        f"run's time goes (means of as many runs at debug level); a fleet of "
        f"{_n(s.get('stacks'))} Stacks in {_n(s.get('namespaces'))} namespaces on "
        f"{_n(s.get('nodes'))} nodes, `--workers={workers}`"
    )
    legs = _legs(s, "split", POD_LEGS)
    result = (
        f"pod runner {_sig(s.get('cost_pod_e2e_s'))} s, local runner "
        f"{_sig(s.get('cost_local_e2e_s'))} s, bare `pulumi up` {_sig(s.get('cost_cli_up_s'))} s "
        f"→ **pod {s.get('cost_pod_ratio'):.2f}{TIMES}**, local "
        f"{s.get('cost_local_ratio'):.2f}{TIMES}{_warm(s)}; a pod run "
        f"({_sig(s.get('split_e2e_s'))} s): "
        f"{legs}; or: before the agent {_sig(s.get('split_before_agent_s'))} s, the agent "
        f"{_sig(s.get('split_agent_s'))} s, after its outcome "
        f"{_sig(s.get('split_after_agent_s'))} s; spec change → run pod running "
        f"{_sig(s.get('spec_to_running_p50_s'))} / "
        f"{_sig(s.get('spec_to_running_p99_s'))} s (p50 / p99 of "
        f"{_n(s.get('samples'))}); all at once: "
        f"{_sig(s.get('pods_per_min'))} run pods/min, at most "
        f"{_n(s.get('max_concurrent_pods'))} running at once "
        f"({_n(s.get('max_existing_pods'))} with those being deleted), "
        f"{_n(s.get('idle_pods'))} left once all were Ready, placed "
        f"{s.fields.get('node_pods', '?')} on the nodes; per run "
        f"{_sig(s.get('api_per_run'))} API requests ({_sig(s.get('api_get_per_run'))} GET), "
        f"{_sig(s.get('cpu_per_run_s'))} s operator CPU, "
        f"{_sig(s.get('node_cpu_per_run_s'))} s node CPU"
    )
    bounded = s.get("max_concurrent_pods") <= s.get("workers") and s.get("idle_pods") == 0
    spread = s.get("nodes_used") == s.get("nodes")
    target = (
        f"≤ {workers} run pods at once, none left idle, every node used: "
        f"{_met(bounded and spread)}; "
        f"a cached pod run ≤ {POD_RATIO}{TIMES} a bare `pulumi up`: "
        f"{_met(s.get('cost_pod_ratio') <= POD_RATIO)}"
    )
    if "cost_warm_ratio" in s.fields:
        target += f"; within the warm window ≤ {WARM_RATIO}{TIMES}: " + _met(
            s.get("cost_warm_ratio") <= WARM_RATIO
        )
    return ("pod runner", what, result, target)


def _warm(s: Summary) -> str:
    """The warm pod's figures (``--run-pod-keep-warm``), when the line has them."""
    if "cost_warm_e2e_s" not in s.fields:
        return ""
    return (
        f", a pod kept warm {_sig(s.get('cost_warm_e2e_s'))} s "
        f"(**{s.get('cost_warm_ratio'):.2f}{TIMES}**; {_n(s.get('cost_warm_reused'))} runs "
        f"handed to it, {_n(s.get('cost_warm_created'))} pod created, "
        f"{_n(s.get('cost_warm_idle_pods'))} idle after){_warm_split(s)}"
    )


def _warm_split(s: Summary) -> str:
    """Where a handed-over run's time goes (``warm_split_*``), when the line has it."""
    if "warm_split_e2e_s" not in s.fields:
        return ""
    legs = _legs(s, "warm_split", WARM_LEGS)
    return (
        f"; a handed-over run at debug level ({_sig(s.get('warm_split_e2e_s'))} s, "
        f"{_n(s.get('warm_split_reused'))} handed over): {legs}; of the handover, the pod's "
        f"fit {_sig(s.get('warm_split_fit_s'))} s and the take (exec, annotation) "
        f"{_sig(s.get('warm_split_take_s'))} s"
    )


ROWS: dict[str, Callable[[Summary], Row]] = {
    "latency": _latency,
    "saturation": _saturation,
    "idle": _idle,
    "overhead": _overhead,
    "programs": _programs,
    "memory": _memory,
    "parallel": _parallel,
    "pods": _pods,
    "startup": _startup,
}


# -- the block ----------------------------------------------------------------------------


def _header(results: Mapping[str, Summary]) -> str:
    m = results.get("machine")
    if m is None:
        return "Machine: not recorded."
    minutes = m.get("duration_s") / 60
    return (
        f"Last run {m.text('date')}: {_n(m.get('cores'))} cores ({m.text('cpu')}), Python "
        f"{m.text('python')}, scale {m.text('scale')}. The machine is shared: 1-minute load "
        f"average {m.get('load1_start'):.2f} at the start, {m.get('load1_mean'):.2f} on "
        f"average, {m.get('load1_max'):.2f} at most. The whole run (test bed, seeding, every "
        f"benchmark) took {minutes:.0f} min; each ratio compares figures from this one run."
    )


def _table(results: Mapping[str, Summary]) -> list[str]:
    lines = ["| benchmark | what is measured | result | target |", "| --- | --- | --- | --- |"]
    for name, row_of in ROWS.items():
        summary = results.get(name)
        if summary is None or "error" in summary.fields:
            why = summary.text("error") if summary else "not run"
            lines.append(f"| {name} | — | {why} | — |")
            continue
        lines.append("| " + " | ".join(row_of(summary)) + " |")
    return lines


_FLEET_NOTE = (
    "- *Ready fleets without real updates.* Each fleet Stack pins `spec.commit` and is "
    "created with the operator's finalizer; its status is then written through the status "
    "subresource as the operator writes it after a successful `up` (`Ready=True Succeeded`, "
    "`observedGeneration` = `lastUpdate.generation` = generation, `lastUpdate.state: "
    "succeeded`, `lastAttemptedCommit` = `lastSuccessfulCommit` = the commit, `failures: 0`, "
    "outputs, one history entry). `reconcile/decide.py` then finds no run due, and the "
    "operator indeed does nothing: the start-up and idle rows count its status PATCHes, every "
    "Stack version on an independent watch, and the Events."
)
_IDLE_NOTE = (
    "- *Idle API requests:* an idle operator's only request is its watch, one long-lived GET "
    "that the informer renews every 5 to 10 minutes (a random server-side timeout), so the "
    "whole fleet costs 6 to 12 requests an hour, not a number per Stack; re-evaluations "
    "read the informer's cache. A window shorter than the renewal may see none."
)
_LATENCY_NOTE = (
    "- *Latency* runs from just before the PATCH is sent, so it includes that request's "
    "round trip. The change points `spec.repoDir` at a missing directory, so the run it "
    "starts ends at once (`ProgramInvalid`, no Pulumi CLI); each change waits for the "
    "previous run to end, so a worker is free, as in a mostly idle fleet. *Under "
    "saturation* no worker is free: the operator runs with `--workers=2` and a "
    "per-namespace cap of 2, two slow Stacks' updates (a 600 s provider sleep) hold both, "
    "and the changes do not wait for their runs; the acknowledger, an informer handler with "
    "a thread of its own, writes `Reconciling=True` with the new `observedGeneration` "
    "without a worker. The row fails unless both slow updates still run when the sampling "
    "ends."
)
_OVERHEAD_NOTE = (
    "- *Overhead:* the operator's time runs from the spec PATCH to the watch seeing "
    "`Ready=True` for the new generation. It includes the checkout and one CLI call, "
    "`up`, as for the bare CLI: the stack was selected once before, which the Stack's "
    "home remembers, and the config is written into the stack settings file; the outputs "
    "and change counts come from `up`'s engine events (its `--event-log`). The bare CLI's "
    "time is "
    "`pulumi up --yes --skip-preview` alone, its config set beforehand. "
    '"The run alone" is `status.history[0].durationSeconds`.'
)
_PROGRAMS_NOTE = (
    "- *Programs* (`testbed/programs/{node,python,yaml}-outputs`: no resources, each exports "
    "its `value` config) run under an operator with a `--work-dir` of its own, so each first "
    "run finds an empty dependency cache (environments, and the npm and pip download caches "
    "kept beside them) and plugin store: it installs from the public npm registry or PyPI "
    "(their speed at that moment is part of the time), runs the plugin step (`pulumi install "
    "--no-dependencies`), creates the stack and runs `up`. The install times are the "
    "operator's `pulumi_stack_dependency_install_duration_seconds`. A cached run changes "
    "only the config, so the unchanged program finds its environment by content key and "
    "the plugin step is skipped; the hit counts are the operator's "
    "`pulumi_stack_dependency_cache_{hits,misses}_total` during those runs. The TypeScript "
    "comparison is the overhead row's method on that program: the bare CLI's copy has "
    "`node_modules` of its own (`npm ci` once, untimed), the operator's links the cached one."
)
_PARALLEL_NOTE = (
    "- *Parallel:* CPU s per update count the operator and everything it ran (git, the "
    "Pulumi CLI, the language host, the program and its provider, each a new process); "
    '"busy" is the whole machine, other users included. Throughput stops growing once '
    "workers times CPU per update, divided by (sleep + CPU per update), reaches the number "
    "of cores."
)
_PODS_NOTE = (
    "- *Pod runner* (`bench/pods/`): a node cluster of the benchmark's own (control plane, "
    "scheduler, controller-manager, and two nodes, each a kubelet and containerd in a "
    "network namespace of its own, the operator's image imported into each), operators as "
    "processes on this machine against it, with their defaults. Both nodes share this "
    "machine's two cores with the control plane and the operator: a second node adds "
    "placement, not CPU. Cost: the programs row's `node-outputs` as a Stack under "
    "`--runner=pod` (its namespace's state and dependency cache claims mounted into the run "
    "pods), as a Stack under the local runner, and as a bare `pulumi up`, after an untimed "
    "first run each, in interleaved rounds whose order rotates; a Stack's time runs from "
    "just before its PATCH until the bench's watch sees `Ready=True` for the new "
    "generation. Split: the pod Stack's runs again under an operator at "
    "`--log-level=debug`, each run pod kept (`workspaceReclaimPolicy: Retain`) until the "
    "bench has read it and its log, then deleted before the next run: schedule (pod "
    "created → `PodScheduled`) and pod start (→ the checkout init container running: "
    "sandbox, image, volumes) come from the pod's own object, whose times are whole "
    "seconds; checkout, install and CLI are the "
    "agent's own measurements (`in_runner_*_s` of the `Run timed` line); other is the rest "
    "of that run's PATCH → Ready (operator, container starts, the agent's own start-up, "
    "the status write). The same run cut at the agent's first log line and its outcome line "
    "(the kubelet's timestamps, sub-second): before the agent (the operator, the pod's "
    "start, the checkout container, the agent's start-up), the agent, and after its "
    "outcome (the operator reading it, releasing the pod, concluding the run and writing "
    "the status; the run concludes at the outcome line, not at the container's end). Each "
    "leg is a mean over the runs: a leg between whole-second times is off by the runs' "
    "sub-second phases, which the mean evens out, and the means add up to the mean PATCH → "
    "Ready. Fleet: 100 Stacks in 10 namespaces; one spec change at a time for 20 of them, "
    "timed until the bench's pod watch sees the run's container started; then "
    "every Stack changed at once: run pods created (`pulumi_stack_run_pods_created`) per "
    "minute of the makespan (first PATCH → last Ready), the most run pods at once not being "
    "deleted on the pod watch (at most `--workers`) and those left once all were Ready, how "
    "many of the burst's run pods each node was given (`spec.nodeName`), and per run the "
    "operator's `rest_client_requests_total`, its own CPU time (`/proc/<pid>/stat` utime + "
    "stime, children not counted) and the nodes' CPU time (every pod's cgroup: the run "
    "pods' init container and agent, the CLI and the program)."
)
_MEMORY_NOTE = (
    "- *Memory* is the operator process alone (`/proc/<pid>/status`); Pulumi runs in child "
    "processes and is not included. The operator does not import the Pulumi SDK (it finds "
    "and drives the CLI itself), and its cache keeps each object's managedFields in short "
    "form (who wrote which top-level field), its keys and short strings interned. Once the "
    "cache has synced it hands the first list's freed heap back to the OS (`malloc_trim`) "
    "and freezes the survivors out of the cyclic GC's passes (`gc.freeze`); glibc's "
    "malloc arenas are capped at 2."
)
_PEER_NOTE = (
    "- *Side by side:* the scenario is `bench/peer/scenario.py`'s, run for each operator in "
    "turn on a fresh control plane. Acknowledgment is the first Stack version after the "
    "PATCH that shows `Reconciling=True` for the new generation; PKO v1 writes that as "
    "its reconcile starts, without the new `observedGeneration` (kstatus reads it as "
    "not yet observed), and records the generation only when the reconcile ends. "
    "Verdicts are what kstatus (the port in `testbed/kstatus.py`) concludes from each "
    "version, repeats collapsed. Idle counts every Stack version on the bench's watch, "
    "Events in the namespace, `pulumi` runs (a counting wrapper on both operators' "
    "`PATH`) and upload-pack requests at the git daemon. PKO clones with go-git inside "
    "its process; ours runs git. RSS is the operator process alone, children excluded, "
    "for both."
)


# -- the side-by-side table ---------------------------------------------------------------

PEER_HEAD = (
    "| measured | this operator | Pulumi operator v1.16 | PKO ÷ ours |",
    "| --- | --- | --- | --- |",
)


def _peer_rows(p: Summary) -> list[tuple[str, str, str, str]]:
    small, large = _n(p.get("small")), _n(p.get("large"))

    def both(key: str, unit: str, scale: float = 1.0) -> tuple[str, str, str]:
        ours, theirs = p.get(f"pso_{key}") * scale, p.get(f"pko_{key}") * scale
        ratio = f"{theirs / ours:.2f}{TIMES}" if ours and theirs and unit != "%" else "—"
        return f"{_sig(ours)} {unit}".strip(), f"{_sig(theirs)} {unit}".strip(), ratio

    def words(key: str) -> tuple[str, str, str]:
        return (
            p.text(f"pso_{key}").replace(">", " → "),
            p.text(f"pko_{key}").replace(">", " → "),
            "—",
        )

    ours_idle, their_idle = (
        " / ".join(_n(p.get(f"{side}_idle_{k}")) for k in ("writes", "events", "pulumi", "git"))
        for side in ("pso", "pko")
    )
    window, fail = _n(p.get("idle_window")), _n(p.get("fail_window"))
    return [
        ("start-up: spawn → first status write", *both("startup_s", "s")),
        (f"spawn → all {small} Stacks Ready (their first `up`)", *both("ready_s", "s")),
        ("spec PATCH → first status saying `Reconciling=True`", *both("ack_ms", "ms")),
        ("… of which carried the new `observedGeneration`", *both("ack_observes", "%", 100)),
        ("spec PATCH → `Ready=True` for the new generation", *both("applied_s", "s")),
        ("kstatus, version by version, during that run", *words("run_verdicts")),
        (f"kstatus after a failing `up` (PATCH + {fail} s)", *words("fail_verdicts")),
        ("… the first version saying `lastUpdate.state: failed`: Ready", *words("fail_ready")),
        ("… Reconciling", *words("fail_reconciling")),
        ("… Stalled", *words("fail_stalled")),
        (
            "… its `observedGeneration` names the failed generation",
            *both("fail_observes", "%", 100),
        ),
        (f"`pulumi up` runs in those {fail} s (the first and retries)", *both("fail_runs", "")),
        (f"RSS with {small} Stacks", *both("rss_small_mib", "MiB")),
        (f"RSS with {large} Stacks", *both("rss_large_mib", "MiB")),
        (
            (
                f"idle {window} s with {large} Ready Stacks: Stack versions / Events / "
                "`pulumi` runs / git requests"
            ),
            ours_idle,
            their_idle,
            "—",
        ),
        (f"… operator CPU in those {window} s", *both("idle_cpu_s", "s")),
    ]


def _peer(results: Mapping[str, Summary]) -> list[str]:
    p = results.get("peer")
    if p is None or "error" in p.fields:
        why = p.text("error") if p else "not run"
        return ["Side by side with the Pulumi Kubernetes Operator v1.16: " + why + "."]
    lines = [
        (
            "Side by side with the Pulumi Kubernetes Operator v1.16 (`bench=peer`, same run): the "
            "same Pulumi YAML program (no resources, nothing to install), git daemon, pinned "
            "commit and Pulumi CLI; a control plane and a `file://` backend each; each operator "
            "as shipped (ours: local runner, 2 workers; PKO: its Deployment's arguments, 10 "
            "workers)."
        ),
        "",
        *PEER_HEAD,
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _peer_rows(p)]
    return lines


def _notes(results: Mapping[str, Summary]) -> list[str]:
    seed = results.get("seed")
    seeded = (
        f" Creating {_n(seed.get('stacks'))} such Stacks took {_sig(seed.get('seconds'))} s "
        f"({_n(seed.get('per_s'))} per second, 8 threads, a create and a status write each)."
        if seed
        else ""
    )
    return [
        "Notes:",
        "",
        _FLEET_NOTE + seeded,
        _IDLE_NOTE,
        _LATENCY_NOTE,
        _OVERHEAD_NOTE,
        _PROGRAMS_NOTE,
        _PARALLEL_NOTE,
        _PODS_NOTE,
        _MEMORY_NOTE,
        _PEER_NOTE,
    ]


def _raw(results: Mapping[str, Summary]) -> list[str]:
    lines = [summary.line() for summary in results.values()]
    return [
        "<details><summary>The summary lines</summary>",
        "",
        "```text",
        *lines,
        "```",
        "",
        "</details>",
    ]


def render(results: Mapping[str, Summary]) -> str:
    """The Markdown between the page's markers, from one run's summary lines."""
    parts = [
        _header(results),
        "",
        *_table(results),
        "",
        *_peer(results),
        "",
        *pko_v2_page.block(results.get("pko-v2")),
        "",
        *_notes(results),
        "",
        *_raw(results),
    ]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.readme [results]``: rewrite ``PAGE``'s table from a results file."""
    args = sys.argv[1:] if argv is None else list(argv)
    results = load(Path(args[0]) if args else RESULTS)
    rewrite(PAGE, render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
