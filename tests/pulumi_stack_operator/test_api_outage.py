"""The operator process outlives a real kube-apiserver outage, with no Flux installed.

The common case: no Flux CRD, so source discovery keeps looking for the Flux kinds (every
``--source-discovery-period``, 1 s here instead of 30). kube-apiserver is killed (SIGKILL)
and stays down until discovery has looked at least once into the outage (and, with
``--leader-elect``, the elector has failed to renew), then starts again. Afterwards the
operator still runs, every thread is alive (``/healthz`` 200, no thread ended) and the
loops say they recovered.

The control plane is this module's own: the session's may carry Flux's CRDs (the Flux
tests install them), and killing its apiserver would disturb the tests beside this one.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.assets import find_pulumi
from testbed.assets.lookup import find_kube_binary
from testbed.control_plane import Binaries, ControlPlane, wait_established
from testbed.operator import Operator
from testbed.rbac import operator_kubeconfig
from testbed.waits import wait_for
from tests.conftest import PROGRAM_CRD, STACK_CRD

pytestmark = [pytest.mark.integration, pytest.mark.pulumi]

NAMESPACE = "outage"
FLUX_GROUP = "source.toolkit.fluxcd.io"
TIMEOUT = 60.0  # seconds a process may take to get where the test waits for it
DISCOVERY = "source discovery"
ELECTION = "leader election"


@pytest.fixture(scope="module")
def own_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane for this module alone, with the Stack and Program CRDs, no Flux."""
    binaries = Binaries(*(find_kube_binary(b) for b in ("etcd", "kube-apiserver", "kubectl")))
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("outage-control-plane"))
    try:
        plane.start()
        for crd in (STACK_CRD, PROGRAM_CRD):
            plane.kubectl("apply", "--server-side", "-f", str(crd))
        wait_established(plane.kubectl, "stacks.pulumi.com")
        wait_established(plane.kubectl, "programs.pulumi.com")
        yield plane
    finally:
        plane.stop()


def flux_served(plane: ControlPlane) -> bool:
    """Whether the API server serves any version of Flux's source group."""
    with plane.api_client() as api:
        groups = client.ApisApi(api).get_api_versions().groups
    return any(group.name == FLUX_GROUP for group in groups)


def log_lines(operator: Operator, since: int) -> list[dict[str, Any]]:
    """The operator's JSON log lines from byte ``since`` of its log on."""
    with operator.log.open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    lines = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"event": line}  # a line of something else (a traceback, say)
        if isinstance(entry, dict):
            lines.append(entry)
    return lines


def loops(lines: list[dict[str, Any]], word: str) -> set[str]:
    """The loops whose ``controller.failures`` lines since the mark say ``word``."""
    return {e["loop"] for e in lines if "loop" in e and word in str(e.get("event"))}


def ended_threads(lines: list[dict[str, Any]]) -> list[str]:
    """Lines saying a thread ended by an exception (ours, or Python's own report)."""
    return [
        str(e["event"])
        for e in lines
        if e.get("event") == "A thread ended by an exception"
        or str(e.get("event")).startswith("Exception in thread")
    ]


def met_the_outage(operator: Operator, mark: int, watched: set[str]) -> bool:
    """Each watched loop failed a call in the outage, a thread ended, or the process did."""
    lines = log_lines(operator, mark)
    exited = operator.proc is None or operator.proc.poll() is not None
    return exited or bool(ended_threads(lines)) or watched <= loops(lines, "failed")


@pytest.mark.parametrize("leader_elect", [False, True], ids=["single", "leader-elect"])
def test_every_thread_outlives_an_apiserver_outage_without_flux(
    own_control_plane: ControlPlane, tmp_path: Path, *, leader_elect: bool
) -> None:
    """Down for longer than a discovery period: afterwards all runs, and /healthz is 200."""
    plane = own_control_plane
    assert not flux_served(plane), "this test needs a cluster without Flux"
    watched = {DISCOVERY, ELECTION} if leader_elect else {DISCOVERY}
    election = (
        # A renew deadline longer than the outage: the leader must keep its Lease.
        ["--leader-elect", "--lease-duration=90", "--renew-deadline=80", "--retry-period=1"]
        if leader_elect
        else []
    )
    operator = Operator(
        operator_kubeconfig(plane, NAMESPACE, watch=[NAMESPACE]),
        tmp_path / "operator.log",
        namespaces=[NAMESPACE],
        work_dir=tmp_path / "work",
        flags=[
            "--log-format=json",
            "--source-discovery-period=1",
            f"--leader-election-namespace={NAMESPACE}",
            *election,
        ],
        pulumi_bin=find_pulumi(),
    )
    operator.start()
    try:
        wait_for(
            lambda: operator.get("/readyz")[0] == 200 and operator.get("/healthz")[0] == 200,
            "the operator to be ready and healthy",
            TIMEOUT,
            interval=0.2,
        )
        if leader_elect:
            wait_for(operator.is_leader, "the operator to lead", TIMEOUT, interval=0.2)
        mark = operator.log.stat().st_size
        plane.stop_apiserver()
        try:
            wait_for(
                lambda: met_the_outage(operator, mark, watched),
                f"{sorted(watched)} to meet the outage",
                TIMEOUT,
                interval=0.2,
            )
        finally:
            plane.start_apiserver()
        assert operator.proc is not None
        assert operator.proc.poll() is None, "the operator exited in the outage"
        assert ended_threads(log_lines(operator, mark)) == [], "a thread died in the outage"
        wait_for(
            lambda: watched <= loops(log_lines(operator, mark), "recovered"),
            f"{sorted(watched)} to recover",
            TIMEOUT,
            interval=0.2,
            detail=lambda: f"/healthz {operator.get('/healthz')[0]}",
        )
        lines = log_lines(operator, mark)
        assert ended_threads(lines) == []
        assert operator.get("/healthz")[0] == 200
        assert operator.proc.poll() is None
        if leader_elect:
            assert operator.is_leader()
    finally:
        operator.stop(signal.SIGKILL)
        print(f"--- operator log ({operator.log})\n{operator.log.read_text()[-6000:]}")  # noqa: T201
