"""A verdict lasts as long as its cause, and is written once (status contract rules 29, 30).

A Ready Stack's input breaks, as users break them, and is mended to exactly what it was:

- a Flux ``GitRepository`` pointed at a repository that does not exist, and back: the
  Stack waits (``SourceNotReady``), written once however often the source-controller
  retries and rewrites its own status, and is Ready again at the same revision;
- its ``Program`` made invalid (``InvalidSpec``), and restored: Ready again;
- its ``gitAuth`` Secret given a wrong password (``AuthenticationFailed``), and restored:
  Ready again, while git is asked with the right credentials;
- its ``configRef`` ConfigMap deleted when a run is asked for (``ConfigMapNotFound``), and
  restored: Ready again.

Each time the Stack returns to the status its last run earned by itself (no reconcile
request), without running again: ``status.lastUpdate`` and ``status.history`` are as the
run left them. Every version the watch saw keeps the status contract, rule 30 included.

Under the local runner only: these verdicts are the operator's own, decided from the
source objects, Programs and Secrets before any run is due; no runner is asked, so the pod
runner has nothing to add (its runs are proven by the scenarios that run programs).
"""

from __future__ import annotations

import itertools
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.flux import SourceController
from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout
from testbed.waits import wait_for
from tests.e2e.beds import Bed
from tests.e2e.conftest import (
    Operator,
    Program,
    Sentinels,
    Stacks,
    basic_auth,
    has_reason,
    is_ready,
    private_repo,
)
from tests.e2e.test_sources import GIT_CREDENTIALS, NO_REPO, apply_program

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]

BRANCH = "main"
PROJECT = {"name": "verdicts", "runtime": "yaml", "outputs": {"greeting": "hello"}}
PROGRAM = {"outputs": {"greeting": "hello"}}
INVALID_PROGRAM = {**PROGRAM, "configuration": {"size": {}}}  # neither type nor default
SOURCE_REF = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository"}


def source_stack(stacks: Stacks, name: str, **spec: Any) -> dict[str, Any]:
    """A Stack of the YAML program ``spec``'s source holds (no git source, no config)."""
    return stacks.manifest(
        name,
        NO_REPO,  # type: ignore[arg-type]  # has the url a source object has; removed below
        projectRepo=None,
        branch=None,
        repoDir=None,
        config=None,
        **spec,
    )


def ran(stacks: Stacks, name: str) -> dict[str, Any]:
    """What the Stack's runs recorded: ``lastUpdate`` and ``history``."""
    status = stacks.get(name).get("status") or {}
    return {"lastUpdate": status.get("lastUpdate"), "history": status.get("history")}


def status_writes(stacks: Stacks, name: str) -> int:
    """How many versions of the Stack the watch saw with a status of their own."""
    assert stacks.watcher is not None
    versions = stacks.watcher.versions(name)
    statuses = [v.get("status") for v in versions]
    return sum(1 for old, new in itertools.pairwise(statuses) if old != new)


def returned(stacks: Stacks, name: str, earned: dict[str, Any]) -> None:
    """Wait for the Stack to be Ready again, as its last run left it, without a new run."""
    obj = stacks.wait_ready(name, timeout=60)
    assert ran(stacks, name) == earned, "the revision already applied ran again"
    message = next(c["message"] for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert message.startswith("pulumi up succeeded"), message
    reasons = [e.reason for e in stacks.wait_events(name, "Succeeded")]
    assert "UpdateStarted" not in reasons[reasons.index("Succeeded") + 1 :]


def handled(flux: SourceController, namespace: str, name: str) -> None:
    """Ask the source-controller for a reconcile and wait until it has handled it."""
    flux.reconcile_now(namespace, name)
    asked = flux.get(namespace, name)["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]
    wait_for(
        lambda: flux.get(namespace, name).get("status", {}).get("lastHandledReconcileAt") == asked,
        "the source-controller to handle the reconcile request",
        60,
        0.25,
    )


def point(flux: SourceController, namespace: str, name: str, url: str) -> None:
    """Point the GitRepository ``name`` at ``url``."""
    flux.patch(namespace, name, {"spec": {"url": url}})


@pytest.mark.flux
def test_a_flux_source_that_breaks_and_mends_is_waited_for_once_then_ready_again(
    stacks: Stacks,
    operator: Operator,
    flux_source: SourceController,
    flux_git: GitHttpServer,
    flux_account: Account,
    tmp_path: Path,
) -> None:
    """SourceNotReady while the repository is missing, written once; then Ready.

    First with the GitRepository missing its repository from the start (the first run
    waits), then for a Ready Stack whose GitRepository is pointed away and back: Ready at
    the same revision without running again.
    """
    del operator
    namespace, repo = stacks.namespace, f"verdicts-{secrets.token_hex(3)}"
    url = flux_git.create_repo(repo, BRANCH)
    checkout = Checkout(flux_git.push_url(repo), tmp_path / repo, BRANCH)
    checkout.commit({"Pulumi.yaml": yaml.safe_dump(PROJECT)}, "program")
    flux = flux_source
    missing = url.replace(repo, f"missing-{repo}")
    flux.credentials(namespace, GIT_CREDENTIALS, flux_account.username, flux_account.password)
    flux.git_repository(namespace, "infra", missing, BRANCH, secret=GIT_CREDENTIALS)
    ref = {**SOURCE_REF, "name": "infra"}
    stacks.create(source_stack(stacks, "app", fluxSource={"sourceRef": ref}))
    waited_once(stacks, flux, "app", "infra")

    point(flux, namespace, "infra", url)
    stacks.wait_ready("app")
    earned = ran(stacks, "app")

    point(flux, namespace, "infra", missing)
    waited_once(stacks, flux, "app", "infra")
    point(flux, namespace, "infra", url)
    returned(stacks, "app", earned)


def waited_once(stacks: Stacks, flux: SourceController, name: str, source: str) -> None:
    """``SourceNotReady``, and not written again while the source-controller retries.

    The writes are counted from the watch once it has delivered the version the poll saw:
    counted earlier, a watch that lags the poll would add that same write later.
    """
    seen = stacks.wait_reason(name, "Ready", "SourceNotReady", timeout=60)
    assert stacks.watcher is not None
    stacks.watcher.wait_for(name, seen["metadata"]["resourceVersion"], timeout=30)
    writes = status_writes(stacks, name)
    for _ in range(3):  # each attempt of the source-controller rewrites its own status
        handled(flux, stacks.namespace, source)
    assert status_writes(stacks, name) == writes, "SourceNotReady rewritten on a Flux retry"
    assert stacks.wait_events(name, "SourceNotReady")


def test_a_program_made_invalid_and_restored_is_ready_again_without_a_run(
    bed: Bed, stacks: Stacks, operator: Operator
) -> None:
    """InvalidSpec naming the Program's field; the exact previous Program: Ready again."""
    del operator

    def apply_program_here(program: dict[str, Any]) -> None:
        apply_program(bed, stacks.namespace, "verdicts", program)

    apply_program_here(PROGRAM)
    stacks.create(source_stack(stacks, "app", programRef={"name": "verdicts"}))
    stacks.wait_ready("app")
    earned = ran(stacks, "app")

    apply_program_here(INVALID_PROGRAM)
    obj = stacks.wait(
        "app",
        lambda o: has_reason(o, "Stalled", "InvalidSpec"),
        "Stalled InvalidSpec for the invalid Program",
        60,
    )
    stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert "configuration" in stalled["message"], stalled["message"]

    apply_program_here(PROGRAM)
    returned(stacks, "app", earned)


def test_a_git_password_broken_and_restored_is_ready_again_without_a_run(
    stacks: Stacks, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """AuthenticationFailed while git refuses the Secret's password; the right one: Ready.

    The operator looks at the branch at every resync, each time with the Secret as it is
    then; the server saw the right credentials accepted after the fix.
    """
    del operator
    with private_repo(stacks, sentinels, tmp_path, right=True) as repo:
        auth = basic_auth("git-credentials")
        stacks.create(stacks.manifest("private", repo.program, gitAuth=auth))
        stacks.wait_ready("private")
        earned = ran(stacks, "private")

        stacks.update_secret("git-credentials", {"password": f"wrong-{sentinels.git_password}"})
        stacks.wait_reason("private", "Stalled", "AuthenticationFailed", timeout=60)
        since = len(repo.server.requests)
        stacks.update_secret("git-credentials", {"password": sentinels.git_password})
        returned(stacks, "private", earned)
        accepted = [r for r in repo.server.requests[since:] if r.user == repo.account.username]
        assert accepted, "git was not asked again with the right credentials"
    assert is_ready(stacks.get("private"))


def test_a_config_map_deleted_and_restored_is_ready_again_without_a_run(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """ConfigMapNotFound once a run is asked for without it; restored: Ready again.

    The reconcile request is handled by the verdict that stalled it (status contract rule
    17); with the ConfigMap back nothing new is due, so the Stack shows what its last run
    earned, with the ConfigMap's value still deployed.
    """
    del operator
    data = {"content": "from-configmap"}
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app-config"), data=data)
    stacks.core.create_namespaced_config_map(stacks.namespace, body)
    config_ref = {"content": {"name": "app-config", "key": "content"}}
    stacks.create(stacks.manifest("app", program, configRef=config_ref))
    stacks.wait_ready("app")
    earned = ran(stacks, "app")

    stacks.core.delete_namespaced_config_map("app-config", stacks.namespace)
    stacks.request_reconcile("app", "after-the-config-map-went")
    stacks.wait_reason("app", "Stalled", "ConfigMapNotFound", timeout=60)
    stacks.core.create_namespaced_config_map(stacks.namespace, body)
    returned(stacks, "app", earned)
    assert stacks.target("app").read_text() == "from-configmap"
