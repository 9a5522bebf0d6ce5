"""``LocalRunner``: runs Pulumi operations as child processes of the operator.

It runs *local* programs: a directory holding ``Pulumi.yaml`` that the caller fetched. It
does not decide whether an operation is due (the reconciler does). It selects or creates
the stack, makes the stack's config (and ESC environments) match the request, runs an
optional ``refresh`` and then ``up`` or ``preview`` (or ``destroy``), and returns an
``Outcome`` (naming the program's project once its project file was read). Pulumi failures
never raise: each becomes an ``ErrorKind`` plus the engine's own error text.

Guarantees:

* Every CLI invocation is a subprocess running in ``request.work_dir``. No program runs in
  this interpreter. The CLI is the runner's absolute ``pulumi``, so a Stack's ``PATH``
  cannot substitute another one.
* Stacks share nothing that carries credentials. A request's ``pulumi_home`` is its Stack's
  own ``PULUMI_HOME`` (and ``HOME``); only its ``plugins`` directory is shared, a symlink to
  the runner's plugin store. The CLI saves the access token it was given in
  ``PULUMI_HOME/credentials.json`` and would reuse it for a later run without one; that
  file is deleted after every operation, so no token stays on disk between operations.
* The CLI's environment is the request's ``env`` over an allow-list of the operator's own
  variables (``workspace.runner.cli.INHERITED_ENV``).
* No config value is ever on a command line. Plain config is written into the stack's
  settings file (``Pulumi.<stack>.yaml``), secret config values reach
  ``pulumi config set --secret`` on stdin.
* Secrets stay out of argv, logs and the ``Outcome``: ``Outcome.message`` and logged CLI
  output are scrubbed of every value that may be secret (``Scrubber``). Outputs that are
  secret, or that contain such a value, are reported as ``"[secret]"``.
* Setting ``stop`` interrupts the running CLI the way Ctrl-C does: SIGINT makes the engine
  finish in-flight steps, write a clean checkpoint and release the lock. If the CLI is
  still running after the grace period, it and all its plugins get SIGKILL. The outcome
  is ``INTERRUPTED``.
* Progress comes from engine events: at most one report per second per step, plus one
  final report when the step ends. Callbacks run on other threads and never raise there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import structlog

from controller.clock import Clock, RealClock
from workspace.runner import locks as backend_locks
from workspace.runner.attempt import OperationRun
from workspace.runner.base import RunnerTraits
from workspace.runner.deps import DependencyStore, Installer
from workspace.runner.failures import StepFailedError
from workspace.runner.project import load_project
from workspace.runner.settings import RunnerSettings
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    LockInfo,
    Operation,
    Outcome,
    ProgressCallback,
    UpdateRequest,
)

T = TypeVar("T")
log = structlog.get_logger(__name__)


class CliBinary(Protocol):
    """Where the Pulumi CLI is (the composition root finds it once, at start-up)."""

    @property
    def command(self) -> str:
        """The path of the ``pulumi`` binary; absolute, so ``PATH`` cannot swap it."""
        ...


DEFAULT_CACHE_LIMIT = 10 * 1024**3  # bytes of installed dependencies and downloads


class LocalRunner:
    """Runs Pulumi operations for Stacks, one per call; safe to share between threads.

    Each call runs its own CLI processes; the caller must not run two operations on the
    same stack (or work dir, or ``pulumi_home``) at once. Only ``pulumi_command.command``
    is used. ``pulumi_home`` holds the plugin store every Stack's home links to
    (``plugins``), and is the ``PULUMI_HOME`` of requests without one of their own.
    Programs' dependencies are installed into ``cache`` (default: ``.cache`` beside
    ``pulumi_home``), kept under ``cache_limit`` bytes; ``plugin_mirror`` is the URL every
    plugin is downloaded from (None: each plugin's own source).
    """

    traits: ClassVar[RunnerTraits] = RunnerTraits()  # checks out nothing, dies with us

    def __init__(  # noqa: PLR0913 - settings, all keyword-only
        self,
        pulumi_command: CliBinary,
        pulumi_home: Path,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        cache: Path | None = None,
        cache_limit: int = DEFAULT_CACHE_LIMIT,
        plugin_mirror: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        """Use the CLI of ``pulumi_command``, sharing plugins in ``pulumi_home``.

        Every time a run reads (its start and end, step and install durations) is read
        on ``clock``.
        """
        self.pulumi_home = pulumi_home
        store = DependencyStore((cache or pulumi_home.parent / ".cache").absolute(), cache_limit)
        clock = clock or RealClock()
        self._settings = RunnerSettings(
            pulumi_command.command,
            pulumi_home,
            interrupt_grace,
            Installer(store, clock),
            plugin_mirror,
            clock,
        )

    @property
    def dependency_store(self) -> DependencyStore:
        """Where programs' dependencies are installed and cached."""
        return self._settings.installer.store

    @property
    def plugin_mirror(self) -> str | None:
        """The URL plugins are downloaded from (None: each plugin's own source)."""
        return self._settings.plugin_mirror

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Install, prepare the stack, optionally refresh, then ``up`` (or ``preview``).

        The program's dependencies and plugins are installed first (or found in the
        cache; see ``workspace.runner.deps``) and held until the operation ends. With
        ``refresh``, an ``up`` is preceded by ``pulumi refresh`` (failing with
        ``REFRESH_CHANGES`` on drift when ``expect_no_refresh_changes``). A preview never
        writes state: it runs ``preview --refresh``, preceded by a preview-only refresh
        when drift must fail it. The stack's config and environments are set first.
        """
        attempt = self._attempt(request, stop, on_progress)

        def phases() -> Outcome:
            attempt.open_stack(create=not request.use_local_stack_only)
            attempt.configure()
            attempt.environments()
            if request.refresh and (request.expect_no_refresh_changes or not request.preview):
                attempt.refresh()
            return attempt.preview() if request.preview else attempt.up()

        try:
            with attempt.installed():
                return _again_if_vanished(attempt, phases)
        except StepFailedError as failure:  # from installing, before any phase ran
            return attempt.failed(failure)
        finally:
            attempt.finish()

    def destroy(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> Outcome:
        """Destroy the stack's resources, then remove the stack (and its config file).

        A stack that does not exist counts as destroyed. ``refresh``, ``preview`` and
        ``targets`` of the request are ignored. With ``run_program`` the destroy runs the
        program: its dependencies and plugins are installed first, as for ``run``.
        """
        attempt = OperationRun(self._settings, request, "destroy", stop, on_progress)

        def phases() -> Outcome:
            if not attempt.find_stack():
                return attempt.succeeded(note="the stack does not exist; nothing to destroy")
            attempt.configure()
            attempt.environments()
            if not request.run_program:
                return attempt.destroy()
            with attempt.installed():
                return attempt.destroy()

        try:
            return _again_if_vanished(attempt, phases)
        finally:
            attempt.finish()

    def prepare(self, request: UpdateRequest) -> Outcome | None:
        """Check the project, make the home, select or create the stack, set its config.

        Config and environments are set as ``run`` sets them. None when all that
        succeeded; else the failed ``Outcome`` ``run`` would return.
        """
        attempt = self._attempt(request, threading.Event(), lambda _progress: None)

        def phases() -> None:
            attempt.open_stack(create=not request.use_local_stack_only)
            attempt.configure()
            attempt.environments()

        try:
            return _again_if_vanished(attempt, phases)
        finally:
            attempt.finish()

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> Outcome | None:
        """None: a local run dies with the operator, there is never one to re-attach to."""
        del request, on_progress, stop
        return None

    def locks(self, request: UpdateRequest) -> list[LockInfo] | None:
        """The stack's lock holders from a ``file://`` backend; None for other backends."""
        found = self._lock_files(request)
        return None if found is None else [lock.info for lock in found]

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """Delete the stack's backend lock if a dead update on this host left it.

        Rules, checked for every lock file of the stack (see ``locks.clear_stale``):
        only ``file://`` backends (other backends: return False, touch nothing); a lock is
        stale when its hostname is this host's and its pid is not running or is no longer
        pulumi; a lock from another host, from a live pulumi process, or unreadable, is
        live. Returns True when locks existed and all were stale; exactly those lock files
        are then deleted. The files are deleted directly instead of through ``pulumi
        cancel``, which deletes every lock in the stack's lock directory, including one a
        new update may have taken after the check (for file backends, ``cancel`` does
        nothing else).
        """
        found = self._lock_files(request)
        return backend_locks.clear_stale(found or [], request.stack)

    def cancel(self, request: UpdateRequest) -> bool:
        """Cancel the stack's update in flight (``pulumi cancel --yes``); False if that failed.

        Only for an update the caller knows to be dead: the backend marks it cancelled and
        releases the stack's lock, whoever holds it.
        """
        attempt = self._attempt(request, threading.Event(), lambda _progress: None)
        try:
            attempt.open_stack(create=False)
            attempt.cancel()
        except StepFailedError as failure:
            attempt.failed(failure)  # logs the scrubbed failure
            return False
        finally:
            attempt.finish()
        return True

    def _attempt(
        self, request: UpdateRequest, stop: threading.Event, on_progress: ProgressCallback
    ) -> OperationRun:
        operation: Operation = "preview" if request.preview else "up"
        return OperationRun(self._settings, request, operation, stop, on_progress)

    def _lock_files(self, request: UpdateRequest) -> list[backend_locks.LockFile] | None:
        """The stack's lock files, or None when its backend is not a readable ``file://``."""
        try:
            project = load_project(request.work_dir)
        except StepFailedError:
            return None
        home = request.pulumi_home or self.pulumi_home
        backend = backend_locks.backend_dir(request, project, home)
        return (
            None if backend is None else backend_locks.lock_files(backend, project, request.stack)
        )


def _again_if_vanished(attempt: OperationRun, phases: Callable[[], T]) -> T | Outcome:
    """Run ``phases``; once more if the stack an unselected run assumed had gone.

    A failure (of either run) becomes the attempt's failed ``Outcome``.
    """
    try:
        return phases()
    except StepFailedError as failure:
        if not attempt.vanished(failure):
            return attempt.failed(failure)
    try:
        return phases()
    except StepFailedError as failure:
        return attempt.failed(failure)
