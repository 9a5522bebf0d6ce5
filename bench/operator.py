"""The operator under test: ``python -m pulumi_stack_operator``, a subprocess seen from outside.

``Operator`` is the test suite's launcher (``testbed.operator.Operator``: the Pulumi
CLI's directory first on ``PATH``, no update checks or plugin downloads, Python programs run
with this interpreter, ``/metrics`` and the probes on free loopback ports, its log in a
file, ``start`` returning once the probe port answers, a port collision retried) set up
for one benchmark: watching one namespace, work dir (shared unless it is given one of its
own) and log under the test bed's root, and a context manager whose exit never leaves the
process running. The bench adds read-outs that cost the operator as little as possible:
``/readyz`` is a constant answer, and ``counter`` asks ``/metrics`` only for the named
families (``?name[]=...``), so polling it does not render the per-Stack series of a large
fleet; and the process's RSS and CPU time.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import machine
from bench.running import Running
from bench.spawned import log_tail
from bench.testbed import TestBed
from testbed import operator as testbed

POLL = 0.02  # seconds between probe polls
STOP_TIMEOUT = 60.0  # seconds after SIGTERM before SIGKILL


class OperatorError(RuntimeError):
    """The operator exited, or did not get somewhere in time; the message has its log tail."""


class Operator(testbed.Operator, Running):
    """One operator process on the test bed; a context manager that stops it on exit."""

    def __init__(
        self,
        bed: TestBed,
        namespace: str,
        *flags: str,
        work_dir: Path | None = None,
        kubeconfig: Path | None = None,
        also_watch: Sequence[str] = (),
    ) -> None:
        """Prepare (not start) an operator watching ``namespace`` with extra ``flags``.

        ``work_dir`` is its ``--work-dir`` (checkouts, Stacks' homes, the plugin store and
        the dependency cache); by default the one every benchmark's operator shares.
        ``kubeconfig`` is the cluster and user it runs as (default: the test bed's admin);
        ``also_watch`` are more namespaces it watches.
        """
        super().__init__(
            kubeconfig or bed.control_plane.kubeconfig,
            bed.root / "logs" / f"operator-{namespace}-{time.monotonic_ns()}.log",
            namespaces=[namespace, *also_watch],
            work_dir=work_dir or bed.root / "work",
            flags=["--shutdown-timeout=10", *flags],
            pulumi_bin=bed.pulumi_bin,
        )
        self.namespace = namespace

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int | None:
        """Send ``sig``; SIGKILL it and its descendants if it still runs after ``timeout`` s.

        Returns the exit status, None if it was not started; safe to call twice.
        """
        try:
            return super().stop(sig, timeout)
        except subprocess.TimeoutExpired:
            return super().stop(signal.SIGKILL, timeout)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the operator's log."""
        return log_tail(self.log, lines)

    def _running_pid(self) -> int:
        """The process id; raises ``OperatorError`` (with the log tail) once it has exited."""
        if self.proc is None or self.proc.poll() is not None:
            msg = f"the operator exited; its log ends:\n{self.log_tail()}"
            raise OperatorError(msg)
        return self.proc.pid

    # -- probes and metrics -----------------------------------------------------------

    def wait_until(self, path: str, timeout: float) -> float:
        """Poll a probe (``/healthz``, ``/readyz``) until it answers 200; returns the time.

        Raises:
            OperatorError: the operator exited, or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get(path)[0] == 200:
                return time.monotonic()
            self._running_pid()
            time.sleep(POLL)
        msg = f"{path} not OK after {timeout:.0f}s; the operator's log ends:\n{self.log_tail()}"
        raise OperatorError(msg)

    def samples(self, *names: str) -> Iterator[tuple[str, Mapping[str, str], float]]:
        """Every sample of the named metric families: (sample name, labels, value).

        Raises:
            OperatorError: ``/metrics`` did not answer 200.
        """
        query = urllib.parse.urlencode([("name[]", n) for n in names])
        status, text = self.get(f"/metrics?{query}", self.metrics_port)
        if status != 200:
            self._running_pid()
            msg = f"/metrics answered {status}"
            raise OperatorError(msg)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                yield sample.name, sample.labels, sample.value

    def counter(self, name: str, **labels: str) -> float:
        """The sum of a counter's samples whose labels include ``labels``."""
        return sum(
            value
            for sample, have, value in self.samples(name)
            if sample == name and all(have.get(k) == v for k, v in labels.items())
        )

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """A counter's values summed per value of ``label``."""
        found: dict[str, float] = {}
        for sample, labels, value in self.samples(name):
            if sample == name:
                key = labels.get(label, "")
                found[key] = found.get(key, 0.0) + value
        return found

    def wait_reconciled(self, count: int, timeout: float, poll: float = 0.05) -> float:
        """Wait until ``count`` reconciles have finished; returns the time it was seen.

        Raises:
            OperatorError: ``timeout`` seconds passed first, or ``/metrics`` failed.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.counter("controller_runtime_reconcile_total") >= count:
                return time.monotonic()
            time.sleep(poll)
        msg = f"fewer than {count} reconciles after {timeout:.0f}s:\n{self.log_tail()}"
        raise OperatorError(msg)

    # -- resources --------------------------------------------------------------------

    def memory_mib(self) -> tuple[float, float]:
        """Resident set size now and at its peak, in MiB (raises once it has exited)."""
        found = machine.memory_kib(self._running_pid())
        return found["VmRSS"] / 1024, found["VmHWM"] / 1024

    def cpu_seconds(self, *, children: bool = True) -> float:
        """CPU seconds of the operator and the children it reaped (0 once it has exited).

        ``children=False``: of the operator process alone.
        """
        with contextlib.suppress(OSError, OperatorError):
            return machine.process_cpu_seconds(self._running_pid(), children=children)
        return 0.0
