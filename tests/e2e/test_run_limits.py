"""Runs are bounded and shared fairly: deadlines, status size, namespaces' backends and workers.

Real operator, control plane, Pulumi CLI and git server, as in the lifecycle tests.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.assets import find_pulumi
from testbed.control_plane import ControlPlane
from testbed.rbac import operator_kubeconfig
from tests.conftest import PROGRAMS, fresh_namespace
from tests.e2e.beds import OFF_NODE, Bed
from tests.e2e.conftest import (
    E2E_FLAGS,
    Operator,
    Program,
    Sentinels,
    Stacks,
    assert_no_leaks,
    find,
    is_ready,
)
from tests.status.invariants import StackWatcher

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
# A deadline stops the run through its runner, and a large outcome crosses the report
# channel: proven under both pod-less runners.
off_node = pytest.mark.parametrize("runner", OFF_NODE)


def running(obj: dict[str, Any]) -> bool:
    """Whether the Stack's status names a run in flight."""
    return bool(obj.get("status", {}).get("currentUpdate"))


@off_node
def test_a_run_past_its_deadline_is_interrupted_and_retried(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """spec.timeoutSeconds interrupts a run cleanly: UpdateTimedOut, retried, then Ready."""
    del operator
    # The deadline's interrupt cancels the create's wait (the engine's Cancel), as a
    # provider that honours it does: the run ends at its deadline, not 54 s after it.
    slow = {"path": str(stacks.target("slow")), "content": "one", "delay": "60"}
    slow["cancellable"] = "true"
    stacks.create(stacks.manifest("slow", program, config=slow, timeoutSeconds=6))
    # Seen in the watch: the retry may start at once and end the state within one poll.
    obj = stacks.wait_seen("slow", "Ready", "UpdateTimedOut", timeout=90)
    ready = find(obj, "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    assert "deadline of 6s" in ready["message"]
    assert "spec.timeoutSeconds" in ready["message"]
    reconciling = find(obj, "Reconciling")
    assert reconciling is not None
    assert reconciling["reason"] == "ProgressingWithRetry"
    assert obj["status"]["lastUpdate"]["state"] == "failed"
    events = stacks.wait_events("slow", "UpdateTimedOut")
    assert {e.type for e in events if e.reason == "UpdateTimedOut"} == {"Warning"}

    fast = {**slow, "delay": "0"}
    stacks.patch("slow", {"spec": {"config": fast, "timeoutSeconds": None}})
    stacks.wait_ready("slow", timeout=120)
    assert stacks.target("slow").read_text() == "one"


BIG_OUTPUT = 1_600_000


@off_node
def test_an_output_too_large_for_etcd_is_capped_and_the_run_not_repeated(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path
) -> None:
    """A 1.6 MB output is stored as "[truncated: N bytes]"; the run concludes once."""
    del operator
    program = Program(bed.git, tmp_path / "checkouts", "python")  # its code is extended
    source = (PROGRAMS / "files" / "__main__.py").read_text()
    big = 'pulumi.export("big", "x" * int(config.get("bigOutput") or 0))\n'
    program.commit("big output", **{"app/__main__.py": source + big})
    config = {"path": str(stacks.target("big")), "content": "one", "bigOutput": str(BIG_OUTPUT)}
    stacks.create(stacks.manifest("big", program, config=config))
    obj = stacks.wait_ready("big", timeout=180)
    outputs = obj["status"]["outputs"]
    assert outputs["big"].startswith("[truncated: ")
    assert outputs["content"] == "one"
    # A positive control for "no repeated run": the next change makes exactly one more.
    stacks.patch("big", {"spec": {"config": {**config, "content": "two"}}})
    obj = stacks.wait(
        "big", lambda o: is_ready(o) and o["status"]["outputs"]["content"] == "two", "two"
    )
    assert [h["generation"] for h in obj["status"]["history"]] == [2, 1]


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A second namespace for the tests that need two tenants."""
    with fresh_namespace(api_client) as name:
        yield name


@pytest.fixture
def other_stacks(
    control_plane: ControlPlane, other_namespace: str, tmp_path: Path, sentinels: Sentinels
) -> Iterator[Stacks]:
    """Stack helpers in the second namespace, watched by a status witness of its own."""
    backend = tmp_path / "other" / "state" / "backend"
    backend.mkdir(parents=True)
    with control_plane.api_client() as api, StackWatcher(api, other_namespace) as watcher:
        helper = Stacks(api, other_namespace, backend)
        helper.watcher = watcher
        data: dict[str, bytes | str] = {
            "passphrase": base64.b64encode(sentinels.passphrase.encode()).decode()
        }
        helper.core.create_namespaced_secret(
            other_namespace,
            client.V1Secret(metadata=client.V1ObjectMeta(name="pulumi-secrets"), data=data),
        )
        yield helper
        watcher.assert_clean()


def two_namespace_operator(
    control_plane: ControlPlane,
    namespaces: tuple[str, str],
    tmp_path: Path,
    *flags: str,
) -> Operator:
    """An operator watching both namespaces, as its ServiceAccount (not yet started)."""
    first, _ = namespaces
    return Operator(
        operator_kubeconfig(control_plane, first, watch=list(namespaces)),
        tmp_path / "operator.log",
        namespaces=list(namespaces),
        work_dir=tmp_path / "work",
        flags=(*E2E_FLAGS, f"--leader-election-namespace={first}", *flags),
        pulumi_bin=find_pulumi(),
    )


def test_the_default_backend_is_scoped_per_namespace(
    bed: Bed,
    control_plane: ControlPlane,
    namespace: str,
    other_namespace: str,
    stacks: Stacks,
    other_stacks: Stacks,
    program: Program,
    sentinels: Sentinels,
    tmp_path: Path,
) -> None:
    """Two Stacks named prod in two namespaces on the default backend keep separate state."""
    shared = tmp_path / "default-backend"
    op = two_namespace_operator(
        control_plane,
        (namespace, other_namespace),
        tmp_path,
        *bed.flags,
        f"--default-backend=file://{shared}",
    )
    op.start()
    try:
        for helper in (stacks, other_stacks):
            config = {"path": str(helper.target("prod")), "content": helper.namespace}
            helper.create(helper.manifest("prod", program, backend=None, config=config))
        for helper in (stacks, other_stacks):
            helper.wait_ready("prod")
            assert helper.target("prod").read_text() == helper.namespace
            assert list((shared / helper.namespace).glob(".pulumi/stacks/**/prod.json"))
        assert not list(shared.glob(".pulumi/stacks/**/prod.json"))
    finally:
        op.stop()
    assert_no_leaks(stacks, sentinels, op.log.read_text())


def test_a_busy_namespace_does_not_hold_up_another(
    bed: Bed,
    control_plane: ControlPlane,
    namespace: str,
    other_namespace: str,
    stacks: Stacks,
    other_stacks: Stacks,
    program: Program,
    tmp_path: Path,
) -> None:
    """Two slow Stacks in one namespace, two workers, one run per namespace at a time.

    The second slow Stack is acknowledged at once but waits; the other namespace's new
    Stack gets the free worker and is Ready while the first slow run still runs.
    """
    op = two_namespace_operator(
        control_plane,
        (namespace, other_namespace),
        tmp_path,
        *bed.flags,
        "--workers=2",
        "--max-concurrent-reconciles-per-namespace=1",
    )
    op.start()
    try:
        for name in ("slow-1", "slow-2"):
            config = {"path": str(stacks.target(name)), "content": "one", "delay": "15"}
            stacks.create(stacks.manifest(name, program, config=config))
        first = stacks.wait(
            "slow-1", lambda o: running(o) or running(stacks.get("slow-2")), "a slow run"
        )
        busy, waiting = ("slow-1", "slow-2") if running(first) else ("slow-2", "slow-1")
        other_stacks.create(other_stacks.manifest("quick", program))
        other_stacks.wait_ready("quick", timeout=60)
        assert running(stacks.get(busy)), "the quick Stack waited for the slow run"
        held = stacks.get(waiting)
        assert not running(held)
        assert held["status"]["observedGeneration"] == 1, "the waiting Stack was not acknowledged"
        assert (find(held, "Reconciling") or {}).get("status") == "True"
        for name in ("slow-1", "slow-2"):
            stacks.wait_ready(name, timeout=120)
    finally:
        op.stop()
