"""Overhead: an operator-driven ``pulumi up`` against the same ``up`` with the bare CLI.

Two stacks of the same ``files`` program share the test bed's ``file://`` backend: one is a
Stack reconciled by the operator (2 workers, nothing else to do), the other a copy of the
program driven by hand with the CLI. After one warm-up update each, every run changes the
program's ``content`` config on both sides (one resource updated), alternating which side
goes first. Times, all wall clock:

- ``cli_up_s``: ``pulumi up --yes --skip-preview --non-interactive`` from spawn to exit, the
  config already set (``cli_config_s``: the ``pulumi config set`` before it, not counted);
- ``op_e2e_s``: from just before the Stack's spec PATCH until the bench's watch sees
  ``Ready=True`` for the new generation: queueing, status writes, the source checkout, and
  the runner's ``stack select --create`` and ``up`` (the config goes into the stack
  settings file; outputs and change counts come from its engine events) — everything the
  user waits for;
- ``op_run_s``: the operator's own ``status.history[0].durationSeconds`` of that run, from
  the runner's start to its end (select, up), without queueing, checkout and
  status writes.

Ratios are of the medians over the runs, all measured in this one run: ``ratio_e2e`` =
``op_e2e_s / cli_up_s`` (the headline, judged against the 1.10 target), ``ratio_run`` =
``op_run_s / cli_up_s``.

The breakdown: the same rounds again with the operator at ``--log-level=debug`` (apart
from the headline, which debug logging would slow), read from its log: ``op_cli_up_s``,
the operator's own ``pulumi up`` call (``pulumi command``), and the legs around it
(``Run timed``: ``op_announce_s``, ``op_checkout_s``, ``op_conclude_s``; medians), with
``debug_cli_up_s``, the bare CLI's ``up`` in those rounds. ``ratio_cli`` =
``op_cli_up_s / debug_cli_up_s``: how much slower the very same CLI command runs under
the operator (the machine shared with it and the API server) than alone.

Whose that is: the debug rounds have a third side, ``flagged_cli_up_s``, the bare CLI's
``up`` on a stack of its own run as the runner runs it (its engine flags, an
``--event-log`` file, ``PULUMI_DEBUG_COMMANDS`` and ``PULUMI_AUTOMATION_API``), beside
the same idle operator. ``ratio_flags`` = ``flagged_cli_up_s / debug_cli_up_s`` is the
CLI's own cost of being driven that way (writing every engine event); ``ratio_operator``
= ``op_cli_up_s / flagged_cli_up_s`` is what is left: the operator following the events
while the CLI runs, and any difference of environment.

Tracing's cost: the same rounds once more with the operator tracing
(``--otel-endpoint``) to the test bed's OpenTelemetry Collector, the CLI exporting the
engine's spans there too: ``traced_op_e2e_s`` and ``traced_cli_up_s`` (the bare CLI,
untraced, in those rounds), ``ratio_traced`` = their quotient, to set beside
``ratio_e2e``; ``traced_spans_per_run``, what the Collector received per run (the
operator's and the CLI's), proves the runs were traced. The headline rounds run with
tracing off, the default, in which the operator loads no OpenTelemetry code.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from bench.context import Context
from bench.fleet import GROUP, PLURAL, VERSION, manifest, stack_spec
from bench.operator import Operator
from bench.stats import Summary, median
from bench.testbed import PROGRAM, TestBed
from bench.watch import StackWatch, ready
from testbed.assets import find_built
from testbed.otel_collector import OtelCollector
from testbed.pulumi_env import PulumiEnv
from workspace.runner.attempt import ENGINE_FLAGS
from workspace.runner.cli import FIXED_ENV

UPDATE_TIMEOUT = 300.0


class BareCli:
    """A copy of the program and a stack in it, driven by the plain ``pulumi`` CLI."""

    def __init__(
        self, bed: TestBed, stack: str, program: Path = PROGRAM, *, as_runner: bool = False
    ) -> None:
        """Copy ``program`` and make a Pulumi environment on the test bed's backend.

        ``as_runner``: engine operations (``up``) get the runner's flags, an
        ``--event-log`` file and its fixed environment, as the operator's CLI does.
        """
        suffix = secrets.token_hex(3)
        self.dir = shutil.copytree(program, bed.root / f"cli-program-{suffix}")
        home = bed.root / f"cli-home-{suffix}"
        home.mkdir()
        pulumi = PulumiEnv(bin_dir=bed.pulumi_bin, home=home, backend_dir=bed.backend)
        self.env = {**os.environ, **pulumi.env, **(FIXED_ENV if as_runner else {})}
        self.stack = stack
        self.events = bed.root / f"cli-events-{suffix}.jsonl" if as_runner else None

    def __call__(self, *args: str) -> float:
        """Run ``pulumi <args> --stack <stack>``; returns its wall time (s)."""
        argv = ["pulumi", *args, *self._engine(args), "--stack", self.stack, "--non-interactive"]
        started = time.monotonic()
        done = subprocess.run(
            argv, cwd=self.dir, env=self.env, capture_output=True, text=True, check=False
        )
        took = time.monotonic() - started
        if done.returncode != 0:
            msg = f"{' '.join(args)} failed: {done.stderr.strip()[-2000:]}"
            raise RuntimeError(msg)
        return took

    def _engine(self, args: Sequence[str]) -> list[str]:
        """The runner's engine flags for an ``up`` when driven as the runner (a fresh log)."""
        if self.events is None or args[:1] != ("up",):
            return []
        self.events.write_text("")
        return [*ENGINE_FLAGS, "--event-log", str(self.events)]

    def create(self) -> None:
        """Create the stack (``pulumi stack init``)."""
        argv = ["pulumi", "stack", "init", self.stack, "--non-interactive"]
        subprocess.run(argv, cwd=self.dir, env=self.env, capture_output=True, check=True)

    def init(self, path: Path) -> None:
        """Create the stack and its config."""
        self.create()
        self("config", "set", "path", str(path))


Side = Callable[[str], None]
"""One side of a comparison: makes and times one change to the value it is given."""


def alternate(
    progress: Callable[[str], None], what: str, runs: int, sides: Sequence[Side], prefix: str
) -> None:
    """``runs`` rounds of all ``sides``, each round's order rotated by one from the last.

    Round 1 runs ``sides`` in order, round 2 starts with the second side, and so on (two
    sides: the first goes first in odd rounds). Each side gets the round's value
    ``<prefix><round>``; rotating the order makes a drift in the machine's load fall on
    every side alike. ``progress`` hears of each round, in a line starting with ``what``.
    """
    for index in range(1, runs + 1):
        progress(f"{what} run {index} of {runs}")
        turn = (index - 1) % len(sides)
        for side in [*sides[turn:], *sides[:turn]]:
            side(f"{prefix}{index}")


def run(ctx: Context) -> Summary:
    """Interleave operator and CLI updates; one summary line with medians and ratios."""
    bed = ctx.bed
    namespace = bed.namespace("overhead")
    cli = BareCli(bed, f"cli-{secrets.token_hex(3)}")
    cli.init(bed.backend.parent / f"{cli.stack}.txt")
    flagged = BareCli(bed, f"flagged-{secrets.token_hex(3)}", as_runner=True)
    flagged.init(bed.backend.parent / f"{flagged.stack}.txt")
    with StackWatch(bed.api, namespace) as watch:
        sides = _Sides(ctx, watch, cli, namespace, flagged)
        with Operator(bed, namespace):
            ctx.progress("overhead: warm-up update on each side")
            sides.warm_up()
            alternate(
                ctx.progress, "overhead:", ctx.scale.overhead_runs, (sides.operator, sides.cli), "v"
            )
        headline = sides.summary()
        sides.samples["cli"] = []
        with Operator(bed, namespace, "--log-level=debug") as debug:
            alternate(
                ctx.progress, "overhead (debug):", ctx.scale.overhead_runs,
                (sides.operator, sides.cli, sides.flagged), "d",
            )  # fmt: skip
        legs = run_legs(debug.log.read_text(errors="replace"), sides.name)
        debug_cli = median(sides.samples["cli"])
        flagged_cli = median(sides.samples["flagged"])
        traced = _traced(ctx, sides, namespace)
    missing = [leg for leg, values in legs.items() if not values]
    if missing:
        msg = f"the debug operator's log has no {missing} for {sides.name}: did its lines change?"
        raise RuntimeError(msg)
    return headline.extended(
        debug_cli_up_s=debug_cli,
        **{f"op_{leg}_s": median(values) for leg, values in legs.items()},
        ratio_cli=median(legs["cli_up"]) / debug_cli,
        flagged_cli_up_s=flagged_cli,
        ratio_flags=flagged_cli / debug_cli,
        ratio_operator=median(legs["cli_up"]) / flagged_cli,
        **traced,
    )


def _traced(ctx: Context, sides: _Sides, namespace: str) -> dict[str, float]:
    """The rounds once more with the operator tracing to a real Collector (module doc)."""
    runs = ctx.scale.overhead_runs
    with OtelCollector(find_built("otel"), ctx.bed.root / "otelcol") as collector:
        flag = f"--otel-endpoint={collector.grpc_endpoint}"
        sides.samples["e2e"], sides.samples["cli"] = [], []
        with Operator(ctx.bed, namespace, flag):
            alternate(ctx.progress, "overhead (traced):", runs, (sides.operator, sides.cli), "t")
        spans = collector.spans()  # the operator flushed them as it stopped
    e2e, up = median(sides.samples["e2e"]), median(sides.samples["cli"])
    if not any(s.service == "pulumi-cli" for s in spans):
        msg = "the traced rounds sent the Collector no span of the CLI's: was tracing on?"
        raise RuntimeError(msg)
    return {
        "traced_op_e2e_s": e2e,
        "traced_cli_up_s": up,
        "ratio_traced": e2e / up,
        "traced_spans_per_run": len(spans) / runs,
    }


RUN_LEGS = ("announce", "checkout", "conclude", "cli_up")


def run_legs(log: str, name: str) -> dict[str, list[float]]:
    """The debug log's ``Run timed`` legs and ``pulumi command`` ``up`` seconds of ``name``."""
    legs: dict[str, list[float]] = {leg: [] for leg in RUN_LEGS}
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("name") != name:
            continue
        if entry.get("event") == "Run timed":
            for leg in RUN_LEGS[:3]:
                legs[leg].append(float(entry[f"{leg}_s"]))
        elif entry.get("event") == "pulumi command" and entry.get("command") == "up":
            legs["cli_up"].append(float(entry["seconds"]))
    return legs


class _Sides:
    """The two sides of the comparison and the times they took."""

    def __init__(
        self, ctx: Context, watch: StackWatch, cli: BareCli, namespace: str, flagged: BareCli
    ) -> None:
        self._api = client.CustomObjectsApi(ctx.bed.api)
        self._bed, self._watch, self._cli, self._namespace = ctx.bed, watch, cli, namespace
        self._flagged = flagged
        self.name = self._name = f"op-{secrets.token_hex(3)}"
        self.samples: dict[str, list[float]] = {
            "e2e": [], "run": [], "cli": [], "config": [], "flagged": [],
        }  # fmt: skip

    def warm_up(self) -> None:
        """Create the Stack and the CLI's first update (untimed)."""
        spec = stack_spec(self._bed, self._name, content="v0")
        self._api.create_namespaced_custom_object(
            GROUP, VERSION, self._namespace, PLURAL, manifest(self._name, spec)
        )
        self._watch.wait_for(ready(self._name, 1), UPDATE_TIMEOUT)
        for cli in (self._cli, self._flagged):
            cli("config", "set", "content", "v0")
            cli("up", "--yes", "--skip-preview")

    def operator(self, content: str) -> None:
        """Patch the Stack's config; time until Ready for the new generation."""
        body = {"spec": {"config": {"content": content}}}
        sent = time.monotonic()
        obj = cast(
            "dict[str, Any]",
            self._api.patch_namespaced_custom_object(
                GROUP, VERSION, self._namespace, PLURAL, self._name, body
            ),
        )
        generation = int(obj["metadata"]["generation"])
        seen = self._watch.wait_for(ready(self._name, generation), UPDATE_TIMEOUT)
        self.samples["e2e"].append(seen.arrived - sent)
        self.samples["run"].append(float(seen.obj["status"]["history"][0]["durationSeconds"]))

    def cli(self, content: str) -> None:
        """Set the config with the CLI (timed apart), then time ``pulumi up``."""
        self.samples["config"].append(self._cli("config", "set", "content", content))
        self.samples["cli"].append(self._cli("up", "--yes", "--skip-preview"))

    def flagged(self, content: str) -> None:
        """As ``cli``, on the stack driven with the runner's flags and environment."""
        self._flagged("config", "set", "content", content)
        self.samples["flagged"].append(self._flagged("up", "--yes", "--skip-preview"))

    def summary(self) -> Summary:
        """Medians and ratios."""
        samples = self.samples
        e2e, run, up = (median(samples[k]) for k in ("e2e", "run", "cli"))
        return Summary.of(
            "overhead",
            runs=len(samples["cli"]),
            op_e2e_s=e2e,
            op_run_s=run,
            cli_up_s=up,
            cli_config_s=median(samples["config"]),
            ratio_e2e=e2e / up,
            ratio_run=run / up,
            op_e2e_min_s=min(samples["e2e"]),
            cli_up_min_s=min(samples["cli"]),
        )
