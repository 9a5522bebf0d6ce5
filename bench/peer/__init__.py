"""The Pulumi Kubernetes Operator v1.16 and ours, side by side in one run (``bench=peer``).

Both operators get the same YAML program (``program/``: no resources, no plugins, so
neither installs anything), the same git daemon and pinned commit, the same Pulumi CLI
(counted, see ``bed``), a ``file://`` backend each and a control plane each, and go
through the same scenario (``scenario``), ours first. Each runs as shipped: ours with its
defaults (local runner, 2 workers), PKO with its Deployment's arguments (10 workers).

PKO v1.16 is built from its published Go module into the test-binaries cache the first
time (``testbed.assets``, recipe ``pko``; minutes), only when this benchmark runs: never for
``make test``. The YAML language host is the one beside the test bed's CLI.

The line holds each scenario field twice, prefixed ``pso_`` (ours) and ``pko_``; the
The benchmarks page's side-by-side table and its ratios are made from it by ``bench.readme``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench.context import Context
from bench.peer.bed import PeerBed
from bench.peer.operators import Ours, PeerOperator, Pko
from bench.peer.scenario import Fields, MakeOperator, PeerScale, measure
from bench.stats import Summary
from bench.testbed import STACK_CRD
from testbed.assets import find_built
from testbed.control_plane import ControlPlane

QUICK = PeerScale(small=5, large=10, samples=2, fail_window=10.0, idle_window=15.0)
FULL_STACKS = 1000  # the bench's full scale; anything smaller runs the quick peer scale


def run(ctx: Context) -> Summary:
    """Both operators through the scenario; one summary line."""
    scale = PeerScale() if ctx.scale.stacks >= FULL_STACKS else QUICK
    ctx.progress("peer: finding (or building, minutes) PKO v1.16")
    pko_built = find_built("pko")
    fields: Fields = dict(dataclasses.asdict(scale))
    with PeerBed(ctx.bed.root / "peer", ctx.bed.pulumi_bin) as bed:
        ctx.progress(f"peer: our operator, {scale.small} then {scale.large} Stacks")
        fields |= _prefixed("pso", measure(bed, "pso", STACK_CRD, _ours(bed), scale))
        ctx.progress(f"peer: PKO v1.16, {scale.small} then {scale.large} Stacks")
        pko = _pko(bed, pko_built)
        fields |= _prefixed("pko", measure(bed, "pko", pko_built / "crds", pko, scale))
    return Summary.of("peer", **fields)


def _ours(bed: PeerBed) -> MakeOperator:
    def make(plane: ControlPlane, namespace: str) -> PeerOperator:
        return Ours(bed, plane, namespace)

    return make


def _pko(bed: PeerBed, built: Path) -> MakeOperator:
    def make(plane: ControlPlane, namespace: str) -> PeerOperator:
        return Pko(bed, plane, namespace, built)

    return make


def _prefixed(label: str, fields: Fields) -> Fields:
    return {f"{label}_{key}": value for key, value in fields.items()}
