"""The two operators of the side-by-side, each a process seen from outside, as shipped.

``Ours`` is ``python -m pulumi_stack_operator`` with its defaults (local runner, 2
workers). ``Pko`` is the Pulumi Kubernetes Operator v1.16 manager with the arguments and
environment its Deployment gives it (``--zap-level=error``, ``WATCH_NAMESPACE``, leader
election on, ``MAX_CONCURRENT_RECONCILES`` unset so 10). Both get the bed's ``PATH`` (the
counting ``pulumi``, the real CLI with its hosts), a ``HOME`` and ``TMPDIR`` of their own,
the offline Pulumi settings (no update check, no plugin download), the control plane's
admin kubeconfig, and one namespace to watch. ``stop`` sends SIGTERM and, if the process
is still there after ``STOP_TIMEOUT`` s, SIGKILLs its process group (its Pulumi runs too).
"""

from __future__ import annotations

import abc
import os
import signal
import subprocess
import time
from pathlib import Path

from bench import machine
from bench.peer.bed import PeerBed
from bench.running import Running
from bench.spawned import STOP_TIMEOUT, Spawned, log_tail
from testbed import operator as testbed
from testbed.control_plane import ControlPlane


class PeerOperator(Running):
    """One operator process on its own control plane; a context manager."""

    label: str  # the summary keys' prefix

    def __init__(self, bed: PeerBed, plane: ControlPlane, namespace: str) -> None:
        """Prepare (not start) the operator watching ``namespace`` on ``plane``."""
        self.bed, self.plane, self.namespace = bed, plane, namespace
        self.home = bed.root / f"{self.label}-home"
        self.log = bed.root / "logs" / f"{self.label}.log"
        self.started_at = 0.0

    def environment(self) -> dict[str, str]:
        """What both are given; see the module docstring."""
        tmp = self.home / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            "PATH": self.bed.path,
            "HOME": str(self.home),
            "TMPDIR": str(tmp),
            "KUBECONFIG": str(self.plane.kubeconfig),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        }

    @property
    @abc.abstractmethod
    def pid(self) -> int:
        """The process id; raises ``RuntimeError`` (with the log's tail) once it exited."""

    def rss_mib(self) -> float:
        """Resident set size now, in MiB."""
        return machine.memory_kib(self.pid)["VmRSS"] / 1024

    def cpu_seconds(self) -> float:
        """CPU seconds of the process and the children it has reaped."""
        return machine.process_cpu_seconds(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of its log."""
        return log_tail(self.log, lines)


class Ours(PeerOperator):
    """``python -m pulumi_stack_operator``, defaults but the namespace and its work dir."""

    label = "pso"

    def __init__(self, bed: PeerBed, plane: ControlPlane, namespace: str) -> None:
        """Prepare (not start); see ``PeerOperator``."""
        super().__init__(bed, plane, namespace)
        self._process = testbed.Operator(
            plane.kubeconfig,
            self.log,
            namespaces=[namespace],
            work_dir=self.home / "work",
            flags=["--shutdown-timeout=10"],
            env=self.environment(),
        )

    def start(self) -> None:
        """Spawn it; returns once its probe port answers."""
        self._process.start()
        self.started_at = self._process.started_at

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT`` s."""
        try:
            self._process.stop(signal.SIGTERM, STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.stop(signal.SIGKILL, STOP_TIMEOUT)

    @property
    def pid(self) -> int:
        """See ``PeerOperator.pid``."""
        proc = self._process.proc
        if proc is None or proc.poll() is not None:
            msg = f"our operator exited; its log ends:\n{self.log_tail()}"
            raise RuntimeError(msg)
        return proc.pid


class Pko(PeerOperator):
    """The Pulumi Kubernetes Operator v1.16's manager binary."""

    label = "pko"

    def __init__(self, bed: PeerBed, plane: ControlPlane, namespace: str, built: Path) -> None:
        """Prepare (not start); ``built`` is its build directory (binary and CRDs)."""
        super().__init__(bed, plane, namespace)
        self.binary = built / "pulumi-kubernetes-operator"
        self._process = Spawned("the Pulumi operator", self.log)

    def start(self) -> None:
        """Spawn it (it has no probe to wait for)."""
        env = {**self.environment(), "WATCH_NAMESPACE": self.namespace}
        argv = [str(self.binary), "--zap-level=error", "--zap-time-encoding=iso8601"]
        self.started_at = time.monotonic()
        self._process.spawn(argv, env, self.home)

    def stop(self) -> None:
        """See ``Spawned.stop``."""
        self._process.stop()

    @property
    def pid(self) -> int:
        """See ``PeerOperator.pid``."""
        return self._process.pid
