"""``Spawned``: a peer's process in a session of its own, its output appended to a log.

The benchmarks' peers (PKO v1.16, PKO v2's manager) are binaries we only start, measure
and stop: ``spawn`` starts one (stdin closed, stdout and stderr to the log), ``pid`` is
its id while it runs, ``stop`` sends SIGTERM and, if it is still there after
``STOP_TIMEOUT`` s, SIGKILLs its process group (its children too).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

STOP_TIMEOUT = 30.0


def log_tail(log: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of ``log`` ("(no log)" before it exists)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class Spawned:
    """One process of a peer's; ``what`` names it in errors."""

    def __init__(self, what: str, log: Path) -> None:
        """Prepare (not start) the process whose output goes to ``log``."""
        self.what, self.log = what, log
        self._proc: subprocess.Popen[bytes] | None = None

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
        """Start ``argv`` in ``cwd`` with exactly ``env``, in a session of its own."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of its process group after ``STOP_TIMEOUT`` s; safe twice."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(STOP_TIMEOUT)

    @property
    def pid(self) -> int:
        """Its process id; raises ``RuntimeError`` with the log's tail once it exited."""
        if self._proc is None or self._proc.poll() is not None:
            msg = f"{self.what} exited; its log ends:\n{log_tail(self.log)}"
            raise RuntimeError(msg)
        return self._proc.pid
