"""Run one Pulumi operation for one Stack through the Automation API and report what happened.

``Runner`` is a thin wrapper over ``pulumi.automation`` for *local* programs: a directory
holding ``Pulumi.yaml`` that the caller fetched. It does not decide whether an operation is
due (the reconciler does). It selects or creates the stack, makes the stack's config match
the request, runs an optional ``refresh`` and then ``up`` or ``preview`` (or ``destroy``),
and returns an ``Outcome``. Pulumi failures never raise: each becomes an ``ErrorKind`` (the
class of failure, which decides the queue action) plus the engine's own error text.

Guarantees:

* Every CLI invocation is a subprocess running in ``request.work_dir``. No program runs in
  this interpreter (no inline programs). The CLI is the runner's absolute ``pulumi``, so a
  Stack's ``PATH`` cannot substitute another one.
* Stacks share nothing that carries credentials. A request's ``pulumi_home`` is its Stack's
  own ``PULUMI_HOME`` (and ``HOME``); only its ``plugins`` directory is shared, a symlink to
  the runner's plugin store. The CLI saves the access token it was given in
  ``PULUMI_HOME/credentials.json`` and would reuse it for a later run without one; that
  file is deleted after every operation, so no token stays on disk between operations.
* The CLI's environment is the request's ``env`` over an allow-list of the operator's own
  variables (``INHERITED_ENV``: locale, time zone, proxies, CA bundles, ``PATH``, ...);
  nothing else of the operator's (``KUBERNETES_*``, ``KUBECONFIG``, ``PSO_*``, tokens)
  reaches the CLI or the programs it runs.
* No config value is ever on a command line. Plain config is written into the stack's
  settings file (``Pulumi.<stack>.yaml``, see ``_stack_file``); secret config values reach
  ``pulumi config set --secret`` on stdin.
* Secrets stay out of argv, logs and the ``Outcome``. ``Outcome.message`` and
  logged CLI output are scrubbed of every secret config value and every env value that
  may be secret (see ``_Scrubber``). Outputs that are secret, or that contain such a
  value (Pulumi loses secretness through some providers), are reported as ``"[secret]"``.
* Setting ``stop`` interrupts the running CLI the way Ctrl-C does: SIGINT makes the engine
  finish in-flight steps, write a clean checkpoint and release the lock. If the CLI is
  still running after the grace period, it and all its plugins get SIGKILL. The outcome
  is ``INTERRUPTED``.
* Progress comes from engine events: at most one report per second per step, plus one
  final report when the step ends. Callbacks run on SDK threads and never raise there.

Left to others: what to run and when, retries and backoff (``ErrorKind`` gives the class
of failure), status writes, fetching sources, and whether to break a lock.
``clear_stale_lock`` only clears locks that are provably stale (see its docstring).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

import structlog
import yaml
from pulumi import automation as auto

log = structlog.get_logger(__name__)

Operation = Literal["up", "preview", "refresh", "destroy"]
Step = Literal["refresh", "update", "preview", "destroy"]
# Where a failure happened; decides how an ambiguous CLI error is classified.
Phase = Literal["project", "select", "config", "refresh", "update", "preview", "destroy", "cancel"]

MASK = "[secret]"  # what replaces a secret value
MESSAGE_LIMIT = 4096  # characters of Outcome.message
PROGRESS_INTERVAL = 1.0  # seconds: the most often one step reports progress
DEFAULT_INTERRUPT_GRACE = 60.0  # seconds between SIGINT and SIGKILL of the CLI and its plugins

_POLL_SECONDS = 0.2  # how often a running CLI checks the stop event
_READER_JOIN_SECONDS = 10.0  # a grandchild may hold the pipes open after the CLI exits
_TAIL_LINES = 20  # of stderr (or stdout) when the engine sent no error diagnostics
_PROJECT_FILES = ("Pulumi.json", "Pulumi.yaml", "Pulumi.yml")  # the CLI's search order
# The SDK reads these after an operation; they are short, read-only and always complete,
# so a stop that arrives just after a successful update does not turn it into a failure.
_BOOKKEEPING = frozenset({("stack", "output"), ("stack", "history"), ("stack", "rm")})
# The operator's own environment variables the CLI (and so every program) inherits: how to
# find executables, locale and time zone, where temporary files go, CA bundles, proxies
# (both spellings), and the operator-wide Pulumi settings of ``reconcile.setup``. All
# others stay in the operator: the Kubernetes service account's ``KUBERNETES_*``,
# ``KUBECONFIG``, ``PSO_*`` flags, and any credential it was started with. ``HOME`` and
# ``PULUMI_HOME`` are the Stack's own; the request's ``env`` comes on top of all this.
INHERITED_ENV = frozenset(
    {
        "PATH",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "PULUMI_PYTHON_CMD",
        "PULUMI_SKIP_UPDATE_CHECK",
    }
)
INHERITED_ENV_PREFIXES = ("LC_",)  # LC_CTYPE, LC_MESSAGES, ...
# Env names whose values are locations, not secrets; scrubbing them would garble messages.
_PLAIN_ENV = frozenset({"PATH", "HOME", "PULUMI_HOME", "PULUMI_PYTHON_CMD"})
_CREDENTIALS_FILE = "credentials.json"  # in PULUMI_HOME: the CLI's saved logins and tokens
_PLUGINS_DIR = "plugins"  # in PULUMI_HOME: downloaded and installed plugins
_YAML_STR, _YAML_MAP, _YAML_NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "null"))
_NUMBER_STARTS = frozenset("0123456789+-.")  # where YAML 1.2 may see a number
_REFRESH_DRIFT = "no changes were expected"  # the CLI's --expect-no-changes failure
# Source problems: a project or stack file the CLI cannot use (while setting up), or a
# program that does not compile (Python reports it when the language host imports it).
_BAD_PROJECT = re.compile(r"Pulumi(\.[\w-]+)?\.(ya?ml|json)|project file")
_BAD_SYNTAX = re.compile(r"^\s*(SyntaxError|IndentationError|TabError): ", re.MULTILINE)
# Engine-event facts of the CLI the SDK does not export: the kind of program it runs
# (``ExecKind.LOCAL``), the root resource's type, and the signature of a secret value
# (``pulumi.runtime.rpc._special_sig_key``/``_special_secret_sig``).
_EXEC_KIND = "auto.local"
_ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"  # noqa: S105 - a type tag, not a secret
_PERMALINK = re.compile(r"(?:View Live|View in Browser(?: \(Ctrl\+O\))?|Permalink): (\S+)")
_LOCK_IN_STDERR = re.compile(r"(\S+): created by (\S*)@(\S*) \(pid (\d+)\) at (\S+)")


class ErrorKind(enum.StrEnum):
    """Why an operation failed. The reconciler maps each kind to one queue action."""

    NONE = "None"
    UPDATE_FAILED = "UpdateFailed"
    """The program or a resource failed: retry with backoff."""
    CONFLICT = "Conflict"
    """Another update holds the stack's lock: retry soon; ``Outcome.lock`` says who."""
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


@dataclass(frozen=True, repr=False)
class UpdateRequest:
    """Everything one operation needs. The caller resolves sources, secrets and envRefs.

    ``env`` is added to the CLI's environment (backend URL, access tokens, passphrase,
    resolved envRefs). It may hold secrets and is never logged; ``repr`` shows only the
    names of ``env`` and ``secret_config``. Config keys without a namespace get the
    project's (``path`` means ``<project>:path``). A key that is in both ``config`` and
    ``secret_config`` is secret. ``secrets_provider`` is used when the stack is created.
    ``expect_no_refresh_changes`` applies only with ``refresh``. ``targets`` applies to
    ``up`` and ``preview``. ``pulumi_home`` is the Stack's own ``PULUMI_HOME`` (created on
    first use; the caller deletes it with the Stack); None uses the runner's shared home,
    which is safe only for callers that run one tenant's stacks.
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
            f"pulumi_home={str(self.pulumi_home) if self.pulumi_home else None!r})"
        )


@dataclass(frozen=True, slots=True)
class Progress:
    """How far the running step is.

    Counts exclude provider resources, like Pulumi's own change summary. ``resources_total``
    is the best known total: the steps started so far, or the summary's count once the
    engine sent it. ``current`` is ``"<op> <urn>"`` of the latest step that started.
    """

    step: Step
    resources_done: int
    resources_total: int
    resources_failed: int
    current: str | None


@dataclass(frozen=True, slots=True)
class LockInfo:
    """Who holds a stack's backend lock, as far as the backend says (fields may be unknown)."""

    pid: int | None = None
    hostname: str | None = None
    username: str | None = None
    timestamp: datetime | None = None
    location: str | None = None  # the lock file, or its URL from the CLI's error


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one operation did.

    ``message`` is the error on failure: the engine's error diagnostics, else the CLI's
    last output lines, scrubbed of secrets and cut to ``MESSAGE_LIMIT`` characters. On
    success it is empty or a short note. ``outputs`` are the stack outputs after a
    successful ``up`` (``"[secret]"`` for secret ones and ones holding a secret value),
    else empty. ``resource_changes``
    counts steps by operation (``{"create": 1, "same": 3}``), also for a failed or
    previewed operation. ``lock`` is set on ``CONFLICT``. Times are aware UTC.
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
    lock: LockInfo | None = None


ProgressCallback = Callable[[Progress], None]


class Runner:
    """Runs Pulumi operations for Stacks, one per call; safe to share between threads.

    Each call uses its own ``LocalWorkspace`` and CLI processes; the caller must not run
    two operations on the same stack (or work dir, or ``pulumi_home``) at once.
    ``pulumi_command`` is built once at startup (its constructor runs ``pulumi version``);
    only its ``command`` and ``version`` are used; its ``command`` should be absolute.
    ``pulumi_home`` holds the plugin store every Stack's home links to (``plugins``), and
    is the ``PULUMI_HOME`` of requests without one of their own.
    """

    def __init__(
        self,
        pulumi_command: auto.PulumiCommand,
        pulumi_home: Path,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
    ) -> None:
        """Use the CLI of ``pulumi_command``, sharing plugins in ``pulumi_home``."""
        self.pulumi_command = pulumi_command
        self.pulumi_home = pulumi_home
        self.interrupt_grace = interrupt_grace

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> Outcome:
        """Prepare the stack, optionally refresh, then ``up`` (or ``preview``).

        With ``refresh``, an ``up`` is preceded by ``pulumi refresh`` (failing with
        ``REFRESH_CHANGES`` on drift when ``expect_no_refresh_changes``). A preview never
        writes state: it runs ``preview --refresh``, preceded by a preview-only refresh
        when drift must fail it.
        """
        attempt = _Attempt(self, request, "preview" if request.preview else "up", stop, on_progress)
        try:
            stack = attempt.open_stack(create=not request.use_local_stack_only)
            attempt.configure(stack)
            if request.refresh and (request.expect_no_refresh_changes or not request.preview):
                attempt.refresh(stack)
            if request.preview:
                return attempt.preview(stack)
            return attempt.up(stack)
        except _StepFailedError as failure:
            return attempt.failed(failure)
        finally:
            _forget_credentials(attempt.home)

    def destroy(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback,
        stop: threading.Event,
        remove_stack: bool = True,
    ) -> Outcome:
        """Destroy the stack's resources, then remove the stack (and its config file).

        A stack that does not exist counts as destroyed. ``refresh``, ``preview`` and
        ``targets`` of the request are ignored.
        """
        attempt = _Attempt(self, request, "destroy", stop, on_progress)
        try:
            stack = attempt.find_stack()
            if stack is None:
                return attempt.succeeded(note="the stack does not exist; nothing to destroy")
            attempt.configure(stack)
            return attempt.destroy(stack, remove=remove_stack)
        except _StepFailedError as failure:
            return attempt.failed(failure)
        finally:
            _forget_credentials(attempt.home)

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """Delete the stack's backend lock if a dead update on this host left it.

        Rules, checked for every lock file of the stack:

        * only ``file://`` backends (other backends: return False, touch nothing);
        * a lock is stale when its hostname is this host's and its pid is not running, or
          the pid now belongs to a process that is not pulumi (the pid was reused);
        * a lock from another host, from a live pulumi process, or unreadable, is live.

        Returns True when locks existed and all were stale; exactly those lock files are
        then deleted. Otherwise nothing is touched and it returns False. The files are
        deleted directly instead of through ``pulumi cancel``, which deletes every lock in
        the stack's lock directory, including one a new update may have taken after the
        check (for file backends, ``cancel`` does nothing else).
        """
        try:
            project = _load_project(request.work_dir)
        except _StepFailedError:
            return False
        locks = _read_locks(_lock_dirs(self._backend_dir(request, project), project, request))
        bound = log.bind(pulumi_stack=request.stack)
        if not locks:
            return False
        live = [info for _, info in locks if not _is_stale(info)]
        if live:
            bound.info("Stack lock is held by a live or foreign process", lock=str(live[0]))
            return False
        for path, info in locks:
            path.unlink(missing_ok=True)
            Path(f"{path}.attrs").unlink(missing_ok=True)  # gocloud fileblob's metadata
            bound.warning("Cleared stale stack lock", lock=str(info))
        return True

    def cancel(self, request: UpdateRequest) -> bool:
        """Cancel the stack's update in flight (``pulumi cancel --yes``); False if that failed.

        Only for an update the caller knows to be dead: the backend marks it cancelled and
        releases the stack's lock, whoever holds it.
        """
        attempt = _Attempt(self, request, "up", threading.Event(), lambda _progress: None)
        try:
            attempt.cancel(attempt.open_stack(create=False))
        except _StepFailedError as failure:
            log.warning(
                "Cancelling the stack's update failed", error=attempt.failed(failure).message
            )
            return False
        finally:
            _forget_credentials(attempt.home)
        return True

    def lock_info(self, request: UpdateRequest, stderr: str = "") -> LockInfo:
        """Describe who holds the stack's lock: the lock file, else the CLI's error text."""
        with contextlib.suppress(_StepFailedError):
            project = _load_project(request.work_dir)
            locks = _read_locks(_lock_dirs(self._backend_dir(request, project), project, request))
            if locks:
                return locks[0][1]
        found = _LOCK_IN_STDERR.search(stderr)
        if found is None:
            return LockInfo()
        location, username, hostname, pid, stamp = found.groups()
        return LockInfo(int(pid), hostname, username, _parse_time(stamp), location)

    def _backend_dir(self, request: UpdateRequest, project: _Project) -> Path | None:
        """The directory of a ``file://`` backend, chosen the way the CLI chooses it."""
        url = (
            request.env.get("PULUMI_BACKEND_URL")
            or project.backend_url
            or _current_login(request.pulumi_home or self.pulumi_home)
        )
        if not url or not url.startswith("file://"):
            return None
        path = Path(url.removeprefix("file://").split("?", 1)[0]).expanduser()
        return path if path.is_absolute() else request.work_dir / path  # relative to the CLI's cwd


# --- one operation --------------------------------------------------------------------------


class _StepFailedError(Exception):
    """A phase failed; carries the classification and, if we made it, the message."""

    def __init__(self, phase: Phase, kind: ErrorKind, detail: str = "") -> None:
        super().__init__(f"{phase}: {kind}")
        self.phase = phase
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class _Project:
    name: str
    backend_url: str | None
    path: Path  # the project file
    stack_config_dir: str  # where stack settings files are, relative to the project file


class _Attempt:
    """The state one operation's phases share: command, env, scrubber, current step."""

    def __init__(
        self,
        runner: Runner,
        request: UpdateRequest,
        operation: Operation,
        stop: threading.Event,
        on_progress: ProgressCallback,
    ) -> None:
        self.runner = runner
        self.request = request
        self.operation = operation
        self.started = _now()
        self.scrubber = _Scrubber(request)
        self.command = _InterruptibleCommand(runner.pulumi_command, stop, runner.interrupt_grace)
        # Absolute: the CLI runs in the work dir, and a relative PULUMI_HOME would move.
        self.home = (request.pulumi_home or runner.pulumi_home).absolute()
        # The update check phones home on every command; PULUMI_HOME is always ours.
        self.env = {
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "HOME": str(self.home),
            **request.env,
            "PULUMI_HOME": str(self.home),
        }
        self.on_progress = on_progress
        self.observer = _StepObserver(None, self._report)
        self.log = log.bind(pulumi_stack=request.stack, operation=operation)
        self._loaded: _Project | None = None

    @property
    def project(self) -> _Project:
        """The program's project file; ``PROGRAM_INVALID`` when it is missing or invalid."""
        if self._loaded is None:
            self._loaded = _load_project(self.request.work_dir)
        return self._loaded

    # phases ------------------------------------------------------------------------------

    def open_stack(self, *, create: bool) -> auto.Stack:
        """Check the project, then select (or create) the stack."""
        self.log.info("Starting pulumi operation", request=repr(self.request))
        _ = self.project  # fail early, before any CLI call
        workspace = auto.LocalWorkspace(
            work_dir=str(self.request.work_dir),
            pulumi_home=str(self.home),
            env_vars=self.env,
            secrets_provider=self.request.secrets_provider,
            pulumi_command=self.command,
        )
        with self._phase("select"):
            store = self.runner.pulumi_home.absolute()
            if self.home != store:
                _make_home(self.home, store / _PLUGINS_DIR)
            if create:
                return auto.Stack.create_or_select(self.request.stack, workspace)
            return auto.Stack.select(self.request.stack, workspace)

    def find_stack(self) -> auto.Stack | None:
        """Select the stack; None when it does not exist."""
        try:
            return self.open_stack(create=False)
        except _StepFailedError as failure:
            if failure.kind is ErrorKind.STACK_NOT_FOUND:
                return None
            raise

    def configure(self, stack: auto.Stack) -> None:
        """Make the stack's config match the request: set, encrypt, and drop old keys.

        Plain values are written into the stack's settings file, secret ones are set
        through ``pulumi config set --secret`` with the value on stdin: no value is ever
        on a command line. Only keys this runner set before (remembered in a file next to
        Pulumi.yaml) are removed when the request no longer has them; keys that came with
        the source stay, and so does everything else in the file (``secure:`` values, the
        secrets provider's settings).
        """
        qualify = _qualifier(self.project.name)
        secrets = {qualify(k): v for k, v in self.request.secret_config.items()}
        plain = {qualify(k): v for k, v in self.request.config.items()}
        plain = {k: v for k, v in plain.items() if k not in secrets}
        keys_file = _managed_keys_file(self.request)
        stale = _read_keys(keys_file) - plain.keys() - secrets.keys()
        with self._phase("config"):
            if plain or stale:
                _update_stack_file(_stack_file(self.project, stack.name), plain, stale)
            for key, value in secrets.items():
                self._set_secret(stack.name, key, value)
            keys_file.write_text(json.dumps(sorted(plain.keys() | secrets.keys())) + "\n")

    def refresh(self, stack: auto.Stack) -> None:
        """Refresh (a preview-only one for previews); fail on drift if asked."""
        expect = self.request.expect_no_refresh_changes or None
        with self._phase("refresh", step="refresh") as observer:
            if self.request.preview:
                stack.preview_refresh(
                    expect_no_changes=expect,
                    on_event=observer.on_event,
                    **self._display_options(),
                )
                return
            stack.refresh(
                message=self.request.message or None,
                expect_no_changes=expect,
                on_event=observer.on_event,
                **self._display_options(),
            )

    def up(self, stack: auto.Stack) -> Outcome:
        """Run ``pulumi up`` and report its change summary and the stack's outputs.

        The CLI runs as ``Stack.up()`` would run it, but without the SDK's bookkeeping
        after it (``stack output`` twice and ``stack history``: three more CLI processes).
        The engine's events already carry both: the change summary, and the outputs of
        the root stack resource (secrets masked). Only if no event carried the outputs
        are they read with one ``stack output``.
        """
        with self._phase("update", step="update") as observer:
            with _EventLog(observer.on_event) as event_log:
                result = self.command.run(
                    self._up_args(stack.name, event_log),
                    str(self.request.work_dir),
                    # As the SDK sets it; it also enables the hidden --event-log flag.
                    {"PULUMI_DEBUG_COMMANDS": "true", **self.env},
                    self._log_output,
                    self._log_output,
                )
            outputs = observer.stack_outputs
            if outputs is None:
                self.log.info("No engine event carried the stack's outputs; reading them")
                outputs = self._read_outputs(stack.name)
        values = {k: self._output_value(_output(v)) for k, v in outputs.items()}
        return self.succeeded(changes=observer.changes, outputs=values, stdout=result.stdout)

    def preview(self, stack: auto.Stack) -> Outcome:
        """Run ``pulumi preview`` and report the changes it would make."""
        with self._phase("preview", step="preview") as observer:
            result = stack.preview(
                message=self.request.message or None,
                target=list(self.request.targets) or None,
                refresh=self.request.refresh or None,
                on_event=observer.on_event,
                **self._display_options(),
            )
        changes = _changes(result.change_summary) or observer.changes
        return self.succeeded(changes=changes, stdout=result.stdout)

    def destroy(self, stack: auto.Stack, *, remove: bool) -> Outcome:
        """Run ``pulumi destroy``, then ``pulumi stack rm`` when ``remove``."""
        with self._phase("destroy", step="destroy") as observer:
            result = stack.destroy(
                message=self.request.message or None,
                remove=remove or None,
                on_event=observer.on_event,
                **self._display_options(),
            )
        if remove:
            _managed_keys_file(self.request).unlink(missing_ok=True)
        changes = _changes(result.summary.resource_changes) or observer.changes
        return self.succeeded(changes=changes, stdout=result.stdout)

    def cancel(self, stack: auto.Stack) -> None:
        """``pulumi cancel --yes``: end the stack's update in flight, releasing its lock."""
        with self._phase("cancel"):
            stack.cancel()

    # outcomes ----------------------------------------------------------------------------

    def succeeded(
        self,
        *,
        changes: Mapping[str, int] | None = None,
        outputs: Mapping[str, Any] | None = None,
        stdout: str = "",
        note: str = "",
    ) -> Outcome:
        """The outcome of a successful operation."""
        outcome = Outcome(
            operation=self.operation,
            succeeded=True,
            error=ErrorKind.NONE,
            message=note,
            outputs=dict(outputs or {}),
            resource_changes=dict(changes or {}),
            permalink=_permalink(stdout),
            started=self.started,
            ended=_now(),
        )
        self.log.info("Pulumi operation succeeded", changes=outcome.resource_changes)
        return outcome

    def failed(self, failure: _StepFailedError) -> Outcome:
        """The outcome of a failed operation, with a scrubbed message."""
        last = self.command.last
        message = self.scrubber.scrub(self._failure_text(failure))
        outcome = Outcome(
            operation=self.operation,
            succeeded=False,
            error=failure.kind,
            message=_truncate(message),
            outputs={},
            resource_changes=self.observer.changes,
            permalink=_permalink(last.stdout if last else ""),
            started=self.started,
            ended=_now(),
            lock=self._conflict_lock(failure),
        )
        self.log.warning("Pulumi operation failed", phase=failure.phase, error=str(outcome.error))
        return outcome

    # helpers -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _phase(self, phase: Phase, step: Step | None = None) -> Iterator[_StepObserver]:
        """Run a phase: observe its events and turn its failure into ``_StepFailedError``."""
        self.observer = _StepObserver(step, self._report)
        try:
            yield self.observer
        except (_InterruptedError, auto.CommandError, OSError, RuntimeError, ValueError) as err:
            self.log.debug("Pulumi phase failed", phase=phase, exc_type=type(err).__name__)
            raise _StepFailedError(phase, self._classify(err, phase)) from err
        finally:
            self.observer.flush()

    def _classify(self, err: Exception, phase: Phase) -> ErrorKind:
        """Map an SDK/CLI error to an ``ErrorKind`` (the SDK's classes first, then text)."""
        if self.command.interrupted or isinstance(err, _InterruptedError):
            return ErrorKind.INTERRUPTED
        if isinstance(err, auto.ConcurrentUpdateError):
            return ErrorKind.CONFLICT
        if isinstance(err, auto.StackNotFoundError) and phase == "select":
            return ErrorKind.STACK_NOT_FOUND
        if isinstance(err, auto.CompilationError):
            return ErrorKind.PROGRAM_INVALID
        last = self.command.last
        return _classify_text(
            phase, "\n".join([last.stderr if last else "", *self.observer.errors])
        )

    def _failure_text(self, failure: _StepFailedError) -> str:
        """The engine's error diagnostics, else the CLI's last lines, else the exception."""
        cause = failure.__cause__
        if isinstance(cause, _InterruptedError):
            return f"interrupted by the operator before `pulumi {cause}` started"
        text = failure.detail or "\n".join(self.observer.errors) or self._output_tail()
        if not text and cause is not None:
            text = f"{type(cause).__name__}: {cause}".splitlines()[0]
        if failure.kind is ErrorKind.INTERRUPTED:
            return f"{failure.phase} interrupted by the operator" + (f"\n{text}" if text else "")
        return text

    def _output_tail(self) -> str:
        last = self.command.last
        if last is None:
            return ""
        for stream in (last.stderr, last.stdout):
            lines = [line for line in stream.splitlines() if line.strip()]
            if lines:
                return "\n".join(lines[-_TAIL_LINES:])
        return ""

    def _output_value(self, output: auto.OutputValue) -> Any:  # noqa: ANN401 - any JSON value
        """The value, or ``MASK`` if it is secret or holds a secret value.

        Pulumi does not always carry secretness through: a dynamic provider's outputs
        derived from secret config are stored (and reported in events) as plain values.
        So any output containing a secret value of the request is masked.
        """
        if output.secret or self.scrubber.finds(output.value):
            return MASK
        return output.value

    def _conflict_lock(self, failure: _StepFailedError) -> LockInfo | None:
        if failure.kind is not ErrorKind.CONFLICT:
            return None
        last = self.command.last
        return self.runner.lock_info(self.request, last.stderr if last else "")

    def _set_secret(self, stack_name: str, key: str, value: str) -> None:
        """``pulumi config set --secret`` with the value on stdin, never on argv.

        Non-interactive, the CLI reads all of stdin and drops one trailing newline.
        """
        args = ["config", "set", "--secret", "--stack", stack_name, "--", key]
        self.command.run(args, str(self.request.work_dir), self.env, stdin=f"{value}\n")

    def _up_args(self, stack_name: str, event_log: Path) -> list[str]:
        """What ``Stack.up()`` passes for our options (pulumi 3.272, ``_stack.py``)."""
        args = ["up", "--yes", "--skip-preview"]
        if self.request.message:
            args += ["--message", self.request.message]
        for target in self.request.targets:
            args += ["--target", target]
        args += ["--color", "never", "--suppress-progress"]  # as _display_options()
        args += ["--exec-kind", _EXEC_KIND, "--event-log", str(event_log)]
        return [*args, "--stack", stack_name]

    def _read_outputs(self, stack_name: str) -> dict[str, Any]:
        """The stack's outputs from ``pulumi stack output --json``, secrets as ``"[secret]"``."""
        args = ["stack", "output", "--json", "--stack", stack_name]
        result = self.command.run(args, str(self.request.work_dir), self.env)
        outputs = json.loads(result.stdout or "{}")
        if not isinstance(outputs, dict):
            msg = "`pulumi stack output --json` did not print an object"
            raise ValueError(msg)  # noqa: TRY004 - _phase turns ValueError into a failure
        return outputs

    def _display_options(self) -> dict[str, Any]:
        """Plain, quiet CLI output: it ends up in logs and error messages."""
        return {
            "color": "never",
            "suppress_progress": True,
            "on_output": self._log_output,
            "on_error": self._log_output,
        }

    def _log_output(self, line: str) -> None:
        if line:
            self.log.debug("pulumi", line=self.scrubber.scrub(line))

    def _report(self, progress: Progress) -> None:
        try:
            self.on_progress(progress)
        except Exception:  # SDK threads must never see it
            self.log.exception("Progress callback failed")


# --- engine events -> progress -----------------------------------------------------------


class _StepObserver:
    """Counts one step's engine events into ``Progress``, keeps errors and stack outputs.

    Besides progress it keeps the step's error diagnostics and the root stack's outputs.
    Events arrive on an SDK gRPC thread or an ``_EventLog`` thread; ``on_event`` never
    raises. ``report`` is called at most every ``interval`` seconds while the step runs,
    and ``flush`` sends the final state once (even if sooner). Reports are made under the
    lock, so they stay in order.
    """

    def __init__(
        self,
        step: Step | None,
        report: ProgressCallback,
        *,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._step = step
        self._report = report
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._started = self._done = self._failed = 0
        self._current: str | None = None
        self._summary: dict[str, int] | None = None
        self._sent: Progress | None = None  # the last report
        self._sent_at = -float("inf")
        self.errors: list[str] = []  # error diagnostics, resource ones first
        self._outputs: dict[str, Any] | None = None

    @property
    def changes(self) -> dict[str, int]:
        """The engine's change summary, if it sent one."""
        return dict(self._summary or {})

    @property
    def stack_outputs(self) -> dict[str, Any] | None:
        """The root stack's outputs after the step, secrets masked; None if no event said.

        They come from the ``ResOutputsEvent`` of the ``pulumi:pulumi:Stack`` resource,
        which the engine sends whatever the step did to the stack (``same`` included).
        """
        with self._lock:
            return None if self._outputs is None else dict(self._outputs)

    def on_event(self, event: auto.EngineEvent) -> None:
        """Count one engine event; report progress if due."""
        try:
            with self._lock:
                if self._count(event) and self._clock() - self._sent_at >= self._interval:
                    self._send()
        except Exception:  # SDK threads must never see it
            log.exception("Engine event handling failed")

    def flush(self) -> None:
        """Report the final state of the step, unless it was already reported."""
        with self._lock:
            if self._started or self._summary is not None:
                self._send()

    def _count(self, event: auto.EngineEvent) -> bool:
        """Update the counts; True when progress changed."""
        if event.diagnostic_event is not None:
            self._note_diagnostic(event.diagnostic_event)
            return False
        if event.summary_event is not None:
            self._summary = _changes(event.summary_event.resource_changes)
            return True
        if event.resource_pre_event is not None:
            meta = event.resource_pre_event.metadata
            if _is_provider(meta):
                return False
            self._started += 1
            self._current = f"{getattr(meta.op, 'value', meta.op)} {meta.urn}"
            return True
        if event.res_outputs_event is not None:
            self._note_stack_outputs(event.res_outputs_event.metadata)
        for payload, counter in (
            (event.res_outputs_event, "_done"),
            (event.res_op_failed_event, "_failed"),
        ):
            if payload is not None and not _is_provider(payload.metadata):
                setattr(self, counter, getattr(self, counter) + 1)
                return True
        return False

    def _note_stack_outputs(self, meta: auto.StepEventMetadata) -> None:
        new = meta.new
        if meta.type == _ROOT_STACK_TYPE and new is not None and not new.parent:
            self._outputs = dict(new.outputs or {})

    def _note_diagnostic(self, diagnostic: auto.DiagnosticEvent) -> None:
        if diagnostic.severity != "error":
            return
        text = diagnostic.message.strip()
        if diagnostic.urn:
            self.errors.insert(0, f"{diagnostic.urn.rsplit('::', 1)[-1]}: {text}")
        elif text not in self.errors:
            self.errors.append(text)

    def _send(self) -> None:
        if self._step is None:  # setup phases have no progress to report
            return
        total = max(self._started, sum((self._summary or {}).values()))
        progress = Progress(self._step, self._done, total, self._failed, self._current)
        if progress == self._sent:
            return
        self._sent, self._sent_at = progress, self._clock()
        self._report(progress)


class _EventLog:
    """A file for ``pulumi --event-log`` and a thread feeding its events to ``on_event``.

    The engine appends one JSON ``EngineEvent`` per line. Entering makes the file (in a
    temporary directory) and starts a thread that follows it; leaving reads the file to
    its end (the CLI has exited by then, so the file is complete), stops the thread and
    deletes the directory. A line that does not parse is logged and skipped; nothing
    raises on the thread. ``on_event`` must not raise either (``_StepObserver`` doesn't).
    """

    def __init__(self, on_event: Callable[[auto.EngineEvent], None]) -> None:
        self._on_event = on_event
        self._dir = tempfile.TemporaryDirectory(prefix="pulumi-events-")
        self.path = Path(self._dir.name) / "events.jsonl"
        self._ended = threading.Event()  # the CLI exited: read to the end, then stop
        self._thread = threading.Thread(target=self._follow, name="pulumi-events", daemon=True)

    def __enter__(self) -> Path:
        """Make the (empty) log file, start following it, and return its path."""
        self.path.touch()
        self._thread.start()
        return self.path

    def __exit__(self, *exc: object) -> None:
        """Deliver the rest of the file, then delete it."""
        self._ended.set()
        self._thread.join()
        self._dir.cleanup()

    def _follow(self) -> None:
        partial = ""
        with self.path.open(encoding="utf-8", errors="replace") as log_file:
            while True:
                ended = self._ended.is_set()  # before the read, so no line is missed
                line = partial + log_file.readline()
                if line.endswith("\n") or (ended and line):
                    partial = ""
                    self._deliver(line)
                elif ended:
                    return
                else:
                    partial = line  # nothing new, or half a line: wait for more
                    self._ended.wait(_POLL_SECONDS)

    def _deliver(self, line: str) -> None:
        try:
            event = auto.EngineEvent.from_json(json.loads(line))
        except Exception:  # malformed or unknown: one lost event must not stop the rest
            log.exception("Cannot parse an engine event", characters=len(line))
            return
        self._on_event(event)


def _output(value: Any) -> auto.OutputValue:  # noqa: ANN401 - any JSON value
    """An output value as engine events carry it: secret when a secret is anywhere in it."""
    return auto.OutputValue(value=value, secret=_holds_secret(value))


def _holds_secret(value: object) -> bool:
    """Whether a JSON value is, or contains, a secret (``{<sig key>: <secret sig>, ...}``)."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return True
        return any(_holds_secret(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_secret(item) for item in value)
    return False


def _classify_text(phase: Phase, text: str) -> ErrorKind:
    """The kind of a failure the SDK has no class for, from where it happened and its text."""
    setup = phase in ("select", "config")
    if _BAD_SYNTAX.search(text) or (setup and _BAD_PROJECT.search(text)):
        return ErrorKind.PROGRAM_INVALID
    if phase == "refresh" and _REFRESH_DRIFT in text:
        return ErrorKind.REFRESH_CHANGES
    return ErrorKind.SETUP_FAILED if setup else ErrorKind.UPDATE_FAILED


def _is_provider(meta: auto.StepEventMetadata) -> bool:
    return meta.type.startswith("pulumi:providers:")


def _changes(counts: Mapping[Any, int] | None) -> dict[str, int]:
    """``OpMap`` (keys are ``OpType`` or plain strings) as plain strings."""
    return {str(getattr(op, "value", op)): int(n) for op, n in (counts or {}).items()}


# --- the CLI, interruptible ----------------------------------------------------------------


class _InterruptedError(Exception):
    """``stop`` was set before a command could start."""


def inherited_env() -> dict[str, str]:
    """The operator's variables every CLI gets: ``INHERITED_ENV`` and ``LC_*`` ones."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in INHERITED_ENV or name.startswith(INHERITED_ENV_PREFIXES)
    }


class _InterruptibleCommand(auto.PulumiCommand):
    """The SDK's ``PulumiCommand.run``, through our own ``Popen`` so that ``stop`` can stop it.

    Same behaviour as the SDK: ``--non-interactive`` before the subcommand; per-line
    callbacks; ``create_command_error`` on a non-zero exit; env is ``additional_env |
    PULUMI_AUTOMATION_API=true`` over the operator's environment, with the CLI's
    directory first on PATH. In addition:

    * of the operator's environment, only ``inherited_env()`` (the SDK passes all of it);
    * each CLI leads a new session (and process group) and reads stdin only when given;
    * when ``stop`` is set, the CLI gets SIGINT; if it still runs after ``grace``
      seconds, it and its plugins get SIGKILL (``_kill_tree``). A command does not
      start once ``stop`` is set (``_InterruptedError``), except the SDK's short
      read-only bookkeeping after an operation, which always runs to completion;
    * ``last`` is the latest ``CommandResult`` (the SDK's errors keep only its text).
    """

    def __init__(
        self,
        base: auto.PulumiCommand,
        stop: threading.Event,
        grace: float,
    ) -> None:
        # No super().__init__(): it would run and check `pulumi version` again.
        self.command = base.command
        self.version = base.version
        self._stop = stop
        self._grace = grace
        self.interrupted = False
        self.last: auto.CommandResult | None = None

    def run(  # noqa: PLR0913 - the SDK's signature, plus stdin
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: auto.OnOutput | None = None,
        on_error: auto.OnOutput | None = None,
        *,
        stdin: str | None = None,
    ) -> auto.CommandResult:
        """Run the CLI; raise the SDK's ``CommandError`` subclass on a non-zero exit."""
        self.last = None
        words = tuple(arg for arg in args if not arg.startswith("-"))[:2]
        interruptible = words not in _BOOKKEEPING
        if interruptible and self._stop.is_set():
            self.interrupted = True
            raise _InterruptedError(" ".join(words))
        argv = [self.command, *_non_interactive(args)]
        result = self._execute(
            argv,
            cwd,
            self._env(additional_env),
            stdin,
            (on_output, on_error),
            interruptible=interruptible,
        )
        self.last = result
        if result.code != 0:
            raise auto.errors.create_command_error(result)
        return result

    def _env(self, additional_env: Mapping[str, str]) -> dict[str, str]:
        env = {**inherited_env(), **additional_env, "PULUMI_AUTOMATION_API": "true"}
        binary = Path(self.command)
        if binary.is_absolute():  # the SDK prefers plugins next to the binary
            env["PATH"] = os.pathsep.join([str(binary.parent), env.get("PATH", "")])
        return env

    def _execute(  # noqa: PLR0913 - one Popen's worth of settings
        self,
        argv: list[str],
        cwd: str,
        env: Mapping[str, str],
        stdin: str | None,
        callbacks: tuple[auto.OnOutput | None, auto.OnOutput | None],
        *,
        interruptible: bool,
    ) -> auto.CommandResult:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        out: list[str] = []
        err: list[str] = []
        assert proc.stdout is not None  # noqa: S101 - PIPE
        assert proc.stderr is not None  # noqa: S101 - PIPE
        readers = [
            _read_lines(proc.stdout, callbacks[0], out),
            _read_lines(proc.stderr, callbacks[1], err),
        ]
        try:
            if stdin is not None:
                _feed(proc, stdin)
            self._wait(proc, interruptible=interruptible)
        finally:
            if proc.poll() is None:  # we are unwinding (KeyboardInterrupt): leave nothing behind
                _kill_tree(proc)
                proc.wait()
            for reader in readers:
                reader.join(_READER_JOIN_SECONDS)
        return auto.CommandResult(
            stdout="\n".join(out), stderr="\n".join(err), code=proc.returncode
        )

    def _wait(self, proc: subprocess.Popen[str], *, interruptible: bool) -> None:
        """Wait for the CLI; on stop, SIGINT it, and SIGKILL its tree after the grace."""
        signalled_at: float | None = None
        while True:
            try:
                proc.wait(timeout=_POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            else:
                return
            if not (interruptible and self._stop.is_set()):
                continue
            if signalled_at is None:
                log.warning("Interrupting pulumi", pid=proc.pid, grace_seconds=self._grace)
                self.interrupted = True
                signalled_at = time.monotonic()
                # Only the CLI, as its own Ctrl-C handling expects: it cancels the update
                # and stops its plugins itself.
                proc.send_signal(signal.SIGINT)
            elif time.monotonic() - signalled_at >= self._grace:
                log.error("Killing pulumi after the interrupt grace", pid=proc.pid)
                _kill_tree(proc)
                proc.wait()
                return


def _non_interactive(args: list[str]) -> list[str]:
    """Put ``--non-interactive`` first unless present before a ``--`` separator."""
    end = args.index("--") if "--" in args else len(args)
    return args if "--non-interactive" in args[:end] else ["--non-interactive", *args]


def _read_lines(
    stream: IO[str], callback: auto.OnOutput | None, sink: list[str]
) -> threading.Thread:
    def read() -> None:
        for line in iter(stream.readline, ""):
            stripped = line.rstrip()
            sink.append(stripped)
            if callback is not None:
                callback(stripped)
        stream.close()

    thread = threading.Thread(target=read, name="pulumi-output", daemon=True)
    thread.start()
    return thread


def _feed(proc: subprocess.Popen[str], data: str) -> None:
    assert proc.stdin is not None  # noqa: S101 - PIPE
    with contextlib.suppress(BrokenPipeError):  # the CLI died first; its exit code says why
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the CLI's process group and the process groups of all its descendants.

    Pulumi starts each plugin (language host, providers) in a process group of its own,
    so the CLI's group alone misses them, and orphaned plugins would run forever. The
    CLI's group is stopped first, so that it starts no plugin while the tree is read.
    The CLI is not yet reaped, so its pid (and group id) cannot have been reused.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGSTOP)
    groups = {proc.pid, *(group for _, group in _descendants(proc.pid))} - {os.getpgrp()}
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def _descendants(root: int) -> list[tuple[int, int]]:
    """``(pid, process group)`` of every descendant of ``root``, from ``/proc`` (Linux)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited, or not a process
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), int(fields[2])))
    found: list[tuple[int, int]] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child[0])
    return found


# --- secrets -----------------------------------------------------------------------------


class _Scrubber:
    """Replaces values that may be secret with ``"[secret]"``.

    Scrubbed: every non-empty ``secret_config`` value, and every ``env`` value longer
    than 3 characters except booleans, numbers, the locations in ``_PLAIN_ENV`` and a
    backend URL without userinfo (the request cannot say which env values came from
    Secrets, so all others are suspect).
    Also scrubbed: each value's JSON-escaped form (how multi-line values appear in JSON
    output). Longest values first, so a secret containing another is replaced whole.
    """

    def __init__(self, request: UpdateRequest) -> None:
        values = {v for v in request.secret_config.values() if v}
        values |= {v for k, v in request.env.items() if _may_be_secret(k, v)}
        variants = values | {json.dumps(v)[1:-1] for v in values}
        alternatives = sorted(variants, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, alternatives))) if variants else None

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced."""
        return self._pattern.sub(MASK, text) if self._pattern else text

    def finds(self, value: object) -> bool:
        """Whether a JSON value contains a secret anywhere."""
        if self._pattern is None:
            return False
        return bool(self._pattern.search(json.dumps(value, default=str, ensure_ascii=False)))


def _may_be_secret(name: str, value: str) -> bool:
    if name in _PLAIN_ENV or len(value) <= 3:
        return False
    if name == "PULUMI_BACKEND_URL" and "@" not in value:  # a location, unless it has userinfo
        return False
    return value.lower() not in ("true", "false") and not value.isdigit()


def _truncate(text: str) -> str:
    """Cut to ``MESSAGE_LIMIT`` (after scrubbing, so no secret is cut into a visible part)."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


# --- project, config keys ------------------------------------------------------------------


def _load_project(work_dir: Path) -> _Project:
    """Read the project file; ``PROGRAM_INVALID`` when it is missing or not a project."""
    for name in _PROJECT_FILES:
        path = work_dir / name
        if path.is_file():
            break
    else:
        raise _StepFailedError(
            "project", ErrorKind.PROGRAM_INVALID, f"no Pulumi.yaml in {work_dir}"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise _StepFailedError(
            "project", ErrorKind.PROGRAM_INVALID, f"cannot read {path.name}: {err}"
        ) from err
    if not isinstance(data, dict) or not data.get("name") or not data.get("runtime"):
        raise _StepFailedError(
            "project", ErrorKind.PROGRAM_INVALID, f"{path.name} needs a name and a runtime"
        )
    backend = data.get("backend")
    url = backend.get("url") if isinstance(backend, dict) else None
    # A string ``config`` is the old name of ``stackConfigDir`` (the CLI reads it as such).
    config_dir = data.get("stackConfigDir") or data.get("config")
    return _Project(
        name=str(data["name"]),
        backend_url=str(url) if url else None,
        path=path,
        stack_config_dir=config_dir if isinstance(config_dir, str) else "",
    )


def _qualifier(project: str) -> Callable[[str], str]:
    """Config keys without a namespace belong to the project (Pulumi's own rule)."""
    return lambda key: key if ":" in key else f"{project}:{key}"


def _stack_leaf(stack: str) -> str:
    """``org/project/dev`` → ``dev``: the name in ``Pulumi.<name>.yaml``."""
    return stack.rsplit("/", 1)[-1]


def _managed_keys_file(request: UpdateRequest) -> Path:
    """Where the config keys this runner set for the stack are remembered."""
    return request.work_dir / f".stack-operator-config.{_stack_leaf(request.stack)}.json"


def _read_keys(path: Path) -> set[str]:
    try:
        keys = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


# --- homes and stack settings ---------------------------------------------------------


def _make_home(home: Path, plugins: Path) -> None:
    """Create a Stack's ``PULUMI_HOME`` whose ``plugins`` is a symlink to the shared store.

    The CLI follows the symlink both to install plugins and to find them, so a plugin is
    downloaded once for all Stacks. A ``plugins`` directory that is not a symlink (made by
    a CLI before the link existed) is left alone: it works, it is only not shared.
    """
    plugins.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    link = home / _PLUGINS_DIR
    if link.is_symlink():
        if link.readlink() == plugins:
            return
        link.unlink()  # the store moved
    elif link.exists():
        return
    link.symlink_to(plugins, target_is_directory=True)


def _forget_credentials(home: Path) -> None:
    """Delete the logins and access tokens the CLI saved in ``home`` during an operation.

    Every command gets its backend and token from its environment; a saved token would
    only serve a later command that has none (another tenant's, in a shared home), and
    any program of any Stack could read it from disk.
    """
    try:
        (home / _CREDENTIALS_FILE).unlink(missing_ok=True)
    except OSError as err:
        log.warning("Cannot delete the CLI's saved credentials", error=str(err))


def _stack_file(project: _Project, stack: str) -> Path:
    """The stack's settings file, where the CLI looks for it (3.274, ``DetectProjectStackPath``).

    ``Pulumi.<stack>.<ext>`` in the project's ``stackConfigDir`` (default: next to the
    project file), with the project file's extension; ``<stack>`` is the last part of
    ``org/project/stack``.
    """
    name = f"Pulumi.{_stack_leaf(stack)}{project.path.suffix}"
    return project.path.parent / project.stack_config_dir / name


def _update_stack_file(path: Path, plain: Mapping[str, str], drop: Iterable[str]) -> None:
    """Set ``plain`` and remove ``drop`` under ``config`` in a stack settings file.

    Everything else stays: other keys and their values as written, ``secure:`` values,
    the secrets provider's settings (comments are lost, as when the CLI writes the file).
    Values stay strings (quoted where YAML would read another type). The file is
    replaced, never left half-written. A file that is not a settings file (bad YAML or
    JSON, not a mapping) is ``PROGRAM_INVALID``; a file system error ``SETUP_FAILED``.
    """
    merge = _merge_json if path.suffix == ".json" else _merge_yaml
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        updated = merge(text, plain, {*drop, *plain})
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise _StepFailedError(
            "config", ErrorKind.PROGRAM_INVALID, f"cannot read {path.name}: {err}"
        ) from err
    except OSError as err:
        raise _StepFailedError(
            "config", ErrorKind.SETUP_FAILED, f"cannot read {path.name}: {err.strerror}"
        ) from err
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(updated, encoding="utf-8")
        partial.replace(path)
    except OSError as err:
        raise _StepFailedError(
            "config", ErrorKind.SETUP_FAILED, f"cannot write {path.name}: {err.strerror}"
        ) from err


def _merge_yaml(text: str, plain: Mapping[str, str], gone: set[str]) -> str:
    """``text`` with the ``config`` keys in ``gone`` removed and ``plain`` appended.

    Works on the YAML node tree, so that every other value keeps its text and style
    (loading and dumping would turn ``on`` into ``true`` and ``0777`` into ``511``).
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None or _is_null(root):
        root = yaml.MappingNode(_YAML_MAP, [])
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("the file is not a mapping")  # noqa: TRY004 - a parse error
    config = _config_node(root)
    config.value = [(k, v) for k, v in config.value if _scalar(k) not in gone]
    config.value += [(yaml.ScalarNode(_YAML_STR, k), _string_node(v)) for k, v in plain.items()]
    return str(yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True, width=sys.maxsize))


def _config_node(root: yaml.MappingNode) -> yaml.MappingNode:
    """The ``config`` mapping of a settings file's root, added if missing or empty."""
    for index, (key, value) in enumerate(root.value):
        if _scalar(key) != "config":
            continue
        if isinstance(value, yaml.MappingNode):
            return value
        if not _is_null(value):
            raise ValueError("config is not a mapping")
        config = yaml.MappingNode(_YAML_MAP, [])
        root.value[index] = (key, config)
        return config
    config = yaml.MappingNode(_YAML_MAP, [])
    root.value.append((yaml.ScalarNode(_YAML_STR, "config"), config))
    return config


def _scalar(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _YAML_NULL


def _string_node(value: str) -> yaml.ScalarNode:
    """A string scalar that every YAML reader reads as this string.

    PyYAML quotes what YAML 1.1 reads as another type (``0``, ``on``, ``null``, ``''``).
    The CLI's YAML 1.2 reader also takes ``0o17`` and ``1e3`` for numbers, which 1.1 does
    not: every value that starts like a number is double-quoted.
    """
    style = '"' if value[:1] in _NUMBER_STARTS else None
    return yaml.ScalarNode(_YAML_STR, value, style=style)


def _merge_json(text: str, plain: Mapping[str, str], gone: set[str]) -> str:
    """A ``Pulumi.<stack>.json`` with the keys in ``gone`` removed and ``plain`` added."""
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("the file is not an object")  # noqa: TRY004 - a parse error
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("config is not an object")  # noqa: TRY004 - a parse error
    kept = {k: v for k, v in config.items() if k not in gone}
    return json.dumps({**data, "config": {**kept, **plain}}, indent=4, ensure_ascii=False) + "\n"


# --- locks -------------------------------------------------------------------------------


def _current_login(pulumi_home: Path) -> str | None:
    """The backend ``pulumi login`` selected, from ``PULUMI_HOME/credentials.json``."""
    try:
        current = json.loads((pulumi_home / "credentials.json").read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        return None
    return current if isinstance(current, str) else None


def _lock_dirs(backend: Path | None, project: _Project, request: UpdateRequest) -> list[Path]:
    """The stack's lock directories: ``<org>/<project>/<stack>``, or legacy ``<stack>``."""
    if backend is None:
        return []
    locks = backend / ".pulumi" / "locks"
    parts = request.stack.split("/")
    if len(parts) == 3:
        return [locks.joinpath(*parts)]
    return [locks / "organization" / project.name / parts[-1], locks / parts[-1]]


def _read_locks(dirs: Iterable[Path]) -> list[tuple[Path, LockInfo]]:
    """Each lock file with what it says, oldest first; unreadable ones say nothing."""
    found = [(path, _parse_lock(path)) for directory in dirs for path in directory.glob("*.json")]
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(found, key=lambda item: item[1].timestamp or epoch)


def _parse_lock(path: Path) -> LockInfo:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return LockInfo(location=str(path))
    if not isinstance(data, dict):
        return LockInfo(location=str(path))
    pid = data.get("pid")
    return LockInfo(
        pid=pid if isinstance(pid, int) else None,
        hostname=data.get("hostname"),
        username=data.get("username"),
        timestamp=_parse_time(data.get("timestamp")),
        location=str(path),
    )


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _is_stale(info: LockInfo) -> bool:
    """Written on this host by a process that is gone or is no longer pulumi."""
    if info.hostname != socket.gethostname() or info.pid is None or info.pid <= 0:
        return False
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's: look at what it runs
    return not _runs_pulumi(info.pid)


def _runs_pulumi(pid: int) -> bool:
    """Whether ``pid`` runs a pulumi binary; True when we cannot tell (be conservative)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except FileNotFoundError:
        return False  # exited since the check
    except OSError:
        return True
    return Path(argv0.decode(errors="replace")).name.startswith("pulumi")


# --- small helpers -------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _permalink(stdout: str) -> str | None:
    """The update's web page, printed by Pulumi Cloud backends (the Go SDK's rule)."""
    found = _PERMALINK.search(stdout)
    return found.group(1) if found else None
