"""Find or build the binaries the test suite and ``make dev`` run.

The command line of ``hack/test-assets`` (``python3 -m testbed.assets``):
``[--print-env] [--no-build] [--with node|helm|pko|kubernetes|flux|otel|testfile]``.

Provides ``main``. It finds every binary the tests always run, plus the optional recipes
named with ``--with``, building the missing ones longest first, ``TEST_ASSET_JOBS`` at a
time (default 1: ``go build`` already uses every core, and on two cores three builds side
by side took 23 minutes where one at a time took 16), every recipe with the one Go build
cache.

Guarantees: stdout holds only ``TEST_ASSET_*=<path>`` lines (``export …`` with
``--print-env``), so it can be ``eval``-ed; progress, each build's cost and the total time
go to stderr. Exit 0 when everything was found or built, 1 (with the reason on stderr)
otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.assets.core import AssetError, cache_root, log, logged_as
from testbed.assets.lookup import (
    RECIPES,
    Assets,
    env_name,
    find_built,
    find_kube_binary,
    find_pulumi,
)
from testbed.assets.store import COSTS


def _jobs() -> int:
    try:
        return max(1, int(os.environ.get("TEST_ASSET_JOBS", "1")))
    except ValueError:
        return 1


def _tasks(extra: Sequence[str], *, build: bool) -> dict[str, Callable[[], Path]]:
    """One task per recipe to find (or build), the longest builds first.

    The node's binaries come after kube-apiserver's in one task, so that the packages they
    share are compiled once, into the build cache.
    """

    def kube() -> Path:
        found = find_kube_binary("kube-apiserver", build=build)
        if "node" in extra:
            find_built("node", build=build)
        return found

    tasks: dict[str, Callable[[], Path]] = {}
    for name in ("kubernetes", "flux", "pko", "otel", "testfile"):
        if name in extra:
            tasks[name] = lambda name=name: find_built(name, build=build)  # type: ignore[misc]
    tasks["pulumi"] = lambda: find_pulumi(build=build)
    tasks["kube"] = kube
    if "helm" in extra:
        tasks["helm"] = lambda: find_built("helm", build=build)
    tasks["etcd"] = lambda: find_kube_binary("etcd", build=build)
    return tasks


def _find_all(extra: Sequence[str], *, build: bool) -> tuple[Assets, dict[str, str]]:
    """Find every binary, building the missing recipes ``_jobs()`` at a time."""
    with ThreadPoolExecutor(max_workers=_jobs()) as pool:
        futures = {
            key: pool.submit(logged_as(key, task))
            for key, task in _tasks(extra, build=build).items()
        }
        found = {key: future.result() for key, future in futures.items()}
    assets = Assets(
        etcd=found["etcd"],
        kube_apiserver=found["kube"],
        kubectl=find_kube_binary("kubectl", build=build),
        pulumi_bin=found["pulumi"],
    )
    extras = {
        f"{env_name(RECIPES[name].name)}_DIR": str(find_built(name, build=build)) for name in extra
    }
    return assets, extras


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/test-assets", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--print-env", action="store_true", help="print TEST_ASSET_* lines for `eval`/`export`"
    )
    parser.add_argument(
        "--no-build", action="store_true", help="fail instead of building what is missing"
    )
    parser.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        choices=("node", "helm", "pko", "kubernetes", "flux", "otel", "testfile"),
        help=(
            "also find or build the node's binaries, helm, PKO v1, the Kubernetes provider, "
            "the Flux source-controller or the OpenTelemetry Collector (repeatable)"
        ),
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: find or build, then print where everything is."""
    args = _parser().parse_args(argv)
    started = time.monotonic()
    try:
        assets, extras = _find_all(list(dict.fromkeys(args.extra)), build=not args.no_build)
    except AssetError as err:
        print(f"hack/test-assets: {err}", file=sys.stderr)  # noqa: T201 - the command's output
        return 1
    for key, value in {**assets.env(), **extras}.items():
        print(f"export {key}={value}" if args.print_env else f"{key}={value}")  # noqa: T201
    for name, seconds in COSTS.items():
        log(f"cost: {name} {seconds:.0f}s")
    log(f"ready in {time.monotonic() - started:.1f}s (cache {cache_root()})")
    return 0
