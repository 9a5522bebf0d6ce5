"""One operation for one Stack: its phases, each a ``pulumi`` command, and its ``Outcome``.

Every phase runs the CLI through ``Cli``; the engine operations (refresh, up, preview,
destroy) all run the same way: with ``--event-log``, followed by an ``EventLog`` whose
events a ``StepObserver`` turns into progress, the change summary, error diagnostics and
the stack's outputs. A failed phase raises ``StepFailedError`` with its ``ErrorKind``;
``failed`` turns that into the outcome, with a scrubbed message.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import structlog

from controller.text import truncate
from workspace import process
from workspace.runner import project as projects
from workspace.runner.cli import Cli, CliContext, CliError, CliStoppedError
from workspace.runner.display import error_text
from workspace.runner.engine import EventLog, StepObserver, holds_secret
from workspace.runner.failures import Phase, StepFailedError, classify, stack_missing
from workspace.runner.home import forget_credentials, make_home
from workspace.runner.installing import Installation
from workspace.runner.known import KnownStack
from workspace.runner.scrub import Scrubber
from workspace.runner.settings import RunnerSettings
from workspace.runner.types import (
    MESSAGE_LIMIT,
    ErrorKind,
    Operation,
    Outcome,
    Progress,
    ProgressCallback,
    ProjectInfo,
    Step,
    UpdateRequest,
)

log = structlog.get_logger(__name__)

_OUTPUT_LINES = 40  # of stderr's (or stdout's) error text when the engine sent no diagnostics
# Quiet, plain output (it ends up in logs and messages), a local program, the event log.
ENGINE_FLAGS = ("--color", "never", "--suppress-progress", "--exec-kind", "auto.local")
_PERMALINK = re.compile(r"(?:View Live|View in Browser(?: \(Ctrl\+O\))?|Permalink): (\S+)")


MIRROR_ENV = "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"


class OperationRun:
    """The state one operation's phases share: CLI, scrubber, current observer, times."""

    def __init__(
        self,
        settings: RunnerSettings,
        request: UpdateRequest,
        operation: Operation,
        stop: threading.Event,
        on_progress: ProgressCallback,
    ) -> None:
        """Prepare to run ``operation`` for ``request`` (nothing runs yet)."""
        self.settings = settings
        self.request = request
        self.operation = operation
        self.started = settings.clock.wall()
        self.scrubber = Scrubber(request)
        # Absolute: the CLI runs in the work dir, and a relative PULUMI_HOME would move.
        self.home = (request.pulumi_home or settings.plugin_home).absolute()
        # The update check phones home on every command; PULUMI_HOME is always ours.
        mirror = {MIRROR_ENV: f"^.*$={settings.plugin_mirror}"} if settings.plugin_mirror else {}
        # A temporary directory of the operation's own: what the CLI leaves there (each
        # plugin it downloads stays behind as a tarball; a killed command leaves more) goes
        # with the operation (``finish``), not into the operator's TMPDIR for good.
        self.tmp = tempfile.mkdtemp(prefix="pulumi-operation-")
        env = {
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "TMPDIR": self.tmp,
            "HOME": str(self.home),
            **settings.installer.environment(self._owner()),
            **mirror,
            **request.env,
            "PULUMI_HOME": str(self.home),
        }
        self._context = CliContext(
            settings.binary,
            request.work_dir,
            env,
            stop,
            settings.interrupt_grace,
            self._log_line,
            settings.clock,
        )
        self.cli = Cli(self._context)
        self.on_progress = on_progress
        self.observer = StepObserver(None, self._report, clock=settings.clock)
        self.log = log.bind(pulumi_stack=request.stack, operation=operation)
        self.installation = Installation(settings, self.scrubber, self._report, self.log)
        self._project: projects.Project | None = None
        self.assumed = False  # the stack was not selected: a marker says it exists

    @property
    def project(self) -> projects.Project:
        """The program's project file; ``PROGRAM_INVALID`` when it is missing or invalid."""
        if self._project is None:
            self._project = projects.load_project(self.request.work_dir)
        return self._project

    @property
    def known(self) -> KnownStack:
        """This stack's marker in the runner's shared home (``workspace.runner.known``).

        The shared home, not the Stack's own: a run pod's own home is new on every run,
        the shared one is on the namespace's cache volume when the pod mounts it.
        """
        backend = self.request.env.get("PULUMI_BACKEND_URL", "")
        request = self.request
        home = self.settings.plugin_home.absolute()
        return KnownStack(home, backend, self.project.name, request.stack, request.secrets_provider)

    # phases ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Install the program's dependencies and plugins; hold them until the block ends.

        Every later CLI call (and the program) uses them (``workspace.runner.installing``).
        Raises ``StepFailedError`` (``DEPENDENCIES_INVALID``, ``DEPENDENCIES_FAILED``,
        ``INTERRUPTED``, or the project's ``PROGRAM_INVALID``).
        """
        project = self.project
        self._make_home()
        with self.installation.held(project, self._context) as context:
            self._context = context
            self.cli = Cli(context)
            yield

    def open_stack(self, *, create: bool) -> None:
        """Check the project, make the Stack's home, then select (or create) the stack.

        The select is skipped when the stack is known to exist (``known``); ``vanished`` is
        how a caller learns that it has gone since. Creating is one command, ``stack
        select --create``, unless the request names a secrets provider: then a select
        that finds no stack is followed by ``stack init --secrets-provider``.
        """
        self.log.info("Starting pulumi operation", request=repr(self.request))
        _ = self.project  # fail early, before any CLI call
        with self._phase("select"):
            self._make_home()
            if self.known.known():
                self.assumed = True
                return
            provider = self.request.secrets_provider
            creating = ["--create"] if create and not provider else []
            try:
                self.cli.run(["stack", "select", *creating, "--stack", self.request.stack])
            except CliError as err:
                if creating or not create or not _not_found(err):
                    raise
                extra = ["--secrets-provider", provider] if provider else []
                self.cli.run(["stack", "init", *extra, "--stack", self.request.stack])
            self.known.remember()

    def vanished(self, failure: StepFailedError) -> bool:
        """True when a stack assumed to exist was missing: its marker is then forgotten.

        The caller may then run its phases once more, from ``open_stack``.
        """
        if not self.assumed or failure.kind is not ErrorKind.STACK_NOT_FOUND:
            return False
        self.log.info("The stack has gone since it was last selected; selecting it again")
        self.known.forget()
        self.assumed = False
        return True

    def find_stack(self) -> bool:
        """Select the stack; False when it does not exist."""
        try:
            self.open_stack(create=False)
        except StepFailedError as failure:
            if failure.kind is ErrorKind.STACK_NOT_FOUND:
                return False
            raise
        return True

    def configure(self) -> None:
        """Make the stack's config match the request: set, encrypt, and drop old keys.

        Plain values are written into the stack's settings file, secret ones are set
        through ``pulumi config set --secret`` with the value on stdin: no value is ever
        on a command line. Only keys this runner set before (remembered in a file next to
        Pulumi.yaml) are removed when the request no longer has them; keys that came with
        the source stay, and so does everything else in the file (``secure:`` values, the
        secrets provider's settings).
        """
        qualify = projects.qualifier(self.project.name)
        secrets = {qualify(k): v for k, v in self.request.secret_config.items()}
        plain = {qualify(k): v for k, v in self.request.config.items()}
        plain = {k: v for k, v in plain.items() if k not in secrets}
        keys_file = projects.managed_keys_file(self.request)
        stale = projects.read_keys(keys_file) - plain.keys() - secrets.keys()
        with self._phase("config"):
            if plain or stale:
                path = projects.stack_file(self.project, self.request.stack)
                projects.update_stack_file(path, plain, stale)
            for key, value in secrets.items():
                # Non-interactive, the CLI reads all of stdin and drops one trailing newline.
                args = ["config", "set", "--secret", "--stack", self.request.stack, "--", key]
                self.cli.run(args, stdin=f"{value}\n")
            keys_file.write_text(json.dumps(sorted(plain.keys() | secrets.keys())) + "\n")

    def environments(self) -> None:
        """Make the stack's ESC environments exactly the request's, in order.

        Only for a request with environments: without, the list stays as the stack's
        settings file has it. The list is read (``config env ls --json``); what follows the
        part it shares with the request is removed, last first (``config env rm`` removes
        an environment's last import), then the rest of the request's is added in order
        (``config env add`` appends). A failure is ``SETUP_FAILED`` with the CLI's message.
        """
        wanted = list(self.request.environments)
        if not wanted:
            return
        stack = self.request.stack
        with self._phase("environment"):
            listed = self.cli.run(["config", "env", "ls", "--json", "--stack", stack])
            current = _environment_list(listed.stdout)
            kept = _shared_prefix(current, wanted)
            for name in reversed(current[kept:]):
                self.cli.run(["config", "env", "rm", "--yes", "--stack", stack, "--", name])
            if wanted[kept:]:
                add = ["config", "env", "add", "--yes", "--stack", stack, "--", *wanted[kept:]]
                self.cli.run(add)
            self.log.info("Set the stack's environments", environments=wanted)

    def refresh(self) -> None:
        """Refresh (a preview-only one for previews); fail on drift if asked."""
        args = ["refresh", "--preview-only"] if self.request.preview else ["refresh"]
        if not self.request.preview:
            args += ["--skip-preview", "--yes", *self._message()]
        if self.request.expect_no_refresh_changes:
            args.append("--expect-no-changes")
        self._engine("refresh", "refresh", args)

    def up(self) -> Outcome:
        """Run ``pulumi up``; report its change summary and the stack's outputs.

        The outputs come from the events (the root stack resource's outputs, secrets
        marked). Only if no event carried them are they read with ``stack output``
        (without ``--show-secrets``: secrets come back masked).
        """
        args = ["up", "--yes", "--skip-preview", *self._message(), *self._targets()]
        result = self._engine("update", "update", args)
        outputs = self.observer.stack_outputs
        if outputs is None:
            self.log.info("No engine event carried the stack's outputs; reading them")
            with self._phase("update"):
                outputs = self._read_outputs()
        values = {k: self.scrubber.output(v, secret=holds_secret(v)) for k, v in outputs.items()}
        return self.succeeded(outputs=values, stdout=result.stdout)

    def preview(self) -> Outcome:
        """Run ``pulumi preview`` (with ``--refresh`` if asked) and report what it would do."""
        args = ["preview", *self._message(), *self._targets()]
        if self.request.refresh:
            args.append("--refresh")
        result = self._engine("preview", "preview", args)
        return self.succeeded(stdout=result.stdout)

    def destroy(self) -> Outcome:
        """Run ``pulumi destroy``, then ``pulumi stack rm`` (and forget its managed config).

        With ``run_program``, the destroy runs the program (``--run-program``).
        """
        args = ["destroy", "--skip-preview", "--yes", *self._message()]
        if self.request.run_program:
            args.append("--run-program")
        result = self._engine("destroy", "destroy", args)
        changes = self.observer.changes
        with self._phase("destroy"):
            # Finishing what the destroy began: it runs even once stop is set.
            self.cli.run(
                ["stack", "rm", "--yes", "--stack", self.request.stack], interruptible=False
            )
        projects.managed_keys_file(self.request).unlink(missing_ok=True)
        self.known.forget()
        return self.succeeded(changes=changes, stdout=result.stdout)

    def cancel(self) -> None:
        """``pulumi cancel --yes``: end the stack's update in flight, releasing its lock."""
        with self._phase("cancel"):
            self.cli.run(["cancel", "--yes", "--stack", self.request.stack])

    # outcomes ----------------------------------------------------------------------------

    def succeeded(
        self,
        *,
        changes: Mapping[str, int] | None = None,
        outputs: Mapping[str, Any] | None = None,
        stdout: str = "",
        note: str = "",
    ) -> Outcome:
        """The outcome of a successful operation (changes: the last step's by default)."""
        outcome = Outcome(
            operation=self.operation,
            succeeded=True,
            error=ErrorKind.NONE,
            message=note,
            outputs=dict(outputs or {}),
            resource_changes=dict(self.observer.changes if changes is None else changes),
            permalink=_permalink(stdout),
            started=self.started,
            ended=self.settings.clock.wall(),
            installs=tuple(self.installation.records),
            cache_bytes=dict(self.installation.cache_bytes),
            project=self.project_info(),
            seconds=self._seconds(),
        )
        self.log.info("Pulumi operation succeeded", changes=outcome.resource_changes)
        return outcome

    def failed(self, failure: StepFailedError) -> Outcome:
        """The outcome of a failed operation, with a scrubbed message."""
        last = self.cli.last
        message = self.scrubber.scrub(self._failure_text(failure))
        outcome = Outcome(
            operation=self.operation,
            succeeded=False,
            error=failure.kind,
            message=truncate(message, MESSAGE_LIMIT, "…"),
            outputs={},
            resource_changes=self.observer.changes,
            permalink=_permalink(last.stdout if last else ""),
            started=self.started,
            ended=self.settings.clock.wall(),
            installs=tuple(self.installation.records),
            cache_bytes=dict(self.installation.cache_bytes),
            project=self.project_info(),
            seconds=self._seconds(),
        )
        self.log.warning("Pulumi operation failed", phase=failure.phase, error=str(outcome.error))
        return outcome

    def _seconds(self) -> dict[str, float]:
        """Where the operation's time went: installing, and the CLI's commands after it."""
        installed = self.installation.seconds
        found = {"install": installed} if installed is not None else {}
        return found | ({"cli": round(self.cli.seconds, 3)} if self.cli.seconds else {})

    def project_info(self) -> ProjectInfo | None:
        """The project's name and runtime; None when its project file cannot be read."""
        try:
            project = self.project
        except StepFailedError:
            return None
        return ProjectInfo(project.name, project.runtime)

    # helpers -----------------------------------------------------------------------------

    def finish(self) -> None:
        """Forget the credentials the CLI saved in the home; delete the temporary directory."""
        forget_credentials(self.home)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _make_home(self) -> None:
        """Create the Stack's home, its ``plugins`` a link to the shared store."""
        if self.home != self.settings.plugin_home.absolute():
            make_home(self.home, self.settings.plugin_store)

    def _engine(self, phase: Phase, step: Step, args: list[str]) -> process.Completed:
        """Run an engine operation with its events followed and observed."""
        with self._phase(phase, step) as observer, EventLog(observer.on_event) as events:
            tail = [*ENGINE_FLAGS, "--event-log", str(events), "--stack", self.request.stack]
            trace = self.request.trace
            if trace is None:
                return self.cli.run([*args, *tail])
            tail += ["--otel-traces", trace.endpoint]
            return self.cli.run([*args, *tail], env={"TRACEPARENT": trace.traceparent})

    @contextlib.contextmanager
    def _phase(self, phase: Phase, step: Step | None = None) -> Iterator[StepObserver]:
        """Run a phase: observe its events and turn its failure into ``StepFailedError``."""
        if step is not None:
            self.observer = StepObserver(step, self._report, clock=self.settings.clock)
        try:
            yield self.observer
        except (CliError, CliStoppedError, OSError, ValueError) as err:
            self.log.debug("Pulumi phase failed", phase=phase, exc_type=type(err).__name__)
            raise StepFailedError(phase, self._classify(err, phase)) from err
        finally:
            self.observer.flush()

    def _classify(self, err: Exception, phase: Phase) -> ErrorKind:
        if self.cli.interrupted or isinstance(err, CliStoppedError):
            return ErrorKind.INTERRUPTED
        if not isinstance(err, CliError):
            return classify(phase, "", "")
        stderr = "\n".join([err.result.stderr, *self.observer.errors])
        if self.assumed and stack_missing(stderr):
            return ErrorKind.STACK_NOT_FOUND
        if phase == "environment":  # whatever the CLI says of it: the stack's setup failed
            return ErrorKind.SETUP_FAILED
        return classify(phase, err.result.stdout, stderr)

    def _failure_text(self, failure: StepFailedError) -> str:
        """The engine's error diagnostics, else the CLI's error text, else the exception.

        Each starts with the error: the engine's diagnostics as they came (a resource's
        first), the CLI's output without its progress display and warnings
        (``display.error_text``), stderr before stdout.
        """
        cause = failure.__cause__
        if isinstance(cause, CliStoppedError):
            return f"interrupted by the operator before `pulumi {cause.words}` started"
        text = failure.detail or "\n".join(self.observer.errors) or self._output_error()
        if not text and cause is not None:
            text = f"{type(cause).__name__}: {cause}".splitlines()[0]
        if failure.kind is ErrorKind.INTERRUPTED:
            return f"{failure.phase} interrupted by the operator" + (f"\n{text}" if text else "")
        return text

    def _output_error(self) -> str:
        """The last command's error text; its last lines if all of it was display or warnings.

        At most ``_OUTPUT_LINES`` lines: the error text's first, the output's last.
        """
        last = self.cli.last
        if last is None:
            return ""
        streams = (last.stderr, last.stdout)
        if text := next(filter(None, map(error_text, streams)), ""):
            return "\n".join(text.splitlines()[:_OUTPUT_LINES])
        for stream in streams:
            if lines := [line for line in stream.splitlines() if line.strip()]:
                return "\n".join(lines[-_OUTPUT_LINES:])
        return ""

    def _read_outputs(self) -> dict[str, Any]:
        """The stack's outputs from ``pulumi stack output --json``, secrets as ``"[secret]"``."""
        args = ["stack", "output", "--json", "--stack", self.request.stack]
        result = self.cli.run(args, interruptible=False)
        outputs = json.loads(result.stdout or "{}")
        if not isinstance(outputs, dict):
            msg = "`pulumi stack output --json` did not print an object"
            raise ValueError(msg)  # noqa: TRY004 - _phase turns ValueError into a failure
        return outputs

    def _message(self) -> list[str]:
        return ["--message", self.request.message] if self.request.message else []

    def _targets(self) -> list[str]:
        """``--target`` for each target; ``--target-dependents`` with them if asked."""
        args = [arg for target in self.request.targets for arg in ("--target", target)]
        if args and self.request.target_dependents:
            args.append("--target-dependents")
        return args

    def _owner(self) -> str:
        """Whose runs these are: the Stack's home, stack name and pod (its hostname).

        A Stack's home is its own under the local runner; every run pod's is the same
        path, and its hostname (the pod's name, one per Stack) tells them apart.
        """
        return "\n".join((str(self.home), self.request.stack, self.request.env.get("HOSTNAME", "")))

    def _log_line(self, line: str) -> None:
        if line.strip():
            self.log.debug("pulumi", line=self.scrubber.scrub(line))

    def _report(self, progress: Progress) -> None:
        try:
            self.on_progress(progress)
        except Exception:  # the event follower's thread must never see it
            self.log.exception("Progress callback failed")


def _not_found(err: CliError) -> bool:
    return classify("select", err.result.stdout, err.result.stderr) is ErrorKind.STACK_NOT_FOUND


def _environment_list(stdout: str) -> list[str]:
    """The environments ``config env ls --json`` printed (a JSON list of names)."""
    try:
        listed = json.loads(stdout or "[]")
    except ValueError:
        listed = None
    if not isinstance(listed, list) or not all(isinstance(name, str) for name in listed):
        text = truncate(stdout.strip(), 200, "…")
        message = (
            "the stack's environments cannot be set: `pulumi config env ls --json` printed "
            f"{text!r}, not a list of environments"
        )
        raise StepFailedError("environment", ErrorKind.SETUP_FAILED, message)
    return listed


def _shared_prefix(current: list[str], wanted: list[str]) -> int:
    """How many leading environments ``current`` and ``wanted`` have in common."""
    shared = 0
    for have, want in zip(current, wanted, strict=False):
        if have != want:
            break
        shared += 1
    return shared


def _permalink(stdout: str) -> str | None:
    """The update's web page, which Pulumi Cloud backends print after an operation."""
    found = _PERMALINK.search(stdout)
    return found.group(1) if found else None
