"""The run pod's agent (``pulumi-stack-operator agent``): one Stack's operation, in its pod.

It reads its job from the pod's environment: ``PSO_JOB`` (the JSON the reconciler built:
source, stack, config; no secret value), ``PSO_OPERATION`` (``up``, ``preview`` or
``destroy``), and the ``PSO_SECRET_<n>`` variables the kubelet filled from the Stack's
Secrets. It checks the source out, runs the operation with ``LocalRunner`` (the same code
as the local runner: scrubbing, progress, outcome), and prints its reports on stdout
(``reconcile.runner.channel``); its own log goes to stderr.

The program's environment is the pod's (the Stack's ``workspaceTemplate`` env, the
ServiceAccount's in-cluster variables) plus the Stack's ``envRefs``, never a ``PSO_``
variable. SIGTERM (the pod being deleted: the operator interrupting the run, a node drain)
interrupts the CLI the way Ctrl-C does; the outcome then says ``Interrupted``.

A backend lock whose hostname is this pod's name was left by an earlier run pod of this
Stack: the API server lets one pod of that name exist at a time, so that pod is gone and
its lock is dead; it is released and the operation runs once more.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from reconcile.runner import ErrorKind, LocalRunner, Outcome, Progress, UpdateRequest
from reconcile.runner import locks as backend_locks
from reconcile.runner.channel import outcome_line, progress_line
from reconcile.runner.failures import StepFailedError
from reconcile.runner.job import SECRET_ENV_PREFIX
from reconcile.runner.project import load_project
from reconcile.runner.types import failed_outcome
from reconcile.source import GitCredentials, ProgramDirError, SourceError, checkout, program_dir

log = structlog.get_logger(__name__)

WORKSPACE = Path(os.environ.get("PSO_WORKSPACE", "/workspace"))


@dataclass(frozen=True)
class AgentJob:
    """The decoded ``PSO_JOB`` with its secret values filled in from the environment."""

    job: Mapping[str, Any]
    operation: str
    secrets: Mapping[str, str]

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> AgentJob:
        """Read the job from ``environ`` (``KeyError``/``ValueError`` when it is bad)."""
        operation = environ["PSO_OPERATION"]
        if operation not in ("up", "preview", "destroy"):
            msg = f"PSO_OPERATION is up, preview or destroy, not {operation!r}"
            raise ValueError(msg)
        secrets = {k: v for k, v in environ.items() if k.startswith(SECRET_ENV_PREFIX)}
        return cls(json.loads(environ["PSO_JOB"]), operation, secrets)

    def value(self, ref: Mapping[str, str]) -> str:
        """A ref's value: ``{"env": "PSO_SECRET_<n>"}`` (a Secret key) or ``{"value": …}``."""
        if "env" in ref:
            return self.secrets[ref["env"]]
        return ref["value"]

    def values(self, field: str) -> dict[str, str]:
        """The job's ``field`` (a map of refs) with every value filled in."""
        refs: Mapping[str, Mapping[str, str]] = self.job.get(field) or {}
        return {name: self.value(ref) for name, ref in refs.items()}

    def credentials(self) -> GitCredentials | None:
        """The git credentials of the Stack's ``gitAuth``, if it has some."""
        auth = self.values("gitAuth")
        return GitCredentials(**auth) if auth else None

    def request(self, work_dir: Path, environ: Mapping[str, str]) -> UpdateRequest:
        """The LocalRunner request: the pod's environment, the job's values and Secrets."""
        job = self.job
        env = {k: v for k, v in environ.items() if not k.startswith("PSO_")}
        env |= job.get("env") or {}
        env |= self.values("envRefs")
        secret_config = self.values("secretConfig")
        return UpdateRequest(
            work_dir=work_dir,
            stack=job["stack"],
            env=env,
            config=job.get("config") or {},
            secret_config=secret_config,
            secrets_provider=job.get("secretsProvider"),
            refresh=bool(job.get("refresh")),
            expect_no_refresh_changes=bool(job.get("expectNoRefreshChanges")),
            preview=self.operation == "preview",
            targets=tuple(job.get("targets") or ()),
            use_local_stack_only=bool(job.get("useLocalStackOnly")),
            message=str(job.get("message") or ""),
            pulumi_home=WORKSPACE / "home",
        )


def main(environ: Mapping[str, str] | None = None) -> int:
    """Run the pod's job and print its outcome; 0 once the outcome is printed."""
    environ = dict(os.environ if environ is None else environ)
    stop = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        stop.set()

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    job = AgentJob.from_environment(environ)
    for name in list(os.environ):  # the CLI gets only what the request says
        if name.startswith("PSO_"):
            del os.environ[name]
    outcome = run(job, environ, stop)
    print(outcome_line(outcome), flush=True)  # noqa: T201 - the report channel is stdout
    return 0


def run(job: AgentJob, environ: Mapping[str, str], stop: threading.Event) -> Outcome:
    """Check out, then run the job's operation (once more after releasing a dead lock)."""
    from pulumi_stack_operator.wiring import pulumi_command  # noqa: PLC0415 - heavy import

    started = _now()
    prepared = _checkout(job, started)
    if isinstance(prepared, Outcome):
        return prepared
    request = job.request(prepared, environ)
    os.environ.setdefault("PULUMI_PYTHON_CMD", sys.executable)
    store = WORKSPACE / ".pulumi-home"
    store.mkdir(parents=True, exist_ok=True)
    runner = LocalRunner(pulumi_command(), store)
    operate = runner.destroy if job.operation == "destroy" else runner.run
    outcome = operate(request, on_progress=_print_progress, stop=stop)
    if outcome.error is ErrorKind.CONFLICT and _release_own_locks(runner, request):
        outcome = operate(request, on_progress=_print_progress, stop=stop)
    return outcome


def _checkout(job: AgentJob, started: datetime) -> Path | Outcome:
    spec = job.job
    source = WORKSPACE / "source"
    try:
        checkout(spec["repo"], source, commit=spec["commit"], credentials=job.credentials())
        return program_dir(source, spec.get("repoDir"))
    except SourceError as err:
        return _failed(job, started, ErrorKind.SETUP_FAILED, f"checking the source out: {err}")
    except ProgramDirError as err:
        return _failed(job, started, ErrorKind.PROGRAM_INVALID, str(err))


def _release_own_locks(runner: LocalRunner, request: UpdateRequest) -> bool:
    """Delete the stack's locks if every one was taken by a pod of this pod's name."""
    try:
        project = load_project(request.work_dir)
    except StepFailedError:
        return False
    home = request.pulumi_home or runner.pulumi_home
    backend = backend_locks.backend_dir(request, project, home)
    if backend is None:
        return False
    found = backend_locks.lock_files(backend, project, request.stack)
    host = socket.gethostname()
    if not found or any(lock.info.hostname != host for lock in found):
        return False
    for lock in found:
        lock.path.unlink(missing_ok=True)
    log.warning("Released the lock an earlier run pod of this Stack left", locks=len(found))
    return True


def _print_progress(progress: Progress) -> None:
    print(progress_line(progress), flush=True)  # noqa: T201 - the report channel is stdout


def _failed(job: AgentJob, started: datetime, error: ErrorKind, message: str) -> Outcome:
    return failed_outcome(job.operation, error, message, started)


def _now() -> datetime:
    return datetime.now(UTC)
