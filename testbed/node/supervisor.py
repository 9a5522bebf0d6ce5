"""PID 1 of the node's namespaces: mounts scratch filesystems, runs the node's daemons.

Run as ``python3 supervisor.py <spec.json>`` inside the node's network namespace and a
new mount + PID namespace (``unshare --mount --pid --fork --mount-proc --propagation
private``); stdlib only, since it is started by path. The spec (written by
``testbed.node.cluster``) lists:

- ``tmpfs``: directories to cover with a private tmpfs (``/run``, ``/var/log``, ...): the
  fixed paths containerd 1.6, the CNI plugins and kubelet write to (pod network
  namespaces under ``/run/netns``, shim sockets under ``/run/containerd``,
  ``/var/log/containers``) then never touch the host's;
- ``components``: in order, each ``{name, argv, log, after, ready}``: wait until the file
  ``after`` exists (the host's go-ahead), start the program with its output in ``log``,
  then wait until the file ``ready`` exists (e.g. containerd's socket).

``control`` (optional) is a directory through which the host stops and starts one
component while the others run (``testbed.node.faults``): it writes ``<name>.want``
holding ``<action> <token>`` (``stop``: SIGTERM, then SIGKILL after ``stop_timeout``;
``kill``: SIGKILL; ``start``), and once done the supervisor writes the same text to
``<name>.done``. A component stopped that way is not a failure.

On SIGTERM (or when a component exits unasked) it stops the components in reverse order
(SIGTERM, then SIGKILL after ``stop_timeout`` seconds) and exits. As PID 1 its exit makes
the kernel kill everything left in the namespace (shims, containers), and the last
process gone takes the mount namespace, with every mount made in it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_WAIT = 120.0
_stopping = False


def _log(message: str) -> None:
    print(f"[supervisor] {message}", flush=True)  # noqa: T201 - its log is its stdout


def _on_signal(signum: int, _frame: object) -> None:
    global _stopping  # noqa: PLW0603 - the signal handler's one flag
    _stopping = True
    _log(f"signal {signum}: stopping")


def _reap() -> dict[int, int]:
    """Reap every exited child (PID 1 adopts orphans); returns pid -> status."""
    done: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def _wait_for(path: str, running: dict[str, int]) -> bool:
    """Wait for ``path`` to exist; False when stopping, a component died or it timed out."""
    deadline = time.monotonic() + _WAIT
    while not Path(path).exists():
        if _stopping or _died(running) or time.monotonic() > deadline:
            _log(f"gave up waiting for {path}")
            return False
        time.sleep(0.1)
    return True


def _died(running: dict[str, int]) -> bool:
    for pid, status in _reap().items():
        for name, component_pid in running.items():
            if component_pid == pid:
                _log(f"{name} exited: status {status}")
                return True
    return False


# Every component's Popen, kept for the supervisor's life. A Popen dropped while its
# process runs goes to subprocess's list of children to reap, and the next Popen reaps
# them (``subprocess._cleanup``): a component that died by then would vanish without the
# supervisor's own ``waitpid`` ever seeing it exit.
_CHILDREN: list[subprocess.Popen[bytes]] = []


def _start(component: dict[str, Any]) -> int:
    with Path(component["log"]).open("ab") as log:
        proc = subprocess.Popen(
            component["argv"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _CHILDREN.append(proc)
    _log(f"started {component['name']} (pid {proc.pid})")
    return proc.pid


def _stop(running: dict[str, int], timeout: float) -> None:
    for name, pid in reversed(running.items()):
        _stop_one(name, pid, timeout)


def _stop_one(name: str, pid: int, timeout: float) -> None:
    """SIGTERM ``pid`` (SIGKILL at once when ``timeout`` is 0, or once it has passed)."""
    _log(f"stopping {name}")
    try:
        os.kill(pid, signal.SIGTERM if timeout > 0 else signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid not in _reap():
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.1)


def _control(spec: dict[str, Any], running: dict[str, int]) -> None:
    """Carry out the host's requests in ``spec["control"]`` (module docstring)."""
    control = Path(spec.get("control") or "/nonexistent")
    for want in sorted(control.glob("*.want")):
        request = want.read_text().strip()  # the host renames it into place: complete
        done = want.with_suffix(".done")
        if not request or (done.exists() and done.read_text().strip() == request):
            continue
        name, action = want.stem, request.split()[0]
        components = {c["name"]: c for c in spec["components"]}
        if action in ("stop", "kill") and name in running:
            timeout = float(spec["stop_timeout"]) if action == "stop" else 0.0
            _stop_one(name, running.pop(name), timeout)
        elif action == "start" and name not in running:
            running[name] = _start(components[name])
            order = list(components)
            started = sorted(running.items(), key=lambda item: order.index(item[0]))
            running.clear()
            running.update(started)
        _log(f"{name}: {request} done")
        done.write_text(request)


def main(spec_path: str) -> int:
    """Mount, start the components, supervise them, stop them; returns the exit status."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    spec = json.loads(Path(spec_path).read_text())
    for target in spec["tmpfs"]:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target], check=True)
    running: dict[str, int] = {}
    status = 0
    for component in spec["components"]:
        if component.get("after") and not _wait_for(component["after"], running):
            status = 1
            break
        running[component["name"]] = _start(component)
        if component.get("ready") and not _wait_for(component["ready"], running):
            status = 1
            break
    while status == 0 and not _stopping:
        if _died(running):
            status = 1
            break
        _control(spec, running)
        time.sleep(0.2)
    _stop(running, float(spec["stop_timeout"]))
    _log(f"exiting with {status}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
