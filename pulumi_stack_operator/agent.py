"""The run pod's agent (``pulumi-stack-operator agent``): one Stack's operation, in its pod.

It reads its job from the pod's environment: ``PSO_JOB`` (the JSON the reconciler built:
source, stack, config; no secret value), ``PSO_OPERATION`` (``up``, ``preview`` or
``destroy``), and the variables the kubelet filled from the Stack's Secrets. As the
``checkout`` init container (``agent checkout``) it lays the source out in the workspace:
a git checkout (a shallow one when the job says ``shallow``), a Flux artifact (its digest
verified before anything is unpacked, then unpacked safely), or a rendered Program's
``Pulumi.yaml``; only it has the git credentials (``PSO_GIT_<n>``). A run pod without
that init container (``RunJob.checkout_apart``: no credentials to keep from the program)
has its run container check the source out itself first (``agent checkout run``), the
same way. As the run container
it runs the operation with ``LocalRunner`` (the same code as the local runner: installing
the program's dependencies, scrubbing, progress, outcome) with the ``PSO_SECRET_<n>``
values, and prints its reports on stdout (``workspace.runner.channel``); its own log goes to
stderr. What it installs is cached on the namespace's cache volume when the pod mounts
one (``PSO_CACHE_DIR``; see ``local_runner``).

The program's environment is the pod's (the Stack's ``workspaceTemplate`` env, the
ServiceAccount's in-cluster variables) plus the Stack's ``envRefs``, never a ``PSO_``
variable. SIGTERM (the pod being deleted: the operator interrupting the run, a node drain)
interrupts the CLI the way Ctrl-C does; the outcome then says ``Interrupted``.

A run the operator no longer sees (its node lost, its pod force-deleted) may still be going
on, and a backend lock whose hostname is this pod's name was taken by a run pod of this
Stack: the name alone proves nothing. So, for a ``file://`` backend, the agent keeps a
lease on its CLI's lock (``workspace.runner.lease``: the lock's mtime, renewed every few
seconds) and waits, before its operation and after a ``CONFLICT``, until no lock of its
name stands: one that goes (its run ended) or whose lease lapses (its run is dead) is
fine; one still renewed after ``fence.SETTLE_BOUND`` seconds is a ``CONFLICT``, waited
for as any held lock. The agent fences its own run (``pulumi_stack_operator.fence``):
once its pod is gone or its lease cannot be renewed, it interrupts its CLI (and kills it
before its lease runs out), and once the operation is over it releases the lock its
stopped CLI left. Other backends refuse a second update with their own lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from controller.clock import RealClock
from controller.signals import relay_signals
from controller.tracing import TraceContext
from pulumi_stack_operator import warm
from pulumi_stack_operator.fence import SETTLE_BOUND, Fence, PodPresence
from pulumi_stack_operator.pulumi_cli import VERSION_MEMO, pulumi_command
from workspace.runner import (
    DEFAULT_CACHE_LIMIT,
    ENV_SOURCES,
    GIT_ENV_PREFIX,
    SECRET_ENV_PREFIX,
    EnvSources,
    ErrorKind,
    LocalRunner,
    Outcome,
    Progress,
    SourceFault,
    UpdateRequest,
    envfile,
    failed_outcome,
    fitted,
    job_line,
    outcome_line,
    parse_line,
    progress_line,
)
from workspace.runner.document import JobDocument, ValueRef
from workspace.runner.envfile import ENV_VARIABLE
from workspace.runner.job import SOURCE_DIR, TRACE_VARIABLES, trace_of
from workspace.runner.job import WORKSPACE as POD_WORKSPACE
from workspace.runner.layout import lay_out, program_in
from workspace.runner.lease import LeaseKeeper, Settled, settle_own
from workspace.runner.locks import LEASE_MARGIN, LEASE_SECONDS, LockFile, StackLocks, stack_locks
from workspace.source import GitCredentials, ProgramDirError, SourceError

WORKSPACE = Path(os.environ.get("PSO_WORKSPACE", POD_WORKSPACE))
SOURCE = WORKSPACE / SOURCE_DIR
CHECKOUT_FAILED = WORKSPACE / "checkout-failed"  # the outcome of a failed checkout
CHECKOUT_SECONDS = WORKSPACE / "checkout-seconds"  # how long the init container's checkout took
CLOCK = RealClock()  # the run pod's one clock
Operate = Callable[..., Outcome]  # LocalRunner.run or .destroy


@dataclass(frozen=True)
class AgentJob:
    """The decoded ``PSO_JOB`` with its secret values filled in from the environment."""

    document: JobDocument
    operation: str
    secrets: Mapping[str, str]
    trace: TraceContext | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> AgentJob:
        """Read the job from ``environ`` (``KeyError``/``ValueError`` when it is bad)."""
        operation = environ["PSO_OPERATION"]
        if operation not in ("up", "preview", "destroy"):
            msg = f"PSO_OPERATION is up, preview or destroy, not {operation!r}"
            raise ValueError(msg)
        prefixes = (SECRET_ENV_PREFIX, GIT_ENV_PREFIX)
        secrets = {k: v for k, v in environ.items() if k.startswith(prefixes)}
        document = JobDocument.decode(environ["PSO_JOB"])
        return cls(document, operation, secrets, trace_of(environ))

    def value(self, ref: ValueRef) -> str:
        """A ref's value: its variable's (a Secret key the kubelet filled) or its own."""
        if ref.env is not None:
            return self.secrets[ref.env]
        return str(ref.value)

    def values(self, refs: Mapping[str, ValueRef]) -> dict[str, str]:
        """``refs`` with every value filled in."""
        return {name: self.value(ref) for name, ref in refs.items()}

    def credentials(self) -> GitCredentials | None:
        """The git credentials of the Stack's ``gitAuth``, if it has some."""
        auth = self.values(self.document.git_auth)
        return GitCredentials(**auth) if auth else None

    def request(
        self, work_dir: Path, environ: Mapping[str, str], written: Mapping[str, str] | None = None
    ) -> UpdateRequest:
        """The LocalRunner request: the pod's environment, the job's values and Secrets.

        ``written``: what the Stack's init containers wrote into ``$PULUMI_ENV``; it goes
        over the pod's environment, under the job's own (the spec wins), and its values
        are masked in messages as a Secret's are.
        """
        job = self.document
        env = {k: v for k, v in environ.items() if not k.startswith("PSO_")}
        env |= written or {}
        env |= job.env
        env |= self.values(job.env_refs)
        request = job.request(
            work_dir,
            env=env,
            secret_config=self.values(job.secret_config),
            preview=self.operation == "preview",
            pulumi_home=WORKSPACE / "home",
            secret_env=self.secret_env(environ, written or {}),
        )
        return dataclasses.replace(request, trace=self.trace)

    def secret_env(
        self, environ: Mapping[str, str], written: Mapping[str, str]
    ) -> frozenset[str] | None:
        """The request's env names whose values came from Secrets (None: not known).

        The pod's variables the template filled from Secrets (``PSO_ENV_SOURCES``) and
        those the init containers ``written`` (made at run time, treated as secrets),
        less those the job's own env or literal envRefs set, plus the envRefs from Secrets.
        """
        sources = EnvSources.decode(environ.get(ENV_SOURCES))
        if sources is None:
            return None
        refs = self.document.env_refs
        own = set(self.document.env) | set(refs)
        from_pod = (sources.secret_names(environ) | set(written)) - own
        return from_pod | {name for name, ref in refs.items() if ref.env is not None}


USAGE = "usage: pulumi-stack-operator agent [checkout [run]]"
MODES: Final[Mapping[tuple[str, ...], tuple[bool, bool]]] = {
    ("checkout",): (True, False),  # the init container
    (): (False, True),  # the run container after that init container
    ("checkout", "run"): (True, True),  # a run container that checks out itself
}
"""The agent's arguments -> (check the source out, run the job)."""


def main(args: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> int:
    """Check the source out, run the job and print its outcome, or both (``MODES``).

    0 when done; 2 (and the usage on stderr) for other arguments. A failed checkout is
    not an exit status: it is written as the run's outcome into ``CHECKOUT_FAILED``, which
    the run then reports instead of running.
    """
    environ = dict(os.environ if environ is None else environ)
    mode = MODES.get(tuple(args))
    if mode is None:
        print(USAGE, file=sys.stderr)  # noqa: T201 - a command-line error
        return 2
    checks_out, runs = mode
    if not runs:
        return checkout_only(environ)
    stop, inbox = threading.Event(), warm.inbox_of(environ)

    def stopping(_signum: int) -> None:  # relayed: Event.set in a handler can deadlock
        stop.set()
        inbox.ring()  # a warm agent dozing on its bell wakes now

    relay_signals(stopping)
    job = AgentJob.from_environment(environ)
    _forget_environment()
    if checks_out:
        check_out(job)
    spent: list[LeaseKeeper] = []
    report(run(job, environ, stop, spent), spent)
    window = warm.keep_warm(environ)
    if checks_out and window:
        serve_warm(environ, stop, window)
    return 0


def report(outcome: Outcome, spent: list[LeaseKeeper]) -> None:
    """Print ``outcome`` on the report channel, then release the locks a stopped CLI left."""
    outcome = fitted(with_checkout_seconds(outcome))
    print(outcome_line(outcome), flush=True)  # noqa: T201 - the report channel is stdout
    for keeper in spent:  # once reported: the lock a stopped CLI left goes
        keeper.release_spent()


def serve_warm(environ: Mapping[str, str], stop: threading.Event, window: float) -> None:
    """Run the jobs handed over (``warm``) until ``window`` seconds pass without one or stop.

    Each starts with its ``job_line`` in a container without the last run's processes and
    with an empty source directory, and checks its source out as the first did.
    """
    inbox = warm.inbox_of(environ)
    while not stop.is_set() and (delivery := inbox.wait(stop, window, CLOCK)) is not None:
        print(job_line(delivery.mark), flush=True)  # noqa: T201 - the report channel
        warm.kill_leftovers()
        reset_workspace()
        job_environ = delivery.environment(environ, TRACE_VARIABLES)
        job = AgentJob.from_environment(job_environ)
        check_out(job)
        spent: list[LeaseKeeper] = []
        report(run(job, job_environ, stop, spent), spent)


def reset_workspace() -> None:
    """Empty the source directory and forget the last checkout's records."""
    shutil.rmtree(SOURCE, ignore_errors=True)
    for record in (CHECKOUT_FAILED, CHECKOUT_SECONDS):
        record.unlink(missing_ok=True)


def checkout_only(environ: Mapping[str, str]) -> int:
    """The init container: check the source out into the workspace; 0 even if that failed."""
    job = AgentJob.from_environment(environ)
    _forget_environment()
    check_out(job)
    return 0


def check_out(job: AgentJob) -> None:
    """Lay the source out; its time in ``CHECKOUT_SECONDS``, a failure in ``CHECKOUT_FAILED``."""
    started = CLOCK.now()
    failed = _checkout(job, _now())
    with contextlib.suppress(OSError):  # a figure for the breakdown, never worth a failure
        CHECKOUT_SECONDS.write_text(f"{CLOCK.now() - started:.3f}\n")
    if failed is not None:
        CHECKOUT_FAILED.write_text(outcome_line(failed) + "\n")


def with_checkout_seconds(outcome: Outcome) -> Outcome:
    """``outcome`` with the init container's checkout time (``CHECKOUT_SECONDS``) added."""
    try:
        seconds = float(CHECKOUT_SECONDS.read_text())
    except (OSError, ValueError):
        return outcome
    return dataclasses.replace(outcome, seconds={**outcome.seconds, "checkout": seconds})


def run(
    job: AgentJob,
    environ: Mapping[str, str],
    stop: threading.Event,
    spent: list[LeaseKeeper] | None = None,
) -> Outcome:
    """Run the job's operation on the checkout, fenced (see the module docstring).

    The lease keepers of the operation are added to ``spent``: ``release_spent`` once
    the outcome is reported.
    """
    started = _now()
    if CHECKOUT_FAILED.exists():
        failed = parse_line(CHECKOUT_FAILED.read_text().strip())
        if isinstance(failed, Outcome):
            return failed
    try:
        work_dir = _program_dir(job)
    except ProgramDirError as err:
        return source_failed(job, started, err)
    try:
        written = envfile.read(Path(environ[ENV_VARIABLE])) if ENV_VARIABLE in environ else {}
    except envfile.EnvFileError as err:
        message = f"the file an init container wrote for the run's environment: {err}"
        return _failed(job, started, ErrorKind.SETUP_FAILED, message)
    request = job.request(work_dir, environ, written)
    os.environ.setdefault("PULUMI_PYTHON_CMD", sys.executable)
    runner = local_runner(environ)
    operate = runner.destroy if job.operation == "destroy" else runner.run
    fence = Fence(stop, CLOCK, pod=PodPresence.from_environment(environ, CLOCK))
    locks = stack_locks(request, runner.pulumi_home)
    with fence.watching():
        if locks is None:  # not a file backend: the backend's own lock refuses a second update
            outcome = operate(request, on_progress=_print_progress, stop=stop)
        else:
            outcome = _leased(Leased(job, operate, request, locks, fence), spent)
    return _fenced(outcome, fence)


@dataclass(frozen=True)
class Leased:
    """One operation on a ``file://`` backend, and what it needs to keep its lease."""

    job: AgentJob
    operate: Operate
    request: UpdateRequest
    locks: StackLocks
    fence: Fence


def _leased(leased: Leased, spent: list[LeaseKeeper] | None) -> Outcome:
    """Run once no earlier run pod's lock stands; again after releasing a lapsed one."""
    started = _now()
    waited = _settled(leased, started, conflict=None)
    if waited is not None:
        return waited
    outcome = _kept(leased, spent)
    if outcome.error is not ErrorKind.CONFLICT:
        return outcome
    waited = _settled(leased, started, conflict=outcome)
    return _kept(leased, spent) if waited is None else waited


def _settled(leased: Leased, started: datetime, conflict: Outcome | None) -> Outcome | None:
    """None to run (now, or again after a ``conflict``), else the outcome instead.

    Before the first run: None unless a lock of this pod's name is still renewed (a
    ``CONFLICT`` naming it) or the run is stopped. After a ``conflict``: None only once
    such locks lapsed and were released; else that conflict (or one naming the lock).
    """
    fence = leased.fence
    settled = settle_own(leased.locks, CLOCK, fence.stop, bound=SETTLE_BOUND)
    job = leased.job
    if settled.state is Settled.STOPPED:
        message = "stopped while waiting for an earlier run pod of this Stack to end"
        return _failed(job, started, ErrorKind.INTERRUPTED, message)
    if settled.state is Settled.HELD:
        return _failed(job, started, ErrorKind.CONFLICT, held_message(settled.held))
    if conflict is not None and settled.state is Settled.FREE:
        return conflict
    return None


def _kept(leased: Leased, spent: list[LeaseKeeper] | None) -> Outcome:
    """The operation, its CLI's lock leased (and fenced) while it runs."""
    keeper = LeaseKeeper(leased.locks, CLOCK)
    if spent is not None:
        spent.append(keeper)
    with leased.fence.keeping(keeper):
        return leased.operate(leased.request, on_progress=_print_progress, stop=leased.fence.stop)


def held_message(lock: LockFile | None) -> str:
    """The ``CONFLICT`` message of a lock an earlier run pod of this Stack still renews.

    The same words for as long as the same pod holds it (no time in them): a waiting
    verdict is rewritten only when what it says changes.
    """
    host = lock.info.hostname if lock is not None else None
    lapse = LEASE_SECONDS + LEASE_MARGIN
    return (
        f"the stack is locked by an earlier run pod of this Stack ({host or 'this name'}) "
        "that may still be running, on a node the cluster lost or after its pod was "
        f"force-deleted; it is waited for until it ends, or until its lease lapses "
        f"({lapse:.0f} s without renewal)"
    )


def _fenced(outcome: Outcome, fence: Fence) -> Outcome:
    """``outcome``, saying first why the run stopped itself when the fence stopped it."""
    if fence.reason is None or outcome.succeeded:
        return outcome
    message = f"the run stopped itself: {fence.reason}; {outcome.message}"
    return dataclasses.replace(outcome, message=message)


def local_runner(environ: Mapping[str, str]) -> LocalRunner:
    """The runner of the pod's operation, caching what it installs where the pod says.

    ``PSO_CACHE_DIR`` (the namespace's cache volume, when the pod mounts one) holds the
    installed dependencies, download caches and plugins, shared by the namespace's run
    pods; without it they live in the pod's workspace and go with it.
    ``PSO_CACHE_LIMIT`` bounds the cache (bytes); ``PSO_PLUGIN_MIRROR`` is where plugins
    are downloaded from. The CLI's version, checked on the first run, is remembered there
    too (``VERSION_MEMO``) for as long as the image's CLI is the same binary.
    """
    cache_dir = environ.get("PSO_CACHE_DIR")
    root = Path(cache_dir) if cache_dir else WORKSPACE
    plugin_home = root / ("pulumi-home" if cache_dir else ".pulumi-home")
    plugin_home.mkdir(parents=True, exist_ok=True)
    limit = environ.get("PSO_CACHE_LIMIT", "")
    return LocalRunner(
        pulumi_command(memo=root / VERSION_MEMO if cache_dir else None),
        plugin_home,
        cache=root / ("dependencies" if cache_dir else ".cache"),
        cache_limit=int(limit) if limit.isdigit() else DEFAULT_CACHE_LIMIT,
        plugin_mirror=environ.get("PSO_PLUGIN_MIRROR") or None,
    )


def _checkout(job: AgentJob, started: datetime) -> Outcome | None:
    """Lay the job's source out in ``SOURCE``; the failed outcome (``SOURCE_FAILED``), or None.

    A git commit is checked out (shallowly if the job says so); a Flux artifact is
    downloaded, its digest verified before anything is unpacked, and unpacked safely; a
    rendered Program is written as ``Pulumi.yaml`` (``workspace.runner.layout``).
    """
    try:
        lay_out(job.document.source, SOURCE, job.credentials())
    except SourceError as err:
        return source_failed(job, started, err)
    return None


def _program_dir(job: AgentJob) -> Path:
    """The program's directory in ``SOURCE`` (``ProgramDirError`` when it is not there)."""
    return program_in(job.document.source, SOURCE)


def _forget_environment() -> None:
    """Drop every ``PSO_`` variable: child processes get only what the request says."""
    for name in list(os.environ):
        if name.startswith("PSO_"):
            del os.environ[name]


def _print_progress(progress: Progress) -> None:
    print(progress_line(progress), flush=True)  # noqa: T201 - the report channel is stdout


def source_failed(job: AgentJob, started: datetime, err: SourceError | ProgramDirError) -> Outcome:
    """The outcome of a source that could not be laid out: ``SOURCE_FAILED``, typed.

    Its message is the source layer's own, as the local runner's verdict shows it.
    """
    fault = SourceFault.of(err)
    return failed_outcome(job.operation, ErrorKind.SOURCE_FAILED, str(err), started, _now(), fault)


def _failed(job: AgentJob, started: datetime, error: ErrorKind, message: str) -> Outcome:
    return failed_outcome(job.operation, error, message, started, _now())


def _now() -> datetime:
    return CLOCK.wall()
