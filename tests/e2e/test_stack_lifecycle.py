"""A Stack's life with the real operator, control plane, Pulumi CLI and git server.

A scenario that wires the runner (a run, its outcome, a destroy, a preview, progress, locks,
an operator stopped mid-run) runs under both runners (``tests.e2e.beds``): ``local`` and
``pod`` (each run a pod on the real node). Where the runners promise different things
(an operator stopped mid-run: ``local`` interrupts the run, ``pod`` leaves it to its pod),
the scenario says which it checks. One decided before any run starts (an invalid spec,
prerequisites, suspend, the failure cap) is the reconciler's alone and runs under ``local``:
the runner never sees it, and the reconciler's unit tests hold every branch.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from testbed.assets import find_pulumi
from tests.e2e.beds import OFF_NODE, RUNNERS, Bed, without_agent
from tests.e2e.conftest import (
    Operator,
    Program,
    Sentinels,
    Stacks,
    copy_program,
    files_program,
    find,
    is_ready,
)
from tests.e2e.waits import wait_mid_step, wait_reconciles, wait_until, wait_update_locked

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
both_runners = pytest.mark.parametrize("runner", RUNNERS)
off_node = pytest.mark.parametrize("runner", OFF_NODE)  # needs no pod: not on the node


@both_runners
def test_create_change_config_and_follow_the_branch(
    stacks: Stacks, program: Program, operator: Operator, sentinels: Sentinels
) -> None:
    """Create → Ready with outputs; a config change and a new commit are applied.

    Each run's checkout is fresh, without the stack's settings file: the runs keep the
    passphrase salt the stack's state was first encrypted with, under every runner.
    """
    del operator  # running; its teardown scans for leaked secrets
    stacks.secret("app", {"token": sentinels.secret_config})
    stacks.create(
        stacks.manifest(
            "web",
            program,
            secretsRef={"token": {"type": "Secret", "secret": {"name": "app", "key": "token"}}},
        )
    )
    obj = stacks.wait_ready("web")
    status = obj["status"]
    assert stacks.target("web").read_text() == "one"
    assert status["outputs"]["content"] == "one"
    assert status["outputs"]["secretContent"] == "[secret]"
    assert status["lastUpdate"]["lastSuccessfulCommit"] == program.first
    assert status["lastUpdate"]["shortCommit"] == program.first[:7]
    assert "Reconciling" not in [c["type"] for c in status["conditions"]]
    salt = state_salt(stacks, "web")

    two = {"path": stacks.program_path("web"), "content": "two"}
    stacks.patch("web", {"spec": {"config": two}})
    stacks.wait(
        "web",
        lambda o: is_ready(o) and o["status"]["outputs"]["content"] == "two",
        "config applied",
    )
    assert stacks.target("web").read_text() == "two"

    pushed = program.commit("docs")
    stacks.wait(
        "web",
        lambda o: is_ready(o) and o["status"]["lastUpdate"]["lastSuccessfulCommit"] == pushed,
        "new commit picked up",
    )
    stacks.wait_events("web", "UpdateStarted", "Succeeded")
    assert state_salt(stacks, "web") == salt


def state_salt(stacks: Stacks, name: str) -> str:
    """The passphrase salt the state of Stack ``name`` (the ``files`` project) is encrypted with."""
    path = stacks.backend / ".pulumi" / "stacks" / "files" / f"{name}.json"
    latest = json.loads(path.read_text())["checkpoint"]["latest"]
    salt: str = latest["secrets_providers"]["state"]["salt"]
    return salt


@off_node
def test_pinned_commit_ignores_pushes(stacks: Stacks, program: Program, operator: Operator) -> None:
    """With spec.commit set, a push to the branch changes nothing, even on request.

    After the push the operator reconciles the Stack again (each reconcile ends after any
    run it starts); then a reconcile request, the positive control, must make exactly one
    more run, at the pinned commit: a run caused by the push would be a third entry.
    """
    stacks.create(stacks.manifest("pinned", program, branch=None, commit=program.first))
    stacks.wait_ready("pinned")
    before = stacks.get("pinned")["status"]["lastUpdate"]
    program.commit("ignored")
    wait_reconciles(operator, 3)
    assert stacks.get("pinned")["status"]["lastUpdate"] == before
    stacks.request_reconcile("pinned", "after-push")
    obj = stacks.wait(
        "pinned",
        lambda o: is_ready(o) and o["status"].get("observedReconcileRequest") == "after-push",
        "the reconcile request handled",
    )
    assert [h["commit"] for h in obj["status"]["history"]] == [program.first] * 2


@off_node
def test_failures_retry_with_growing_delay_then_recover_after_a_fix(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """A failing resource is retried with backoff; a fixing commit makes it Ready."""
    del operator
    config = {"path": stacks.program_path("flaky"), "content": "x", "fail": "disk on fire"}
    stacks.create(stacks.manifest("flaky", program, config=config))
    obj = stacks.wait_reason("flaky", "Ready", "UpdateFailed")
    assert "disk on fire" in find(obj, "Ready")["message"]  # type: ignore[index]
    assert find(obj, "Reconciling")["reason"] == "ProgressingWithRetry"  # type: ignore[index]
    stacks.wait("flaky", lambda o: o["status"]["lastUpdate"].get("failures", 0) >= 3, "3 failures")
    starts = [h["startTime"] for h in stacks.get("flaky")["status"]["history"]][::-1]
    assert len(starts) >= 3

    fix = {"path": config["path"], "content": "fixed", "fail": None}  # null deletes the key
    stacks.patch("flaky", {"spec": {"config": fix}})
    stacks.wait_ready("flaky")
    assert stacks.target("flaky").read_text() == "fixed"


def test_failure_cap_stalls_and_a_reconcile_request_retries(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """After --max-update-failures the Stack is Stalled; the request annotation retries it."""
    operator.stop()
    operator.start("--max-update-failures=2")
    config = {"path": stacks.program_path("capped"), "content": "x", "fail": "still broken"}
    stacks.create(stacks.manifest("capped", program, config=config))
    obj = stacks.wait_reason("capped", "Stalled", "RetriesExhausted")
    assert find(obj, "Ready")["status"] == "False"  # type: ignore[index]
    assert find(obj, "Reconciling") is None
    failures, runs = obj["status"]["lastUpdate"]["failures"], len(obj["status"]["history"])
    wait_reconciles(operator, 3)  # looked at again, and again: no run is due
    assert stacks.get("capped")["status"]["lastUpdate"]["failures"] == failures

    stacks.request_reconcile("capped", "r1")
    obj = stacks.wait(
        "capped", lambda o: o["status"].get("observedReconcileRequest") == "r1", "request handled"
    )
    assert len(obj["status"]["history"]) == runs + 1, "a run between the stall and the request"


def test_invalid_spec_stalls_without_crashing(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """An Env envRef (refused by design) gives Stalled InvalidSpec and the operator lives on."""
    body = stacks.manifest(
        "bad", program, envRefs={"HOME_DIR": {"type": "Env", "env": {"name": "HOME"}}}
    )
    stacks.create(body)
    obj = stacks.wait_reason("bad", "Stalled", "InvalidSpec")
    assert "Env" in find(obj, "Stalled")["message"]  # type: ignore[index]
    assert operator.proc is not None
    assert operator.proc.poll() is None
    events = stacks.wait_events("bad", "InvalidSpec")
    assert [e.type for e in events if e.reason == "InvalidSpec"] == ["Warning"]


def test_prerequisites_gate_a_dependent_stack(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """A Stack waits (DependencyNotReady) until its prerequisite is Ready."""
    del operator
    stacks.create(stacks.manifest("second", program, prerequisites=[{"name": "first"}]))
    obj = stacks.wait_reason("second", "Reconciling", "DependencyNotReady")
    assert not stacks.target("second").exists()
    assert find(obj, "Ready")["status"] == "False"  # type: ignore[index]
    stacks.create(stacks.manifest("first", program))
    stacks.wait_ready("first")
    stacks.wait_ready("second")


@off_node
def test_preview_only_never_changes_resources(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """spec.preview runs previews: Ready, but the file is never written."""
    del operator
    stacks.create(stacks.manifest("look", program, preview=True))
    obj = stacks.wait_ready("look")
    assert obj["status"]["lastUpdate"]["type"] == "preview"
    assert not stacks.target("look").exists()


def test_suspend_stops_runs(stacks: Stacks, program: Program, operator: Operator) -> None:
    """While suspended, spec changes are not applied; unsuspending applies them."""
    stacks.create(stacks.manifest("paused", program))
    stacks.wait_ready("paused")
    target = stacks.program_path("paused")
    stacks.patch(
        "paused", {"spec": {"suspend": True, "config": {"path": target, "content": "new"}}}
    )
    stacks.wait_reason("paused", "Reconciling", "Suspended")
    wait_reconciles(operator, 3)  # each would have ended after the run it started
    assert stacks.target("paused").read_text() == "one"
    assert len(stacks.get("paused")["status"]["history"]) == 1
    stacks.patch("paused", {"spec": {"suspend": False}})
    stacks.wait(
        "paused", lambda o: is_ready(o) and o["status"]["outputs"]["content"] == "new", "resumed"
    )


@off_node
def test_delete_with_destroy_on_finalize_removes_resources_and_finalizer(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Deleting a destroyOnFinalize Stack destroys the file, then the object goes."""
    del operator
    stacks.create(stacks.manifest("doomed", program, destroyOnFinalize=True))
    obj = stacks.wait_ready("doomed")
    assert obj["metadata"]["finalizers"] == ["finalizer.stack.pulumi.com"]
    assert stacks.target("doomed").exists()
    stacks.delete("doomed")
    stacks.wait_gone("doomed")
    assert not stacks.target("doomed").exists()
    stacks.wait_events("doomed", "Destroyed")


@both_runners
def test_operator_killed_mid_update_recovers_the_stale_lock(
    stacks: Stacks, program: Program, operator: Operator, runner: str
) -> None:
    """SIGKILL during an update leaves a lock; after restart the Stack converges anyway.

    ``local``: the update died with the operator; the restarted one breaks its stale lock
    and runs again. ``pod``: the update goes on in its pod, holding the lock; the
    restarted operator attaches to it and concludes it: one run, never interrupted.
    """
    config = {"path": stacks.program_path("crash"), "content": "slow", "delay": "20"}
    stacks.create(stacks.manifest("crash", program, config=config))
    stacks.wait("crash", lambda o: bool(o.get("status", {}).get("currentUpdate")), "update running")
    wait_mid_step(stacks.backend, "crash", "creating file")  # the kill leaves a half-done update
    operator.stop(signal.SIGKILL)
    assert stacks.locks(), "the killed update should have left its lock"
    operator.start()
    obj = stacks.wait_ready("crash", timeout=180)
    assert stacks.target("crash").read_text() == "slow"
    if runner == "pod":
        assert len(obj["status"]["history"]) == 1
        assert "Interrupted" not in ready_reasons(stacks, "crash")
        started = stacks.wait_events("crash", "UpdateStarted", "Succeeded")
        assert [e.reason for e in started].count("UpdateStarted") == 1


def ready_reasons(stacks: Stacks, name: str) -> list[str | None]:
    """Ready's reason in every status version the watch saw."""
    assert stacks.watcher is not None
    return [(find(v, "Ready") or {}).get("reason") for v in stacks.watcher.versions(name)]


@both_runners
def test_sigterm_mid_update_then_a_restart_converges(
    stacks: Stacks, program: Program, operator: Operator, runner: str
) -> None:
    """SIGTERM with a short grace mid-update exits cleanly; a restart finishes the work.

    ``local``: the update is interrupted and recorded (Interrupted, no currentUpdate, no
    lock). ``pod``: the operator leaves the update to its pod and concludes nothing
    (currentUpdate stays, the pod keeps the lock); the restarted one attaches and
    concludes that same run.
    """
    operator.stop()
    operator.start("--shutdown-timeout=2")
    config = {"path": stacks.program_path("term"), "content": "slow", "delay": "30"}
    stacks.create(stacks.manifest("term", program, config=config))
    stacks.wait("term", lambda o: bool(o.get("status", {}).get("currentUpdate")), "update running")
    wait_mid_step(stacks.backend, "term", "creating file")  # inside the update's provider
    assert operator.stop() == 0
    obj = stacks.get("term")
    if runner == "pod":
        assert find(obj, "Ready")["status"] == "Unknown"  # type: ignore[index]
        assert obj["status"]["currentUpdate"]
        assert stacks.locks()
    else:
        assert find(obj, "Ready")["reason"] == "Interrupted"  # type: ignore[index]
        assert "currentUpdate" not in obj["status"]
        assert not stacks.locks()
    operator.start("--shutdown-timeout=30")
    obj = stacks.wait_ready("term", timeout=180)
    if runner == "pod":
        assert len(obj["status"]["history"]) == 1
        assert "Interrupted" not in ready_reasons(stacks, "term")


@pytest.mark.parametrize(
    "runner",
    without_agent(
        "the other update runs on this machine, so its lock bears the run's own hostname, "
        "which the agent takes for an earlier run of the same Stack (a run pod's name is "
        "its own); it is waited for only until its unrenewed lease lapses, then broken"
    ),
)
def test_a_lock_held_by_another_live_update_is_waited_for(
    bed: Bed, stacks: Stacks, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """Another live `pulumi up` holds the stack: UpdateConflict is reported, then it proceeds.

    Both run the Python files program (the other update is the Automation API's, beside
    the operator, with no plugin mirror), so the operator's run updates the file in place.
    """
    del operator
    program = Program(bed.git, tmp_path / "checkouts", "python")
    work = copy_program(tmp_path / "other")
    env = {
        "PULUMI_BACKEND_URL": f"file://{stacks.backend}",
        "PULUMI_CONFIG_PASSPHRASE": sentinels.passphrase,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_HOME": str(tmp_path / "other-home"),
        "PULUMI_PYTHON_CMD": sys.executable,
        "PATH": f"{find_pulumi()}{os.pathsep}{os.environ['PATH']}",
    }
    options = auto.LocalWorkspaceOptions(
        work_dir=str(work),
        env_vars=env,
        pulumi_home=env["PULUMI_HOME"],
        pulumi_command=auto.PulumiCommand(root=str(find_pulumi().parent)),
    )
    other = auto.create_stack("locked", work_dir=str(work), opts=options)
    other.set_config("path", auto.ConfigValue(str(stacks.target("locked"))))
    other.set_config("content", auto.ConfigValue("theirs"))
    other.set_config("delay", auto.ConfigValue("15"))
    holder = threading.Thread(target=lambda: other.up(on_output=lambda _line: None))
    holder.start()
    try:
        wait_update_locked(stacks.backend)
        stacks.create(stacks.manifest("locked", program))
        obj = stacks.wait_reason("locked", "Reconciling", "UpdateConflict")
        assert find(obj, "Ready")["status"] == "False"  # type: ignore[index]
    finally:
        holder.join(120)
    stacks.hand_over()  # the other update wrote the stack's state as this process's user
    stacks.wait_ready("locked", timeout=180)
    assert stacks.target("locked").read_text() == "one"


# Appended to the files program: a second file made from the first one's output, so the
# engine creates it only once the first is done.
CHAINED = """
second = File(
    "second",
    {
        "path": config.require("path") + ".2",
        "content": managed.content,
        "delay": config.get("secondDelay") or "",
        "fail": "",
    },
)
"""


def progress_writes(stacks: Stacks, name: str) -> int:
    """How many versions of ``name`` the watcher saw that wrote ``status.progress``."""
    assert stacks.watcher is not None
    history = stacks.watcher.observations(name)
    return sum(
        1
        for before, after in itertools.pairwise(history)
        if "progress" in (after.obj.get("status") or {})
        and after.obj.get("status") != before.obj.get("status")
    )


@both_runners
def test_a_long_update_shows_live_progress_then_its_conclusion(
    stacks: Stacks, program: Program, operator: Operator, bed: Bed, tmp_path: Path
) -> None:
    """A slow update shows its step live; the conclusion replaces it for good.

    While it runs, ``status.progress`` and the Reconciling message show the step and the
    resource counts; once Ready, both are gone and no late progress write follows.

    The positive control for "no late write": one thread writes progress, at most once
    per 5 s per Stack, Stacks in the order they began waiting. A second Stack, created
    after the conclusion, writes progress twice (its two resources are made one after the
    other, the first taking 6 s); its second write was due more than 5 s after the
    conclusion, later than a late write of the first Stack could be, so by the time the
    watcher sees it, such a write would have been seen too.
    """
    del operator
    config = {"path": stacks.program_path("slow"), "content": "one", "delay": "8"}
    stacks.create(stacks.manifest("slow", program, config=config))

    def shows_progress(obj: dict[str, Any]) -> bool:
        progress = obj.get("status", {}).get("progress") or {}
        reconciling = find(obj, "Reconciling") or {}
        return bool(progress.get("resourcesTotal")) and "resources done" in str(
            reconciling.get("message")
        )

    running = stacks.wait("slow", shows_progress, "live progress", timeout=60)
    assert running["status"]["progress"]["step"]
    assert find(running, "Ready")["status"] == "Unknown"  # type: ignore[index]
    done = stacks.wait_ready("slow")
    assert "progress" not in done["status"]
    assert find(done, "Reconciling") is None
    ticker = Program(bed.git, tmp_path / "ticker", "python")
    ticker.commit(
        "chained", **{"app/__main__.py": files_program("python")["app/__main__.py"] + CHAINED}
    )
    paced = {"path": stacks.program_path("ticker"), "delay": "6", "secondDelay": "3"}
    stacks.create(stacks.manifest("ticker", ticker, config=paced))
    wait_until(lambda: progress_writes(stacks, "ticker") >= 2, "two progress writes", 90)
    assert stacks.get("slow")["metadata"]["resourceVersion"] == done["metadata"]["resourceVersion"]
    stacks.wait_ready("ticker")


def test_a_leader_cancels_the_update_a_replaced_pod_left_locked(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """The leader cancels an update that a dead instance on another host left locked.

    SIGKILL mid-update, then the lock is rewritten to name another host, as when the pod
    was replaced (the local stale-lock rule cannot apply). The update recorded in
    status.currentUpdate by another instance of the operator is dead once a deposed
    leader would have stopped it: the new leader waits that long, cancels it, converges.
    (Without leader election a lock from another host is never broken:
    test_a_lock_held_by_another_live_update_is_waited_for.)
    """
    config = {"path": stacks.program_path("orphan"), "content": "slow", "delay": "20"}
    stacks.create(stacks.manifest("orphan", program, config=config))
    running = stacks.wait(
        "orphan", lambda o: bool(o.get("status", {}).get("currentUpdate")), "update running"
    )
    assert running["status"]["currentUpdate"]["operator"]
    wait_mid_step(stacks.backend, "orphan", "creating file")  # the kill leaves a half-done update
    operator.stop(signal.SIGKILL)
    (lock,) = stacks.locks()
    lock.write_text(lock.read_text().replace(socket.gethostname(), "pulumi-stack-operator-gone"))

    # A deposed leader may spend renew deadline + interrupt grace (60 s) stopping its
    # update; the Lease is ours lease duration after its last renewal: 8 + 60 - 60 = 8 s.
    # (A renew deadline of 8 s also keeps a loaded machine from deposing the only leader.)
    leases = ("--lease-duration=60", "--renew-deadline=8", "--retry-period=1")
    operator.start("--leader-elect", *leases)
    stacks.wait_ready("orphan", timeout=180)
    assert stacks.target("orphan").read_text() == "slow"
    log = operator.log.read_text()
    assert "A deposed leader may still be stopping this update; waiting" in log
    assert "Cancelled the update a gone instance of this operator left locked" in log
