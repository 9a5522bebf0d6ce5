"""What every operation of one local-process runner shares: the CLI, homes, installer, clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from controller.clock import Clock, RealClock
from workspace.runner.deps import Installer
from workspace.runner.home import PLUGINS_DIR


@dataclass(frozen=True)
class RunnerSettings:
    """What every attempt of one runner shares.

    ``binary``: the absolute ``pulumi``. ``plugin_home``: the ``PULUMI_HOME`` holding the
    plugin store every Stack's home links to, and the home of requests without their own.
    ``interrupt_grace``: seconds between SIGINT and SIGKILL of an interrupted CLI.
    ``installer``: where programs' dependencies are installed and cached;
    ``plugin_mirror``: the URL every plugin is downloaded from (None: each plugin's own).
    ``clock``: every time an operation reads (its start and end, step durations, progress).
    """

    binary: str
    plugin_home: Path
    interrupt_grace: float
    installer: Installer
    plugin_mirror: str | None = None
    clock: Clock = field(default_factory=RealClock)

    @property
    def plugin_store(self) -> Path:
        """The directory holding the installed plugins."""
        return self.plugin_home.absolute() / PLUGINS_DIR
