"""One operation's ``install`` and ``plugins`` phases: what a program needs before the CLI runs.

``Installation.held`` installs the program's dependencies through the runner's
``Installer`` (from its cache when an unchanged program installed them before: nothing
runs then), yields the CLI context that uses them (links in the program's directory,
variables, ``PATH``), and holds them until the block ends. Before yielding it installs
the plugins the program needs (``pulumi install --no-dependencies``) unless a marker
says they are there (``workspace.runner.deps.plugins``). What it did stays for the
operation's outcome: ``records`` (one per step, its seconds, whether the cache had it),
``cache_bytes`` (the caches' sizes after it) and ``seconds`` (all of it).

A failure raises ``StepFailedError``: ``DEPENDENCIES_INVALID`` (it would fail again
unchanged), ``DEPENDENCIES_FAILED`` (worth retrying) or ``INTERRUPTED``; reading the
project first raises its ``PROGRAM_INVALID``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from datetime import datetime

from structlog.typing import FilteringBoundLogger

from workspace.runner.cli import Cli, CliContext, CliError, CliStoppedError, inherited_env
from workspace.runner.deps import DependencyError, Permanence, Prepared, Tools
from workspace.runner.deps.failures import message as failure_message
from workspace.runner.deps.failures import permanence
from workspace.runner.deps.installer import ticking
from workspace.runner.deps.plugins import TOOL as PLUGIN_TOOL
from workspace.runner.deps.plugins import PluginChecks, project_key
from workspace.runner.deps.store import DOWNLOADS, disk_usage
from workspace.runner.deps.tools import ToolStoppedError
from workspace.runner.failures import StepFailedError
from workspace.runner.project import Project
from workspace.runner.scrub import Scrubber
from workspace.runner.settings import RunnerSettings
from workspace.runner.types import ErrorKind, InstallRecord, Progress
from workspace.runner.vocabulary import ENVIRONMENTS, PLUGINS

_UNKNOWN_COMMAND = re.compile(r"unknown (?:command|flag)")
_PERMANENT_KINDS = {
    Permanence.PERMANENT: ErrorKind.DEPENDENCIES_INVALID,
    Permanence.TRANSIENT: ErrorKind.DEPENDENCIES_FAILED,
}


class Installation:
    """Installs one operation's dependencies and plugins; keeps what it did."""

    def __init__(
        self,
        settings: RunnerSettings,
        scrubber: Scrubber,
        report: Callable[[Progress], None],
        log: FilteringBoundLogger,
    ) -> None:
        """Install as ``settings`` say; tell ``report`` what runs; scrub failures' messages."""
        self._installer = settings.installer
        self._plugin_store = settings.plugin_store
        self._clock = settings.clock
        self._scrubber = scrubber
        self._report = report
        self._log = log
        self.records: list[InstallRecord] = []
        self.cache_bytes: dict[str, int] = {}

    @property
    def seconds(self) -> float | None:
        """The time every step took together; None when none ran."""
        if not self.records:
            return None
        return round(sum(record.seconds for record in self.records), 3)

    @contextlib.contextmanager
    def held(self, project: Project, context: CliContext) -> Iterator[CliContext]:
        """Install for ``project``; yield ``context`` using what was installed, held till the end.

        Raises ``StepFailedError`` (see the module docstring).
        """
        tools = Tools(Cli(context).environment(), context.stop, context.grace, context.on_line)
        with contextlib.ExitStack() as held:
            try:
                prepared = held.enter_context(
                    self._installer.prepared(project, tools, self._installing)
                )
                activated = self._activate(prepared, context)
                self._plugins(prepared, project, Cli(activated))
            except DependencyError as err:
                if err.record is not None:
                    self.records.append(err.record)
                kind = _PERMANENT_KINDS[err.permanence]
                raise StepFailedError("install", kind, self._scrubber.scrub(err.message)) from err
            except (ToolStoppedError, OSError) as err:
                stopped = isinstance(err, ToolStoppedError) or context.stop.is_set()
                kind = ErrorKind.INTERRUPTED if stopped else ErrorKind.DEPENDENCIES_FAILED
                message = f"installing dependencies: {err}"
                raise StepFailedError("install", kind, message) from err
            yield activated

    def _installing(self, what: str, since: datetime) -> None:
        self._report(Progress("install", 0, 0, 0, what, since))

    def _activate(self, prepared: Prepared, context: CliContext) -> CliContext:
        """``context`` with every later CLI call (and the program) using the dependencies."""
        activation = prepared.activation
        env = {**context.env, **activation.env}
        if activation.path:
            rest = env.get("PATH") or inherited_env().get("PATH") or os.defpath
            env["PATH"] = os.pathsep.join([*activation.path, rest])
        if prepared.usage is not None:
            self.cache_bytes |= {
                ENVIRONMENTS: prepared.usage.environments,
                DOWNLOADS: prepared.usage.downloads,
            }
        self.records.extend(prepared.records)
        return dataclasses.replace(context, env=env)

    def _plugins(self, prepared: Prepared, project: Project, cli: Cli) -> None:
        """Install the plugins the program needs, unless they are known to be there.

        Only for programs whose dependencies were installed, or that have none to install
        (YAML); for others the engine acquires missing plugins itself.
        """
        if prepared.plan is None and project.runtime != "yaml":
            return
        checks = PluginChecks(self._installer.store.root / "plugin-checks", self._plugin_store)
        key = prepared.plan.key if prepared.plan else project_key(project)
        started = self._clock.now()
        if checks.satisfied(key):
            self._plugin_record(hit=True, started=started)
            return
        try:
            with ticking(f"installing plugins ({PLUGIN_TOOL})", self._installing, self._clock):
                cli.run(["install", "--no-dependencies"])
        except CliError as err:
            self._plugins_failed(err, cli, started)
            return
        except CliStoppedError as err:
            raise StepFailedError(PLUGINS, ErrorKind.INTERRUPTED) from err
        checks.record(key)
        self._plugin_record(hit=False, started=started)
        self.cache_bytes[PLUGINS] = disk_usage(self._plugin_store)

    def _plugin_record(self, *, hit: bool, started: float, succeeded: bool = True) -> None:
        seconds = self._clock.now() - started
        self.records.append(
            InstallRecord(PLUGINS, PLUGIN_TOOL, hit=hit, seconds=seconds, succeeded=succeeded)
        )

    def _plugins_failed(self, err: CliError, cli: Cli, started: float) -> None:
        """Raise the failure of the plugin step (an older CLI without it: carry on)."""
        output = f"{err.result.stderr}\n{err.result.stdout}"
        if _UNKNOWN_COMMAND.search(output):
            self._log.info("This CLI has no `pulumi install`; the engine installs plugins")
            return
        if cli.interrupted:
            raise StepFailedError(PLUGINS, ErrorKind.INTERRUPTED) from err
        self._plugin_record(hit=False, started=started, succeeded=False)
        kind = _PERMANENT_KINDS[permanence(output)]
        text = self._scrubber.scrub(failure_message(f"installing plugins ({PLUGIN_TOOL})", output))
        raise StepFailedError(PLUGINS, kind, text) from err
