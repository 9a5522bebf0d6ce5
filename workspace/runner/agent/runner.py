"""``AgentRunner``: the pod runner's contract without the pod: the agent as child processes.

Each operation runs the run pod's own agent (``pulumi-stack-operator agent``) on this
machine, with the request's ``RunJob`` as the pod would get it: in a fresh private
workspace (a directory of mode 0700 under the runner's root, removed after the run), the
checkout step (``agent checkout``, the pod's init container) and then the run step
(``agent``, the run container), or, where the pod has no such init container
(``RunJob.checkout_apart``), the one step that checks out and runs (``agent checkout
run``), each a child of the operator in a session of its own, with
the environment ``workspace.runner.agent.env`` builds (the git credentials for the
checkout only, the Stack's other Secret values for the run only, read through the API as
the kubelet would). The run step's stdout is the report channel
(``workspace.runner.channel``): progress goes to ``on_progress``, the outcome line is the
outcome. stderr (the agent's own log) goes to the operator's log at debug, scrubbed.
No secret value is ever on a command line.

What it is for: proving the job document, the agent's checkout and run, the report channel,
outcome parsing and the verdicts without a node (development and tests). It gives no
isolation: programs run as the operator's user on its machine, as with ``LocalRunner``.

Guarantees:

* A missing Secret, key or ConfigMap is ``RUNNER_FAILED`` naming it (never a value); so is
  a step that exits without an outcome (its exit status and last stderr lines, scrubbed of
  the run's secret values), and an outcome of another operation than the one asked for.
* ``stop`` (any cause: the operator stopping, the run's deadline, an interrupt) sends the
  agent SIGTERM, which interrupts its CLI as Ctrl-C does and reports ``INTERRUPTED``; a
  step still running ``interrupt_grace + kill_margin`` seconds later is killed with all
  its descendants (as the kubelet kills a pod past its grace). Runs die with the operator:
  ``attach`` returns None.
* Backend locks are the agent's business, as in a run pod (its lease on a ``file://``
  lock): ``locks`` is None, ``clear_stale_lock`` and ``cancel`` do nothing. The agent
  takes a lock bearing its own hostname for an earlier run of its Stack (in a pod, the
  pod's name); here that is this machine's name, so a live update another process on
  this machine runs on the same stack is broken once its (unrenewed) lease lapses.
* An operator killed outright (SIGKILL) leaves its agent running to its end, as
  ``LocalRunner`` leaves its CLI; a stopping operator interrupts it (``stop``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, ClassVar

import structlog

from controller.clock import Clock, RealClock
from workspace.process import kill_tree
from workspace.runner.agent.env import SHARE, Caching, MissingValueError, Reads, Values, step_envs
from workspace.runner.base import JobRunner, RunnerTraits
from workspace.runner.channel import parse_line
from workspace.runner.job import RunJob
from workspace.runner.local.runner import CliBinary
from workspace.runner.pod.spec import CHECKOUT_AND_RUN_ARGS, CHECKOUT_ARGS, GRACE_MARGIN
from workspace.runner.scrub import Scrubber
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    ErrorKind,
    Operation,
    Outcome,
    Progress,
    ProgressCallback,
    RunResult,
    UpdateRequest,
    failed_outcome,
)

log = structlog.get_logger(__name__)

AGENT_ARGS = ("-m", "pulumi_stack_operator", "agent")
STDERR_TAIL = 10  # last lines of a step's stderr that a failure message carries
POLL_SECONDS = 0.1  # how often a running step's stop event is looked at
READER_JOIN = 10.0  # seconds a step's pipes may stay open after it exited


@dataclass(frozen=True)
class Ended:
    """How a step ended.

    ``code`` is its exit status (negative: killed by that signal), ``tail`` its last
    stderr lines (scrubbed); ``interrupted``: it got SIGTERM; ``killed``: SIGKILL.
    """

    code: int
    tail: tuple[str, ...]
    interrupted: bool
    killed: bool


class AgentRunner(JobRunner):
    """Runs each operation through the agent as child processes (see the module doc)."""

    traits: ClassVar[RunnerTraits] = RunnerTraits(takes_job=True)

    def __init__(  # noqa: PLR0913 - settings, all but three keyword-only
        self,
        core: Reads,
        root: Path,
        pulumi: CliBinary,
        *,
        caching: Caching | None = None,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        kill_margin: float = GRACE_MARGIN,
        clock: Clock | None = None,
        agent: Sequence[str] = (sys.executable, *AGENT_ARGS),
    ) -> None:
        """Run ``agent`` with the CLI of ``pulumi``, in workspaces under ``root``.

        Secrets and ConfigMaps are read through ``core`` (a ``CoreApi``); ``caching`` is
        the run step's cache (default: ``.cache`` under ``root``); a step is killed
        ``interrupt_grace + kill_margin`` seconds after its SIGTERM; time is read on
        ``clock``.
        """
        self.core = core
        self.root = root.absolute()
        self.cli_dir = str(Path(pulumi.command).parent)
        self.caching = caching or Caching(self.root / ".cache", 10 * 1024**3)
        self.kill_after = interrupt_grace + kill_margin
        self.clock = clock or RealClock()
        self.agent = tuple(agent)

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult | None:
        """None: the agent's processes die with the operator."""
        del request, on_progress, stop
        return None

    # one operation ------------------------------------------------------------------

    def _operate(
        self,
        job: RunJob,
        operation: Operation,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> Outcome:
        started = self.clock.wall()
        if stop.is_set():
            return self._failed(operation, started, ErrorKind.INTERRUPTED, "stopped before it ran")
        workspace = self._workspace(job)
        try:
            return self._steps(Operating(job, operation, workspace, started), on_progress, stop)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)

    def _workspace(self, job: RunJob) -> Path:
        """A fresh private directory (0700) for one run, with the pod's directories in it."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        prefix = f"{job.namespace}.{job.owner.name}."
        workspace = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        for name in ("home", "tmp", SHARE):
            (workspace / name).mkdir(mode=0o700)
        return workspace

    def _steps(
        self, at: Operating, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """The checkout step, then the run step (or the one step doing both); the outcome."""
        try:
            envs = step_envs(
                job=at.job,
                operation=at.operation,
                workspace=at.workspace,
                values=Values(self.core, at.job.namespace),
                cli_dir=self.cli_dir,
                caching=self.caching,
            )
        except MissingValueError as err:
            return self._failed(at.operation, at.started, ErrorKind.RUNNER_FAILED, str(err))
        scrubber = scrubber_of(envs.secrets, at.workspace)
        if not at.job.checkout_apart():
            run = [*self.agent, *CHECKOUT_AND_RUN_ARGS]
            return self._run_step(at, run, envs.run, on_progress, stop, scrubber)
        checkout = [*self.agent, *CHECKOUT_ARGS]
        checked = self._step(checkout, envs.checkout, at, stop, _ignore, scrubber)
        if checked.interrupted or stop.is_set():
            return self._interrupted(at, "the checkout step")
        if checked.code != 0:
            return self._no_outcome(at, "the checkout step", checked, scrubber)
        return self._run_step(at, list(self.agent), envs.run, on_progress, stop, scrubber)

    def _run_step(  # noqa: PLR0913 - one step's facts
        self,
        at: Operating,
        argv: list[str],
        env: Mapping[str, str],
        on_progress: ProgressCallback,
        stop: threading.Event,
        scrubber: Scrubber,
    ) -> Outcome:
        """The run step; its outcome, checked to be of the operation asked for."""
        reports = Reports(on_progress)
        ran = self._step(argv, env, at, stop, reports.line, scrubber)
        outcome = reports.outcome
        if outcome is None and ran.interrupted:
            return self._interrupted(at, "the run step")
        if outcome is None:
            return self._no_outcome(at, "the run step", ran, scrubber)
        if outcome.operation != at.operation:
            message = f"the agent reported a {outcome.operation}, not the {at.operation} it ran"
            return self._failed(at.operation, at.started, ErrorKind.RUNNER_FAILED, message)
        return outcome

    def _step(  # noqa: PLR0913 - one child's facts
        self,
        argv: list[str],
        env: Mapping[str, str],
        at: Operating,
        stop: threading.Event,
        on_stdout: Callable[[str], None],
        scrubber: Scrubber,
    ) -> Ended:
        """Run one step to its end; SIGTERM on ``stop``, SIGKILL (its tree) past the grace."""
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)

        def on_stderr(line: str) -> None:
            text = scrubber.scrub(line)
            tail.append(text)
            log.debug("agent", stack=f"{at.job.namespace}/{at.job.owner.name}", line=text)

        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=at.workspace,
            env=dict(env),
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        readers = [_reader(proc.stdout, on_stdout), _reader(proc.stderr, on_stderr)]
        try:
            interrupted, killed = self._wait(proc, stop)
        finally:
            if proc.poll() is None:  # unwinding: leave nothing behind
                kill_tree(proc.pid)
                proc.wait()
            for reader in readers:
                reader.join(READER_JOIN)
        return Ended(proc.returncode, tuple(tail), interrupted, killed)

    def _wait(self, proc: subprocess.Popen[str], stop: threading.Event) -> tuple[bool, bool]:
        """Wait for ``proc``: ``(interrupted, killed)``."""
        terminated_at: float | None = None
        while True:
            try:
                proc.wait(timeout=POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            else:
                return terminated_at is not None, False
            if terminated_at is None and stop.is_set():
                log.info("Interrupting the agent", pid=proc.pid, kill_after=self.kill_after)
                terminated_at = self.clock.now()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
            if terminated_at is not None and self.clock.now() - terminated_at >= self.kill_after:
                log.warning("Killing the agent and its descendants", pid=proc.pid)
                kill_tree(proc.pid)
                proc.wait()
                return True, True

    def _no_outcome(self, at: Operating, step: str, ended: Ended, scrubber: Scrubber) -> Outcome:
        status = f"signal {-ended.code}" if ended.code < 0 else f"status {ended.code}"
        message = f"the agent's {step} ended without an outcome ({status})"
        if ended.tail:
            message += ": " + scrubber.scrub(" | ".join(ended.tail))
        log.warning("The agent ended without an outcome", step=step, code=ended.code)
        return self._failed(at.operation, at.started, ErrorKind.RUNNER_FAILED, message)

    def _interrupted(self, at: Operating, step: str) -> Outcome:
        message = f"interrupted by the operator; {step} ended without an outcome"
        return self._failed(at.operation, at.started, ErrorKind.INTERRUPTED, message)

    def _failed(self, operation: str, started: datetime, error: ErrorKind, message: str) -> Outcome:
        return failed_outcome(operation, error, message, started, self.clock.wall())


@dataclass(frozen=True)
class Operating:
    """One operation's facts: its job, operation, workspace and start (aware)."""

    job: RunJob
    operation: Operation
    workspace: Path
    started: datetime


class Reports:
    """The run step's report lines: progress passed on, the outcome kept (the last one)."""

    def __init__(self, on_progress: ProgressCallback) -> None:
        """Pass progress to ``on_progress``."""
        self._on_progress = on_progress
        self.outcome: Outcome | None = None

    def line(self, text: str) -> None:
        """Take one stdout line; any other line than a report is ignored."""
        report = parse_line(text)
        if isinstance(report, Progress):
            try:
                self._on_progress(report)
            except Exception:
                log.exception("Progress callback failed")
        elif isinstance(report, Outcome):
            self.outcome = report


def scrubber_of(secrets: frozenset[str], workspace: Path) -> Scrubber:
    """A ``Scrubber`` masking ``secrets`` (and the known secret shapes)."""
    values = {f"value{index}": value for index, value in enumerate(sorted(secrets))}
    return Scrubber(UpdateRequest(workspace, "", {}, secret_config=values, secret_env=frozenset()))


def _reader(stream: IO[str] | None, on_line: Callable[[str], None]) -> threading.Thread:
    """A thread handing each line of ``stream`` (without its end) to ``on_line``."""

    def read() -> None:
        assert stream is not None  # noqa: S101 - a PIPE
        with stream:
            for line in iter(stream.readline, ""):
                try:
                    on_line(line.removesuffix("\n"))
                except Exception:  # the pipe must keep draining, or the child blocks
                    log.exception("Reading the agent's output failed")

    thread = threading.Thread(target=read, name="agent-output", daemon=True)
    thread.start()
    return thread


def _ignore(line: str) -> None:
    del line
