"""``make dev`` (hack/dev.py) headless: it gets the sample Stack Ready and leaves nothing behind.

Each test runs the script as a developer would, in a state directory of its own, and
afterwards looks in /proc for any process (etcd, kube-apiserver, git daemon, the operator,
the Pulumi CLI) whose command line or working directory is inside that directory. The
``--node`` test (the image on a real node) also looks for the node's network namespace and
for mounts inside the state directory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.image import INSTALL_HINT, missing_tools
from testbed.waits import wait_for
from tests.node.cluster import node_binaries_or_skip
from workspace.process import kill_tree

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "hack" / "dev.py"


def dev(state: Path, *args: str) -> list[str]:
    """The command line of hack/dev.py in ``state``."""
    return [sys.executable, str(DEV), "--state-dir", str(state), *args]


def processes_in(state: Path) -> list[str]:
    """Running processes whose command line or working directory is inside ``state``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = str((proc / "cwd").readlink())
        except OSError:  # gone meanwhile, or a zombie
            continue
        if str(state) in argv or cwd.startswith(str(state)):
            found.append(f"{proc.name}: {argv[:160]} (cwd {cwd})")
    return found


def assert_nothing_left(state: Path) -> None:
    """No process of the run is left (a few seconds allowed for exits in flight)."""
    wait_for(
        lambda: not processes_in(state),
        f"every process of the run in {state} to exit",
        timeout=5,
        interval=0.2,
        detail=lambda: "left running:\n" + "\n".join(processes_in(state)),
    )


def test_until_ready_exits_0_with_the_sample_ready_and_nothing_left(tmp_path: Path) -> None:
    """--until-ready starts everything, sees the sample Stack Ready, stops it all, exits 0."""
    state = tmp_path / "dev"
    started = time.monotonic()
    proc = subprocess.run(
        dev(state, "--until-ready", "--timeout=240"),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=400,
    )
    print(f"{proc.stdout}{proc.stderr}\ntook {time.monotonic() - started:.1f}s")  # noqa: T201
    assert proc.returncode == 0
    assert "Stack default/sample is Ready" in proc.stdout
    assert f"export KUBECONFIG={state / 'kubeconfig'}" in proc.stdout
    assert "kubectl get stacks -w" in proc.stdout
    # The update really ran: the program wrote its file and the backend has the stack.
    assert (state / "sample-output" / "hello.txt").read_text() == "hello from make dev\n"
    assert list((state / "backend").glob(".pulumi/stacks/**/dev.json"))
    assert_nothing_left(state)


def stopped(proc: subprocess.Popen[str], lines: list[str], timeout: float = 120) -> int:
    """``proc``'s exit status; fails with its output and its threads' stacks if it hangs."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)  # the script's faulthandler: every thread's stack
        wait_for(
            lambda: any("most recent call first" in line for line in lines),
            "hack/dev.py's stacks",
            timeout=10,
            interval=0.2,
        )
        pytest.fail(f"hack/dev.py did not stop within {timeout:.0f}s:\n" + "".join(lines))


def test_ctrl_c_mid_update_stops_everything(tmp_path: Path) -> None:
    """SIGINT to the terminal's process group during the first update: a clean stop."""
    state = tmp_path / "dev"
    lines: list[str] = []
    updating = threading.Event()
    with subprocess.Popen(
        dev(state),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell job has
    ) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "Starting pulumi operation" in line:
                    updating.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 240
            while not updating.wait(0.5):
                if proc.poll() is not None or time.monotonic() > deadline:
                    reader.join(10)
                    pytest.fail("no update started:\n" + "".join(lines))
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            status = stopped(proc, lines)
        finally:
            if proc.poll() is None:  # failed: take its servers (sessions of their own) too
                kill_tree(proc.pid)
            reader.join(10)
    output = "".join(lines)
    print(output)  # noqa: T201
    assert status in (0, 130)
    assert "[dev] stopping the operator" in output
    assert "[dev] stopped" in output
    assert_nothing_left(state)


@pytest.mark.node
@pytest.mark.image
@pytest.mark.timeout(1500)  # a cold image build takes minutes before --timeout starts
def test_node_mode_gets_the_sample_ready_in_a_pod_and_leaves_nothing(tmp_path: Path) -> None:
    """--node --until-ready: the image on a real node runs the sample, then all is torn down."""
    node_binaries_or_skip()
    if missing := missing_tools():
        pytest.skip(f"--node builds the image, which needs {', '.join(missing)}: {INSTALL_HINT}")
    state = tmp_path / "dev-node"
    started = time.monotonic()
    proc = subprocess.run(
        dev(state, "--node", "--until-ready", "--timeout=300"),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=1400,
    )
    print(f"{proc.stdout}{proc.stderr}\ntook {time.monotonic() - started:.1f}s")  # noqa: T201
    assert proc.returncode == 0
    assert "Stack default/sample is Ready" in proc.stdout
    assert f"export KUBECONFIG={state / 'cluster'}" in proc.stdout
    assert "kubectl logs -f deploy/pulumi-stack-operator" in proc.stdout
    assert re.search(r"https://10\.215\.\d+\.\d+:8443/metrics", proc.stdout)
    # The program ran in the pod (as uid 65532) and wrote through the /state volume.
    output = state / "volume" / "sample-output" / "hello.txt"
    assert output.read_text() == "hello from make dev\n"
    assert output.stat().st_uid == 65532
    assert list((state / "logs").glob("operator-*.log")), "the pod's log was kept"
    node = re.search(r"pso-node-([0-9a-f]+)", proc.stdout)
    assert node, "the node's name was printed"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert f"pso-{node[1]}" not in netns.stdout.split()
    assert str(state) not in Path("/proc/self/mountinfo").read_text()
    assert_nothing_left(state)
