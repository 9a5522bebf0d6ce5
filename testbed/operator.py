"""The operator as a subprocess: start, stop with a signal, restart, read its endpoints.

``Operator`` runs ``python -m <module>`` with the manager's flags: the real operator
(``pulumi_stack_operator``) or the manager tests' widget operator, both built on
``controller.config`` (only the real one has ``--work-dir``). Each instance has its own
loopback ports for ``/metrics`` and the probes, its own log file (appended to across
restarts) and optionally the Pulumi CLI on its ``PATH``.
The kubeconfig is a parameter, so a caller can run it as any user, not only the admin.

It runs in a session of its own: a Ctrl-C in the terminal reaches the caller, which
decides how the operator stops (``hack/dev.py`` forwards SIGTERM). SIGKILL takes every
descendant with it, as a container's death does in Kubernetes; the Pulumi CLI and its
plugins run in sessions of their own, so a process-group kill would miss them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.process import free_port

REPO = Path(__file__).resolve().parents[1]
STACK_OPERATOR = "pulumi_stack_operator"
START_ATTEMPTS = 3


class Operator:
    """One operator process: restartable with the same flags, its log kept.

    Flags are, in order (a later one wins): the connection flags (kubeconfig,
    namespaces, work dir, metrics and probe addresses), ``flags`` (fixed for this
    instance), then the ``extra`` flags of the last ``start``. ``proc`` is the running
    process, or None once ``stop`` has reaped it.
    """

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        *,
        module: str = STACK_OPERATOR,
        namespaces: Sequence[str] = (),
        work_dir: Path | None = None,
        flags: Sequence[str] = (),
        pulumi_bin: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Prepare (not start) the process.

        Args:
            kubeconfig: the cluster and user the operator runs as.
            log: file receiving stdout and stderr (appended to).
            module: the ``python -m`` module: ``STACK_OPERATOR`` (the default) or a test's own.
            namespaces: namespaces to watch; empty watches all.
            work_dir: ``--work-dir`` (the real operator only); None keeps its default.
            flags: flags for every start, after the connection flags.
            pulumi_bin: directory holding the Pulumi CLI and its Python plugins; put
                first on PATH, with the offline Pulumi settings, when given.
            env: extra environment variables (win over everything else).
        """
        self.kubeconfig, self.log, self.module = kubeconfig, log, module
        self.namespaces, self.work_dir = tuple(namespaces), work_dir
        self.flags, self.extra = list(flags), list[str]()
        self.metrics_port, self.probe_port = free_port(), free_port()
        self._pulumi_bin, self._env = pulumi_bin, dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() of the last start

    @property
    def pid(self) -> int | None:
        """The process id while it runs (or until ``stop`` reaps it)."""
        return self.proc.pid if self.proc is not None else None

    @property
    def argv(self) -> list[str]:
        """The command line of the next start."""
        argv = [sys.executable, "-m", self.module, f"--kubeconfig={self.kubeconfig}"]
        if self.namespaces:
            argv.append(f"--namespaces={','.join(self.namespaces)}")
        if self.work_dir is not None:
            argv.append(f"--work-dir={self.work_dir}")
        argv += [
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
        ]
        return [*argv, *self.flags, *self.extra]

    @property
    def temp_dir(self) -> Path:
        """The process's ``TMPDIR``, beside its log: what a killed operator leaves stays there."""
        return self.log.parent / f"{self.log.stem}-tmp"

    def environment(self) -> dict[str, str]:
        """The process environment: ours, its own ``TMPDIR``, the CLI first on PATH, ``env``."""
        env = dict(os.environ)
        env["TMPDIR"] = str(self.temp_dir)
        if self._pulumi_bin is not None:
            env.update(
                PATH=f"{self._pulumi_bin}{os.pathsep}{env.get('PATH', '')}",
                PULUMI_SKIP_UPDATE_CHECK="true",
                PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
                PULUMI_PYTHON_CMD=sys.executable,
            )
        env.update(self._env)
        return env

    def start(self, *extra: str) -> None:
        """Start the process with the ``extra`` flags given, else those of the last start.

        Returns once its probe port answers, or once it has exited (bad flags, say). A port
        taken between ``free_port`` and the operator's bind (other processes on this
        machine pick ephemeral ports too) is retried with fresh ports.
        """
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if extra:
            self.extra = list(extra)
        for _ in range(START_ATTEMPTS):
            mark = self.log.stat().st_size if self.log.exists() else 0
            self._spawn()
            if self._listening() or b"Address already in use" not in self._log_since(mark):
                return
            self.metrics_port, self.probe_port = free_port(), free_port()

    def _spawn(self) -> None:
        argv = self.argv
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.temp_dir.mkdir(exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- starting: {' '.join(argv)}\n".encode())
            out.flush()
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _listening(self, timeout: float = 60) -> bool:
        """Wait until the probe port answers (True) or the process exits (False)."""
        deadline = time.monotonic() + timeout
        while self.proc is not None and self.proc.poll() is None:
            if self.get("/healthz")[0] or time.monotonic() > deadline:
                return True
            time.sleep(0.05)
        return False

    def _log_since(self, offset: int) -> bytes:
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int | None:
        """Send ``sig`` and wait up to ``timeout`` seconds; the exit status, None if not started.

        SIGKILL also kills every descendant. On ``subprocess.TimeoutExpired`` the process
        is kept, so a second ``stop(signal.SIGKILL)`` can still end it.
        """
        proc = self.proc
        if proc is None:
            return None
        family = descendants(proc.pid) if sig == signal.SIGKILL else []
        if proc.poll() is None:
            proc.send_signal(sig)
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        status = proc.wait(timeout)
        self.proc = None
        return status

    def restart(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int | None:
        """Stop with ``sig``, then start again with the same flags; the old exit status."""
        status = self.stop(sig, timeout)
        self.start()
        return status

    def get(self, path: str, port: int | None = None) -> tuple[int, str]:
        """GET ``path`` from the probe port (or ``port``): (status, body), (0, '') if down."""
        url = f"http://127.0.0.1:{port or self.probe_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> str:
        """The current /metrics text ('' if unreachable)."""
        status, body = self.get("/metrics", self.metrics_port)
        return body if status == 200 else ""

    def metric(self, line_prefix: str) -> str | None:
        """The value of the first /metrics line starting with ``line_prefix``."""
        for line in self.metrics().splitlines():
            if line.startswith(line_prefix):
                return line.rsplit(" ", 1)[1]
        return None

    def is_leader(self, lease: str = "pulumi-stack-operator") -> bool:
        """The leader-election gauge for ``lease`` reads 1."""
        return self.metric(f'leader_election_master_status{{name="{lease}"}}') == "1.0"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *descendants(child)]
    return found
