"""Start, health-check and stop a local server process, keeping its log.

Each test-bed component (etcd, kube-apiserver, git daemon, Prometheus) is one
``Process``: it writes stdout and stderr to a log file, is polled until a health
check passes, and is stopped with SIGTERM then SIGKILL. The log survives the process
so that a failed test can show what the server said.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

# envtest polls every 100 ms and waits 20 s; a 2-core machine building or testing in
# parallel needs more.
START_TIMEOUT = float(os.environ.get("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", "90"))
STOP_TIMEOUT = float(os.environ.get("KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT", "20"))

_recent_ports: dict[int, float] = {}
_started: list[Process] = []

# Under pytest-xdist each worker hands out ports from its own block below the kernel's
# ephemeral range (32768-60999 on Linux), so two workers never pick the same port, and
# no outgoing connection's ephemeral port is ever one of ours.
WORKER_PORTS_START = 10000
WORKER_PORTS_END = 32000
WORKER_BLOCKS = 16  # workers beyond 16 share blocks (still checked by bind)
_cursor = [0]  # the offset in this worker's block of the next port to try


def started() -> list[Process]:
    """Every process started in this interpreter, running or not (for log collection)."""
    return list(_started)


def worker_index() -> int | None:
    """This pytest-xdist worker's number (``gw3`` is 3), or None outside a worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def worker_block(index: int) -> range:
    """The ports worker ``gw<index>`` hands out."""
    size = (WORKER_PORTS_END - WORKER_PORTS_START) // WORKER_BLOCKS
    start = WORKER_PORTS_START + (index % WORKER_BLOCKS) * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _block_port(block: range) -> int:
    """The next bindable port of ``block`` after the last one handed out (wrapping)."""
    for _ in range(len(block)):
        port = block[_cursor[0] % len(block)]
        _cursor[0] += 1
        if port not in _recent_ports and _bindable(port):
            return port
    msg = f"no free port left in {block.start}-{block.stop - 1}"
    raise ProcessError(msg)


def free_port() -> int:
    """Return a loopback port that is free now and was not handed out in the last 2 min.

    Like envtest's ``addr.Suggest``: the port is bound, closed and remembered, so that two
    components started in quick succession never get the same one. Outside pytest-xdist
    the kernel picks it (bind to port 0); in worker ``gwN`` it comes from the worker's own
    block (``worker_block``), so that workers cannot race each other for one port
    between the check and the component's own bind.
    """
    now = time.monotonic()
    for port, handed_out in list(_recent_ports.items()):
        if now - handed_out > 120:
            del _recent_ports[port]
    index = worker_index()
    while True:
        port = _kernel_port() if index is None else _block_port(worker_block(index))
        if port not in _recent_ports:
            _recent_ports[port] = now
            return port


class Served:
    """A test-bed server as a context manager: ``with`` starts it, leaving the block stops it.

    Subclasses define ``start`` (returns once the server serves) and ``stop`` (safe twice).
    """

    def start(self) -> None:
        """Start serving."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop serving."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        """Start it."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        """Stop it."""
        self.stop()


class ProcessError(RuntimeError):
    """A process exited early or never became healthy; the message has its log tail."""


class Process:
    """One server process with a log file and a health check."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Describe the process; nothing runs until ``start``."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id while running."""
        return self._popen.pid if self._popen else None

    def start(self, healthy: Callable[[], bool], timeout: float = START_TIMEOUT) -> None:
        """Start the process and wait until ``healthy()`` returns true.

        Raises:
            ProcessError: the process exited, or was not healthy within ``timeout``.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self not in _started:
            _started.append(self)
        with self.log_path.open("ab") as log:
            log.write(f"--- starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to forward
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                msg = f"{self.name} exited with {self._popen.returncode}:\n{self.log_tail()}"
                raise ProcessError(msg)
            with contextlib.suppress(OSError):
                if healthy():
                    return
            time.sleep(0.1)
        self.stop()
        msg = f"{self.name} was not healthy after {timeout:.0f}s:\n{self.log_tail()}"
        raise ProcessError(msg)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Send SIGTERM, then SIGKILL after ``timeout``; safe to call twice."""
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would."""
        popen, self._popen = self._popen, None
        if popen is not None and popen.poll() is None:
            popen.kill()
            popen.wait()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
