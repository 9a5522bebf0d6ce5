"""``python -m bench`` (``make bench``): run the benchmarks, print one line each, update the docs.

Starts the test bed once, runs the selected benchmarks in a fixed order (first those with
namespaces of their own: overhead, programs (whose operator also has a work dir of its own,
so its caches start cold) and parallel; then pods, on a node cluster of its own (a real
kubelet runs each operation in a pod); then the shared fleet of idle Stacks only grows:
latency 1 → 100 → 1,000, then latency under saturation, start-up and idle at 1,000, then
memory up to 10,000, then the Pulumi operator v1.16 side by side on control planes of their
own, then PKO v2 beside our pod runner on a node cluster: skipped, saying why, unless
``PKO_V2_SOURCE`` names its source tree, ``bench.peer.pko_v2``), prints each summary line
on stdout as soon as it is known, and progress on stderr. At
the end it adds a ``bench=seed`` line (how long creating the fleet took) and a
``bench=machine`` line (cores, CPU, Python, date, load averages during the run, duration),
writes all lines to ``--out``, and, after a full run (every benchmark, full scale), rewrites
the results table of ``docs/benchmarks.md`` through ``bench.readme``. A benchmark that fails prints
``bench=<name> error=<ExceptionType>`` and the run goes on; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import (
    idle,
    latency,
    machine,
    memory,
    overhead,
    parallel,
    peer,
    pods,
    programs,
    readme,
    saturation,
    startup,
)
from bench.context import Context, Scale, progress_printer
from bench.fleet import Fleet
from bench.peer import pko_v2
from bench.signals import take_signals
from bench.stats import Summary
from bench.testbed import REPO, started

Benchmark = Callable[[Context], Summary]
BENCHMARKS: dict[str, Benchmark] = {
    "overhead": overhead.run,
    "programs": programs.run,
    "parallel": parallel.run,
    "pods": pods.run,
    "latency": latency.run,
    "saturation": saturation.run,
    "startup": startup.run,
    "idle": idle.run,
    "memory": memory.run,
    "peer": peer.run,
    "pko-v2": pko_v2.run,
}
DEFAULT_OUT = Path("bench") / "results.txt"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; ``--help`` documents it."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark the operator on the real test bed; one summary line each.",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        help="run only this benchmark (repeatable; default: all, in the order listed)",
    )
    parser.add_argument(
        "--stacks",
        type=int,
        help="fleet size instead of 1,000 (latency uses 1, N/10, N; memory N, 5N and 10N)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small, short smoke run (fleet of 50)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"file for the summary lines (default: {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--no-readme",
        action="store_true",
        help="do not rewrite docs/benchmarks.md's table (partial and quick runs never do)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the test bed's directory (logs, state)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; 0 when every one produced its line."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    take_signals()  # SIGTERM unwinds; children get SIGINT's default action
    began = time.monotonic()
    say = progress_printer(began)
    scale = Scale.quick() if args.quick else Scale()
    if args.stacks:
        scale = dataclasses.replace(scale, stacks=args.stacks)
    names = [n for n in BENCHMARKS if not args.only or n in args.only]
    full = not (args.quick or args.only or args.stacks)
    load = machine.LoadSampler()
    load.start()
    say(f"machine: {_uptime()}")
    lines: list[Summary] = []
    with started("pso-bench-", keep=args.keep, say=say) as bed:
        ctx = Context(bed, Fleet(bed, say), scale, say)
        lines += [_emit(_run(name, BENCHMARKS[name], ctx, say)) for name in names]
        if ctx.fleet.names:
            lines.append(_emit(_seed_line(ctx.fleet)))
    load.stop()
    say(f"machine: {_uptime()}")
    lines.append(_emit(_machine_line(load.samples, time.monotonic() - began, scale, full=full)))
    _write(args.out, lines)
    say(f"wrote {args.out}")
    failed = [s.name for s in lines if "error" in s.fields]
    if full and not args.no_readme and not failed:
        readme.rewrite(readme.PAGE, readme.render({s.name: s for s in lines}))
        say(f"rewrote the results table of {readme.PAGE.relative_to(REPO)}")
    else:
        say(f"docs left alone; `python -m bench.readme {args.out}` rewrites them from the lines")
    return 1 if failed else 0


def _run(name: str, benchmark: Benchmark, ctx: Context, say: Callable[[str], None]) -> Summary:
    """Run one benchmark; its line gets the 1-minute load average at its end."""
    started = time.monotonic()
    try:
        summary = benchmark(ctx)
    except Exception as err:  # noqa: BLE001 - reported as the benchmark's line; the run goes on
        say(f"{name} failed:\n{traceback.format_exc()}")
        summary = Summary.of(name, error=type(err).__name__)
    say(f"{name} took {time.monotonic() - started:.0f}s")
    values: dict[str, float | str] = {**summary.fields, "load1": machine.loadavg()[0]}
    return Summary.of(summary.name, **values)


def _seed_line(fleet: Fleet) -> Summary:
    count = len(fleet.names)
    return Summary.of(
        "seed",
        stacks=count,
        seconds=fleet.seed_seconds,
        per_s=count / fleet.seed_seconds if fleet.seed_seconds else 0,
        obj_kib=fleet.object_bytes / 1024,
    )


def _machine_line(samples: Sequence[float], seconds: float, scale: Scale, *, full: bool) -> Summary:
    samples = list(samples) or [0.0]
    return Summary.of(
        "machine",
        date=machine.utc_now(),
        cores=machine.cores(),
        cpu=machine.cpu_model(),
        python=sys.version.split()[0],
        scale="full" if full else f"partial_stacks_{scale.stacks}",
        load1_start=samples[0],
        load1_max=max(samples),
        load1_mean=sum(samples) / len(samples),
        load1_end=samples[-1],
        duration_s=seconds,
    )


def _emit(summary: Summary) -> Summary:
    sys.stdout.write(summary.line() + "\n")
    sys.stdout.flush()
    return summary


def _write(path: Path, lines: Sequence[Summary]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s.line() + "\n" for s in lines), encoding="utf-8")


def _uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
