"""What the reconciler and a runner exchange: requests, progress, outcomes and lock holders."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from controller.tracing import TraceContext
from workspace.runner.job import RunJob
from workspace.source import ProgramDirError, SourceError, SourceFailure

Operation = Literal["up", "preview", "refresh", "destroy"]
Step = Literal["install", "refresh", "update", "preview", "destroy"]

MASK = "[secret]"  # what replaces a secret value
MESSAGE_LIMIT = 4096  # UTF-8 bytes of Outcome.message
PROGRESS_INTERVAL = 1.0  # seconds: the most often one step reports progress
DEFAULT_INTERRUPT_GRACE = 60.0  # seconds between SIGINT and SIGKILL of the CLI and its plugins


class ErrorKind(enum.StrEnum):
    """Why an operation failed. The reconciler maps each kind to one queue action."""

    NONE = "None"
    UPDATE_FAILED = "UpdateFailed"
    """The program or a resource failed: retry with backoff."""
    CONFLICT = "Conflict"
    """Another update holds the stack's lock: retry soon; ``Runner.locks`` says who."""
    STACK_NOT_FOUND = "StackNotFound"
    """``use_local_stack_only`` and the stack does not exist: wait for a change."""
    REFRESH_CHANGES = "RefreshChanges"
    """``expect_no_refresh_changes`` and refresh found drift."""
    PROGRAM_INVALID = "ProgramInvalid"
    """Pulumi.yaml or stack config missing or invalid, or the program does not compile."""
    SETUP_FAILED = "SetupFailed"
    """Selecting or creating the stack or setting its config failed (backend unreachable,
    bad credentials or passphrase, invalid config key): retry with backoff."""
    INTERRUPTED = "Interrupted"
    """``stop`` was set: the CLI was interrupted or never started."""
    DEPENDENCIES_FAILED = "DependenciesFailed"
    """Installing the program's dependencies or plugins failed and may work later (a
    registry or mirror did not answer, or the cause is unknown): retry with backoff."""
    DEPENDENCIES_INVALID = "DependenciesInvalid"
    """The program's dependencies can never install as written (a lockfile out of step
    with its manifest, a version or plugin that does not exist, a toolchain the image does
    not have): wait for a change."""
    SOURCE_FAILED = "SourceFailed"
    """The run's source could not be laid out where the run happens (a checkout, a Flux
    artifact, the program's directory in it): ``Outcome.source`` says why, and the
    reconciler judges it as it judges the same failure met before a run."""
    RUNNER_FAILED = "RunnerFailed"
    """The run's pod ended without an outcome (deleted, evicted, OOM-killed, past its
    deadline) or could not start (image pull, missing Secret): retry with backoff; the
    message carries the pod's own reason."""


class StopSignal(threading.Event):
    """A run's stop event that also says why it was set (``cause``).

    ``"shutdown"``: the operator is stopping (a runner whose runs outlive it may leave
    them going); ``"deadline"``: the run's deadline passed; ``"interrupt"`` or None: stop
    the run. A plain ``threading.Event`` means ``"interrupt"``.
    """

    def __init__(self) -> None:
        """An unset event with no cause."""
        super().__init__()
        self.cause: str | None = None

    def set_for(self, cause: str) -> None:
        """Set the event, recording ``cause`` first."""
        self.cause = cause
        self.set()


def stop_cause(stop: threading.Event) -> str:
    """Why ``stop`` was set: ``shutdown``, ``deadline`` or ``interrupt``."""
    return (stop.cause if isinstance(stop, StopSignal) else None) or "interrupt"


@dataclass(frozen=True, repr=False)
class UpdateRequest:
    """Everything one operation needs. The caller resolves sources, secrets and envRefs.

    ``env`` is added to the CLI's environment (backend URL, access tokens, passphrase,
    resolved envRefs). It may hold secrets and is never logged; ``repr`` shows only the
    names of ``env`` and ``secret_config``. Config keys without a namespace get the
    project's (``path`` means ``<project>:path``). A key that is in both ``config`` and
    ``secret_config`` is secret. ``secrets_provider`` is used when the stack is created.
    ``expect_no_refresh_changes`` applies only with ``refresh``. ``targets`` applies to
    ``up`` and ``preview``, and with it ``target_dependents`` (``--target-dependents``: the
    targets' dependents too; ignored without targets). ``run_program`` makes ``destroy`` run
    the program (``--run-program``: its dependencies are installed first). ``environments``
    are Pulumi ESC environments: before the operation the stack's environment list is made
    exactly these, in order; when empty, the list is left as the source has it (only Pulumi
    Cloud backends have environments). ``pulumi_home`` is the Stack's own ``PULUMI_HOME``
    (created on first use; the caller deletes it with the Stack); None uses the runner's
    shared home, which is safe only for callers that run one tenant's stacks. ``job`` is
    what a runner that runs elsewhere needs instead of ``work_dir``, ``env`` and
    ``secret_config`` (references, never secret values); ``LocalRunner`` ignores it.
    ``trace``: where the CLI's own spans belong (``--otel-traces`` and ``TRACEPARENT`` of
    its engine operations); None: the CLI exports none.
    ``secret_env`` names the ``env`` entries whose values came from Secrets; the others
    are plain (written in the Stack or the pod's own environment) and are masked in
    messages only when their name says they are credentials (``scrub``). None: where the
    env came from is unknown, and every value in it may be secret.
    """

    work_dir: Path
    stack: str
    env: Mapping[str, str]
    config: Mapping[str, str] = field(default_factory=dict)
    secret_config: Mapping[str, str] = field(default_factory=dict)
    secrets_provider: str | None = None
    refresh: bool = False
    expect_no_refresh_changes: bool = False
    preview: bool = False
    targets: tuple[str, ...] = ()
    use_local_stack_only: bool = False
    message: str = ""
    pulumi_home: Path | None = None
    job: RunJob | None = None
    target_dependents: bool = False
    run_program: bool = False
    environments: tuple[str, ...] = ()
    secret_env: frozenset[str] | None = None
    trace: TraceContext | None = None

    def __repr__(self) -> str:
        """Show everything but values that may be secret."""
        return (
            f"UpdateRequest(work_dir={str(self.work_dir)!r}, stack={self.stack!r}, "
            f"env=<{', '.join(sorted(self.env))}>, config={sorted(self.config)!r}, "
            f"secret_config=<{', '.join(sorted(self.secret_config))}>, "
            f"secrets_provider={self.secrets_provider!r}, refresh={self.refresh}, "
            f"expect_no_refresh_changes={self.expect_no_refresh_changes}, "
            f"preview={self.preview}, targets={self.targets!r}, "
            f"use_local_stack_only={self.use_local_stack_only}, message={self.message!r}, "
            f"pulumi_home={str(self.pulumi_home) if self.pulumi_home else None!r}, "
            f"job={self.job!r}, target_dependents={self.target_dependents}, "
            f"run_program={self.run_program}, environments={self.environments!r}, "
            f"secret_env={sorted(self.secret_env) if self.secret_env is not None else None!r}, "
            f"trace={self.trace!r})"
        )


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the running step is.

    Counts exclude provider resources, like Pulumi's own change summary. ``resources_total``
    is the best known total: the steps started so far, or the summary's count once the
    engine sent it. ``current`` is ``"<op> <urn>"`` of the latest step that started; for
    the ``install`` step (before the engine runs), what is being installed
    (``installing dependencies (npm ci)``), with ``started`` the time it started (aware).
    """

    step: Step
    resources_done: int
    resources_total: int
    resources_failed: int
    current: str | None
    started: datetime | None = None


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True, slots=True)
class InstallRecord:
    """One dependency or plugin step of a run, as the metrics count it.

    ``kind`` is the runtime (``nodejs``, ``python``, ``go``) or ``plugins``; ``tool`` what
    ran or would have run (``npm ci``); ``hit`` says the cache had it (nothing ran);
    ``seconds`` is the time the step took (a hit's is the lookup's).
    """

    kind: str
    tool: str
    hit: bool
    seconds: float
    succeeded: bool = True


@dataclass(frozen=True, slots=True)
class ProjectInfo:
    """The program's project, as its project file (``Pulumi.yaml``) names it.

    ``runtime`` is the runtime's name (``nodejs``, ``python``, ``yaml``, …), also when the
    file gives the runtime as a mapping with options.
    """

    name: str
    runtime: str


@dataclass(frozen=True, slots=True)
class SourceFault:
    """Why a run's source could not be laid out, as the source layer classified it.

    ``failure`` is the source's failure (``SourceFailure``: credentials refused, unknown
    revision, unreachable, a Flux artifact not matching its digest or unsafe); None when
    the source was there but the program's directory (``spec.repoDir``,
    ``spec.fluxSource.dir``) is not in it. ``transient``: retrying later may succeed.
    """

    failure: SourceFailure | None
    transient: bool = False

    @classmethod
    def of(cls, err: SourceError | ProgramDirError) -> SourceFault:
        """The fault of a failed source (``SourceError``) or program directory."""
        if isinstance(err, SourceError):
            return cls(err.reason, err.transient)
        return cls(None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one operation did.

    ``message`` is the error on failure: the engine's error diagnostics, else the CLI's
    last output lines, scrubbed of secrets and cut to ``MESSAGE_LIMIT`` bytes. On success
    it is empty or a short note. ``outputs`` are the stack outputs after a successful
    ``up`` (``"[secret]"`` for secret ones and ones holding a secret value), else empty.
    ``resource_changes`` counts steps by operation (``{"create": 1, "same": 3}``), also for
    a failed or previewed operation. Times are aware UTC. ``installs`` are the dependency
    and plugin steps that ran or hit their cache; ``cache_bytes`` what the dependency
    cache held after an install (``environments``, ``downloads``, ``plugins``), empty when
    it was not measured. ``project`` is the program's project when its project file could
    be read (also for a failure after that), else None. ``seconds`` is where the run's
    time went, by phase, as the runner measured it: ``install`` (dependencies and
    plugins, the plugin step's ``pulumi install`` included), ``cli`` (every other ``pulumi``
    command together), and in a run pod ``checkout``
    (the init container's); a phase that did not happen is absent. ``source`` is the
    source's fault when ``error`` is ``SOURCE_FAILED`` (else None).
    """

    operation: Operation
    succeeded: bool
    error: ErrorKind
    message: str
    outputs: Mapping[str, Any]
    resource_changes: Mapping[str, int]
    permalink: str | None
    started: datetime
    ended: datetime
    installs: tuple[InstallRecord, ...] = ()
    cache_bytes: Mapping[str, int] = field(default_factory=dict)
    project: ProjectInfo | None = None
    seconds: Mapping[str, float] = field(default_factory=dict)
    source: SourceFault | None = None


@dataclass(frozen=True, slots=True)
class Detached:
    """A run left going, not finished: the operator is stopping and the run outlives it.

    Only a runner whose runs outlive the operator (a run pod) returns it. It is not an
    outcome: nothing is concluded from it, and the next instance attaches to the run.
    """

    operation: str
    started: datetime
    message: str


RunResult = Outcome | Detached
"""What a runner's operation returns: the outcome, or the run left going."""


def failed_outcome(  # noqa: PLR0913 - an outcome's fields
    operation: str,
    error: ErrorKind,
    message: str,
    started: datetime,
    ended: datetime,
    source: SourceFault | None = None,
) -> Outcome:
    """A failed ``operation`` that changed nothing, from ``started`` to ``ended`` (aware)."""
    return Outcome(
        operation=operation,  # type: ignore[arg-type]
        succeeded=False,
        error=error,
        message=message,
        outputs={},
        resource_changes={},
        permalink=None,
        started=started,
        ended=ended,
        source=source,
    )


@dataclass(frozen=True, slots=True)
class LockInfo:
    """Who holds a stack's backend lock, as the lock says (a field may be unknown)."""

    pid: int | None = None
    hostname: str | None = None
    username: str | None = None
    timestamp: datetime | None = None
