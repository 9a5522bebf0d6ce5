"""Programs with dependencies: cold and cached runs per runtime; cached TypeScript vs bare CLI.

One operator of its own, with a fresh ``--work-dir`` (so its dependency cache, the npm and
pip download caches in it, and its plugin store start empty), watches a namespace of its
own. Each test program (``testbed/programs``) is pushed to a repository of its own and run
by one Stack pinned to that commit: ``node-outputs`` (TypeScript, ``npm ci`` from its
``package-lock.json``; its summary keys start ``ts_``), ``python-outputs`` (a virtualenv
from ``requirements.txt``; ``py_``) and ``yaml-outputs`` (nothing to install, only the
plugin step; ``yaml_``). Times, all wall clock, from just before the request until the
bench's watch sees ``Ready=True`` for the new generation:

- ``<p>_cold_e2e_s``: the Stack's create until Ready for generation 1, the first run:
  checkout, dependency install, plugin step (``pulumi install --no-dependencies``), stack
  creation and ``up``; ``<p>_cold_run_s`` its ``status.history[0].durationSeconds``, and
  ``<p>_deps_s`` (not for YAML) / ``<p>_plugins_s`` the install times the operator's
  ``pulumi_stack_dependency_install_duration_seconds`` recorded for it;
- ``<p>_cached_e2e_s``, ``<p>_cached_run_s``: medians over ``runs`` (the scale's overhead
  runs, at least 3) changes of the ``value`` config, each a run of the unchanged program.
  ``<kind>_hits`` and ``<kind>_misses`` are what the operator's
  ``pulumi_stack_dependency_cache_*`` counters gained during them (kinds ``nodejs``,
  ``python``, and ``plugins`` for YAML): every one a hit means no cached run installed
  anything.

Then the TypeScript Stack's cached runs are interleaved with a bare CLI on a copy of the
same program (its ``npm ci`` run once beforehand, not timed; the same CLI, backend and
passphrase, a ``PULUMI_HOME`` of its own), alternating which side goes first, as in
``bench.overhead``: ``ts_cli_up_s`` is ``pulumi up --yes --skip-preview`` alone
(``ts_cli_config_s`` the ``pulumi config set`` before it), ``ts_op_e2e_s`` and
``ts_op_run_s`` the operator's patch → Ready and its run's own duration;
``ts_ratio_e2e = ts_op_e2e_s / ts_cli_up_s`` (judged against the 1.10 target) and
``ts_ratio_run = ts_op_run_s / ts_cli_up_s``, of the medians.
"""

from __future__ import annotations

import dataclasses
import secrets
import subprocess
import time
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from bench.context import Context
from bench.fleet import GROUP, PLURAL, VERSION, manifest, stack_spec
from bench.operator import Operator
from bench.overhead import BareCli, alternate
from bench.stats import Summary, median
from bench.testbed import REPO, TestBed
from bench.watch import Predicate, Seen, StackWatch, condition, is_true

PROGRAMS = REPO / "testbed" / "programs"
FIRST_RUN_TIMEOUT = 900.0  # seconds: registries, npm ci or pip, the plugin step, up
UPDATE_TIMEOUT = 300.0
MIN_RUNS = 3  # cached runs per program (more when the scale's overhead runs are more)
HITS = "pulumi_stack_dependency_cache_hits_total"
MISSES = "pulumi_stack_dependency_cache_misses_total"
INSTALL_SECONDS = "pulumi_stack_dependency_install_duration_seconds_sum"
PLUGINS = "plugins"  # the plugin step's kind in the dependency metrics


@dataclasses.dataclass(frozen=True)
class Runtime:
    """A test program, its summary keys' prefix and the dependency kind its runs count."""

    prefix: str
    program: str
    kind: str


RUNTIMES = (
    Runtime("ts", "node-outputs", "nodejs"),
    Runtime("py", "python-outputs", "python"),
    Runtime("yaml", "yaml-outputs", PLUGINS),
)
TYPESCRIPT = RUNTIMES[0]


def run(ctx: Context) -> Summary:
    """Cold and cached runs of each program, then the TypeScript overhead; one summary line."""
    bed = ctx.bed
    namespace = bed.namespace("programs")
    runs = max(MIN_RUNS, ctx.scale.overhead_runs)
    fields: dict[str, float | str] = {"runs": runs}
    work_dir = bed.root / f"work-{namespace}"  # fresh: every cache starts empty
    with (
        StackWatch(bed.api, namespace) as watch,
        Operator(bed, namespace, work_dir=work_dir) as operator,
    ):
        stacks = _Stacks(ctx, watch, operator, namespace)
        for runtime in RUNTIMES:
            fields |= stacks.measure(runtime, runs)
        fields |= _overhead(ctx, stacks, runs)
    return Summary.of("programs", **fields)


class _Stacks:
    """One Stack per program in the namespace, and the times of their runs."""

    def __init__(self, ctx: Context, watch: StackWatch, operator: Operator, namespace: str) -> None:
        self._ctx, self._watch, self._operator = ctx, watch, operator
        self._api = client.CustomObjectsApi(ctx.bed.api)
        self._namespace = namespace
        self.names: dict[str, str] = {}  # runtime prefix → its Stack's name

    def measure(self, runtime: Runtime, runs: int) -> dict[str, float]:
        """The program's first run, then ``runs`` cached ones; its summary fields."""
        p, kind = runtime.prefix, runtime.kind
        self._ctx.progress(f"programs: first run of {runtime.program} (cold caches)")
        before = self._installed()
        cold_e2e, cold_run = self.create(runtime)
        spent = {k: v - before[k] for k, v in self._installed().items()}
        self._ctx.progress(f"programs: {runs} cached runs of {runtime.program}")
        counts = self._counts(kind)
        cached = [self.patch(p, f"v{i}") for i in range(1, runs + 1)]
        gained = {k: v - counts[k] for k, v in self._counts(kind).items()}
        fields = {f"{p}_cold_e2e_s": cold_e2e, f"{p}_cold_run_s": cold_run}
        if kind != PLUGINS:
            fields[f"{p}_deps_s"] = spent[kind]
        fields |= {
            f"{p}_plugins_s": spent[PLUGINS],
            f"{p}_cached_e2e_s": median([e2e for e2e, _ in cached]),
            f"{p}_cached_run_s": median([run for _, run in cached]),
        }
        return fields | gained

    def create(self, runtime: Runtime) -> tuple[float, float]:
        """Create the program's Stack; (create → Ready, its run's duration)."""
        name = f"{runtime.prefix}-{secrets.token_hex(3)}"
        url, commit = self._ctx.bed.push(PROGRAMS / runtime.program, name)
        spec = {
            **stack_spec(self._ctx.bed, name),
            "projectRepo": url,
            "commit": commit,
            "config": {"value": "v0"},
        }
        sent = time.monotonic()
        self._api.create_namespaced_custom_object(
            GROUP, VERSION, self._namespace, PLURAL, manifest(name, spec)
        )
        self.names[runtime.prefix] = name
        return self._applied(name, 1, sent, FIRST_RUN_TIMEOUT)

    def patch(self, prefix: str, value: str) -> tuple[float, float]:
        """Set the ``value`` config of a program's Stack; (patch → Ready, its run's duration)."""
        name = self.names[prefix]
        body = {"spec": {"config": {"value": value}}}
        sent = time.monotonic()
        obj = cast(
            "dict[str, Any]",
            self._api.patch_namespaced_custom_object(
                GROUP, VERSION, self._namespace, PLURAL, name, body
            ),
        )
        generation = int(obj["metadata"]["generation"])
        return self._applied(name, generation, sent, UPDATE_TIMEOUT)

    def _applied(
        self, name: str, generation: int, sent: float, timeout: float
    ) -> tuple[float, float]:
        """Wait for the run of ``generation`` to end; (sent → Ready, its duration).

        Raises ``RuntimeError`` (with Ready's message) when the run failed.
        """
        seen = self._watch.wait_for(settled(name, generation), timeout)
        status = seen.obj["status"]
        if not is_true(seen.obj, "Ready"):
            ready = condition(seen.obj, "Ready") or {}
            msg = f"{name} generation {generation} failed: {ready.get('message', '?')}"
            raise RuntimeError(msg)
        return seen.arrived - sent, float(status["history"][0]["durationSeconds"])

    def _installed(self) -> dict[str, float]:
        """Seconds the operator has spent installing, by kind (its histogram's sums)."""
        kinds = {runtime.kind for runtime in RUNTIMES}
        return {kind: self._operator.counter(INSTALL_SECONDS, kind=kind) for kind in kinds}

    def _counts(self, kind: str) -> dict[str, float]:
        """``<kind>_hits`` and ``<kind>_misses`` so far."""
        return {
            f"{kind}_hits": self._operator.counter(HITS, kind=kind),
            f"{kind}_misses": self._operator.counter(MISSES, kind=kind),
        }


def settled(name: str, generation: int) -> Predicate:
    """Matches ``name`` Ready for ``generation``, or its ``lastUpdate`` failed for it."""

    def check(seen: Seen) -> bool:
        if seen.name != name:
            return False
        status: Mapping[str, Any] = seen.obj.get("status") or {}
        last = status.get("lastUpdate") or {}
        if last.get("generation") == generation and last.get("state") == "failed":
            return True
        return status.get("observedGeneration") == generation and is_true(seen.obj, "Ready")

    return check


# -- the cached TypeScript run against the bare CLI ---------------------------------------


class TypeScriptCli(BareCli):
    """``bench.overhead``'s bare CLI on a copy of ``node-outputs`` with its ``node_modules``."""

    def __init__(self, bed: TestBed, stack: str) -> None:
        """Copy the program; its own npm cache."""
        super().__init__(bed, stack, PROGRAMS / TYPESCRIPT.program)
        self.npm_cache = bed.root / f"{self.dir.name}-npm"

    def prepare(self, value: str) -> None:
        """``npm ci``, create the stack, set its config and run its first ``up`` (untimed)."""
        env = {**self.env, "npm_config_cache": str(self.npm_cache)}
        argv = ["npm", "ci", "--no-audit", "--no-fund"]
        done = subprocess.run(
            argv, cwd=self.dir, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            msg = f"npm ci failed: {done.stderr.strip()[-2000:]}"
            raise RuntimeError(msg)
        self.create()
        self("config", "set", "value", value)
        self("up", "--yes", "--skip-preview")


def _overhead(ctx: Context, stacks: _Stacks, runs: int) -> dict[str, float]:
    """Interleave the TypeScript Stack's cached runs with bare ``pulumi up``s; their fields."""
    ctx.progress("programs: the bare CLI's npm ci and first up (untimed)")
    cli = TypeScriptCli(ctx.bed, f"cli-{secrets.token_hex(3)}")
    cli.prepare("w0")
    sides = _Sides(stacks, cli)
    alternate(ctx.progress, "programs: TypeScript overhead", runs, (sides.operator, sides.cli), "w")
    return sides.fields()


class _Sides:
    """The operator's TypeScript Stack and the bare CLI, and the times they took."""

    def __init__(self, stacks: _Stacks, cli: TypeScriptCli) -> None:
        self._stacks, self._cli = stacks, cli
        self.samples: dict[str, list[float]] = {"e2e": [], "run": [], "cli": [], "config": []}

    def operator(self, value: str) -> None:
        """Patch the Stack's config; time until Ready, and its run's duration."""
        e2e, run = self._stacks.patch(TYPESCRIPT.prefix, value)
        self.samples["e2e"].append(e2e)
        self.samples["run"].append(run)

    def cli(self, value: str) -> None:
        """Set the config with the CLI (timed apart), then time ``pulumi up``."""
        self.samples["config"].append(self._cli("config", "set", "value", value))
        self.samples["cli"].append(self._cli("up", "--yes", "--skip-preview"))

    def fields(self) -> dict[str, float]:
        """Medians and ratios."""
        samples = self.samples
        e2e, run, up = (median(samples[k]) for k in ("e2e", "run", "cli"))
        return {
            "ts_op_e2e_s": e2e,
            "ts_op_run_s": run,
            "ts_cli_up_s": up,
            "ts_cli_config_s": median(samples["config"]),
            "ts_ratio_e2e": e2e / up,
            "ts_ratio_run": run / up,
            "ts_op_e2e_min_s": min(samples["e2e"]),
            "ts_cli_up_min_s": min(samples["cli"]),
        }
