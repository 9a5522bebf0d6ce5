"""Sharding: two operators with complementary ``--stack-selector``s share one namespace.

Operator A manages ``shard=a``, operator B ``shard!=a`` (every other Stack), each leading on
the Lease its selector names. Who did what is read from what the operator writes its
identity (``<host>_<pid>_<hex>``) into: ``status.currentUpdate.operator`` (every version the
watcher saw) and the Events' ``reportingInstance``; and ``managedFields`` name each shard's
field manager (``pulumi-stack-operator:<selector>``) for the status, the finalizer and the
Lease it wrote.

One scenario, so that both processes start once:

1. each Stack reaches Ready by its own operator only;
2. an idle Stack moved from B to A by its label: B lets it go (no finalize, no destroy,
   no write, no Event); A adopts it without a run, and runs it on request;
3. a Stack moved from A to B in the middle of an update: A stops that update as a
   shutdown would and records nothing about it; B resumes it once A's CLI has released
   the lock; one run applies the change, none is doubled, nothing is destroyed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.config import lease_name_for
from controller.labels import parse_selector
from testbed.assets import find_pulumi
from testbed.operator import Operator
from testbed.rbac import operator_kubeconfig
from testbed.waits import wait_for
from tests.e2e.agreement import forbidden
from tests.e2e.beds import Bed
from tests.e2e.conftest import (
    E2E_FLAGS,
    Program,
    Sentinels,
    Stacks,
    assert_no_leaks,
    is_ready,
)
from tests.e2e.test_first_status import field_managers
from tests.e2e.waits import wait_mid_step, wait_reconciles, wait_until

SHARDS = {"a": "shard=a", "b": "shard!=a"}
MANAGERS = {name: f"pulumi-stack-operator:{selector}" for name, selector in SHARDS.items()}
BASE_LEASE = "pulumi-stack-operator"
# Leader election on, as the chart deploys it; a Lease is created at once, so each process
# leads within a second of its cache syncing.
LEASE_FLAGS = ("--leader-elect", "--lease-duration=20", "--renew-deadline=15", "--retry-period=2")


def identity(operator: Operator) -> str:
    """What ``operator`` writes as its identity: its ``Starting`` log line says."""

    def logged() -> str | None:
        for line in operator.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") == "Starting":
                    return str(entry["identity"])
        return None

    found = wait_for(logged, "the operator's Starting line", 30)
    assert found.startswith(f"{socket.gethostname()}_{operator.pid}_"), found
    return found


@pytest.fixture
def shards(
    bed: Bed, stacks: Stacks, sentinels: Sentinels, tmp_path: Path
) -> Iterator[dict[str, Operator]]:
    """Operators "a" and "b" on the test namespace, with the selectors of ``SHARDS``.

    Both authenticate as the operator's ServiceAccount (its namespace RBAC); afterwards
    they are killed, and neither may have been refused an API call or leaked a secret.
    """
    namespace = bed.namespace
    kubeconfig = operator_kubeconfig(bed.control_plane, namespace, watch=[namespace])
    operators = {
        name: Operator(
            kubeconfig,
            tmp_path / f"operator-{name}.log",
            namespaces=[namespace],
            work_dir=tmp_path / f"work-{name}",
            flags=(
                *E2E_FLAGS,
                f"--leader-election-namespace={namespace}",
                *LEASE_FLAGS,
                f"--stack-selector={selector}",
                *bed.flags,
            ),
            pulumi_bin=find_pulumi(),
        )
        for name, selector in SHARDS.items()
    }
    metrics: dict[str, str] = {}
    try:
        for operator in operators.values():
            operator.start()
        yield operators
        metrics = {name: operator.metrics() for name, operator in operators.items()}
    finally:
        logs = []
        for name, operator in operators.items():
            operator.stop(signal.SIGKILL)
            log = operator.log.read_text() if operator.log.exists() else ""
            print(f"--- operator {name} ({operator.log})\n{log[-5000:]}")  # noqa: T201
            logs.append(log)
        assert_no_leaks(stacks, sentinels, *logs, *metrics.values())
    for name, text in metrics.items():
        assert not forbidden(text), f"operator {name} was refused API calls: {forbidden(text)}"


def in_shard(body: dict[str, Any], shard: str) -> dict[str, Any]:
    """``body`` (a Stack) labelled ``shard``."""
    body["metadata"]["labels"] = {"shard": shard}
    return body


def move(stacks: Stacks, name: str, shard: str) -> str:
    """Relabel a Stack into ``shard``; the resourceVersion of the move."""
    return str(stacks.patch(name, {"metadata": {"labels": {"shard": shard}}})["metadata"][
        "resourceVersion"
    ])  # fmt: skip


def runners(stacks: Stacks, name: str, after: str = "0") -> set[str]:
    """Every ``currentUpdate.operator`` in versions of ``name`` newer than ``after``."""
    assert stacks.watcher is not None
    return {
        str(version["status"]["currentUpdate"]["operator"])
        for version in stacks.watcher.versions(name)
        if int(version["metadata"]["resourceVersion"]) > int(after)
        and (version.get("status") or {}).get("currentUpdate")
    }


def events_by(stacks: Stacks, name: str) -> dict[str, list[str]]:
    """The reasons of the Events about ``name``, by reporting instance, oldest first."""
    found: dict[str, list[str]] = {}
    for event in stacks.events(name):
        found.setdefault(str(event.reporting_instance), []).append(str(event.reason))
    return found


def lease_writers(bed: Bed, lease: str) -> set[str]:
    """The field managers the Lease ``lease``'s ``managedFields`` name."""
    with bed.control_plane.api_client() as api:
        found = client.CoordinationV1Api(api).read_namespaced_lease(lease, bed.namespace)
    assert found.metadata is not None
    return {str(entry.manager) for entry in found.metadata.managed_fields or ()}


def lease_holder(bed: Bed, lease: str) -> str | None:
    """The holder of the Lease ``lease`` in the test namespace."""
    with bed.control_plane.api_client() as api:
        found = client.CoordinationV1Api(api).read_namespaced_lease(lease, bed.namespace)
    return found.spec.holder_identity if found.spec else None


def test_two_shards_share_the_stacks_and_hand_them_over(
    bed: Bed, stacks: Stacks, program: Program, shards: dict[str, Operator]
) -> None:
    """Each shard runs its own Stacks; a moved Stack is let go, not deleted, and run once."""
    a, b = shards["a"], shards["b"]
    ids = {"a": identity(a), "b": identity(b)}
    leases = {name: lease_name_for(BASE_LEASE, parse_selector(s)) for name, s in SHARDS.items()}
    assert len(set(leases.values())) == 2
    wait_until(
        lambda: a.is_leader(leases["a"]) and b.is_leader(leases["b"]), "both shards to lead", 60
    )
    assert {name: lease_holder(bed, lease) for name, lease in leases.items()} == ids
    assert {name: lease_writers(bed, lease) for name, lease in leases.items()} == {
        name: {MANAGERS[name]} for name in SHARDS
    }
    each_runs_its_own(stacks, program, ids)
    an_idle_stack_moves(stacks, a, ids)
    a_stack_moves_mid_update(stacks, a, ids)


def each_runs_its_own(stacks: Stacks, program: Program, ids: dict[str, str]) -> None:
    """1. alpha (shard a) and beta (shard b) reach Ready, each by its own operator only."""
    stacks.create(in_shard(stacks.manifest("alpha", program), "a"))
    stacks.create(in_shard(stacks.manifest("beta", program), "b"))
    for name, shard in (("alpha", "a"), ("beta", "b")):
        manager = {MANAGERS[shard]}
        written = field_managers(stacks.wait_ready(name))
        assert written == {"status": manager, "finalizers": manager}, (name, written)
    assert runners(stacks, "alpha") == {ids["a"]}
    assert runners(stacks, "beta") == {ids["b"]}
    stacks.wait_events("alpha", "Succeeded")
    stacks.wait_events("beta", "Succeeded")
    assert set(events_by(stacks, "alpha")) == {ids["a"]}
    assert set(events_by(stacks, "beta")) == {ids["b"]}


def an_idle_stack_moves(stacks: Stacks, a: Operator, ids: dict[str, str]) -> None:
    """2. beta moves from B to A: no finalize, no write, no Event, no run; A runs it later."""
    b_before = events_by(stacks, "beta")[ids["b"]]
    moved_at = move(stacks, "beta", "a")
    wait_reconciles(a, 4)  # A has adopted it and looked again (2 s resync, two Stacks)
    beta = stacks.get("beta")
    assert beta["metadata"]["resourceVersion"] == moved_at, "someone wrote after the move"
    assert "finalizer.stack.pulumi.com" in beta["metadata"]["finalizers"]
    assert len(beta["status"]["history"]) == 1
    assert stacks.target("beta").exists()
    stacks.request_reconcile("beta", "after-the-move")  # A runs it now, and only A
    beta = stacks.wait(
        "beta",
        lambda o: is_ready(o) and o["status"].get("observedReconcileRequest") == "after-the-move",
        "the requested run",
    )
    assert len(beta["status"]["history"]) == 2
    assert runners(stacks, "beta", after=moved_at) == {ids["a"]}
    stacks.wait_events("beta", "Succeeded")
    beta_events = events_by(stacks, "beta")
    assert beta_events[ids["b"]] == b_before  # B said nothing more about it
    assert beta_events[ids["a"]].count("UpdateStarted") == 1


def a_stack_moves_mid_update(stacks: Stacks, a: Operator, ids: dict[str, str]) -> None:
    """3. alpha moves from A to B mid-update: stopped as on shutdown, resumed by B once."""
    slow = {"path": stacks.program_path("alpha"), "content": "two", "delay": "6"}
    stacks.patch("alpha", {"spec": {"config": slow}})
    stacks.wait(
        "alpha",
        lambda o: (o.get("status", {}).get("currentUpdate") or {}).get("generation") == 2,
        "A's update of generation 2",
    )
    wait_mid_step(stacks.backend, "alpha", "updating file")
    moved_at = move(stacks, "alpha", "b")
    alpha = stacks.wait("alpha", lambda o: is_ready(o) and o["metadata"]["generation"] == 2, "B")
    assert stacks.target("alpha").read_text() == "two"
    assert "finalizer.stack.pulumi.com" in alpha["metadata"]["finalizers"]
    assert ids["b"] in runners(stacks, "alpha", after=moved_at)
    history = alpha["status"]["history"]
    succeeded = [e for e in history if e["generation"] == 2 and e["result"] == "succeeded"]
    assert len(succeeded) == 1
    assert all("nterrupt" not in str(entry["result"]) for entry in history)  # A wrote none
    reasons = {
        condition.get("reason")
        for version in versions_after(stacks, "alpha", moved_at)
        for condition in (version.get("status") or {}).get("conditions") or ()
    }
    assert "Interrupted" not in reasons  # A's conclusion of its stopped update never landed
    assert "Destroying" not in reasons
    stacks.wait_events("alpha", "Succeeded")
    alpha_events = events_by(stacks, "alpha")
    assert "Interrupted" not in alpha_events[ids["a"]]
    assert alpha_events[ids["a"]].count("Succeeded") == 1  # its first run only
    assert alpha_events[ids["b"]].count("Succeeded") == 1
    assert "Destroyed" not in {r for found in alpha_events.values() for r in found}
    assert "no longer ours" in a.log.read_text()


def versions_after(stacks: Stacks, name: str, resource_version: str) -> list[dict[str, Any]]:
    """The versions of ``name`` the watcher saw after ``resource_version``."""
    assert stacks.watcher is not None
    return [
        dict(version)
        for version in stacks.watcher.versions(name)
        if int(version["metadata"]["resourceVersion"]) > int(resource_version)
    ]
