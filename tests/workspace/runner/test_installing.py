"""The install and plugins phases (``workspace.runner.installing``) with a scripted ``pulumi``.

A YAML program has no dependencies to install, so only the plugin step runs: a shell
script stands in for the CLI (what it prints and its exit code), the dependency store and
plugin store are real directories. The real CLI's plugin step is in ``test_dependencies``.
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
import structlog

from controller.clock import RealClock
from workspace.runner.cli import CliContext
from workspace.runner.deps import DependencyStore, Installer
from workspace.runner.failures import StepFailedError
from workspace.runner.installing import Installation
from workspace.runner.project import load_project
from workspace.runner.scrub import Scrubber
from workspace.runner.settings import RunnerSettings
from workspace.runner.types import ErrorKind, Progress, UpdateRequest

SECRET = "hunter2-mirror-token"  # noqa: S105 - a test value, masked in the failure


class Bed:
    """A YAML program, a scripted ``pulumi``, a plugin store and the progress heard."""

    def __init__(self, root: Path) -> None:
        """Lay it out under ``root``."""
        self.root = root
        self.program = root / "program"
        self.program.mkdir()
        (self.program / "Pulumi.yaml").write_text("name: app\nruntime: yaml\n")
        self.pulumi = root / "bin" / "pulumi"
        self.pulumi.parent.mkdir()
        self.settings = RunnerSettings(
            binary=str(self.pulumi),
            plugin_home=root / "home",
            interrupt_grace=5,
            installer=Installer(DependencyStore(root / "cache", 0)),
        )
        self.heard: list[Progress] = []
        self.calls = root / "calls"

    def script(self, output: str, code: int) -> None:
        """``pulumi`` prints ``output`` to stderr and exits with ``code``; counts its calls."""
        self.pulumi.write_text(
            f"#!/bin/sh\necho \"$*\" >> {self.calls}\necho '{output}' >&2\nexit {code}\n"
        )
        self.pulumi.chmod(self.pulumi.stat().st_mode | stat.S_IEXEC)

    def install(self) -> Installation:
        """One operation's installation, run to the end of its block."""
        request = UpdateRequest(
            work_dir=self.program,
            stack="dev",
            env={"MIRROR_TOKEN": SECRET},
            secret_env=frozenset({"MIRROR_TOKEN"}),
        )
        installation = Installation(
            self.settings, Scrubber(request), self.heard.append, structlog.get_logger()
        )
        context = CliContext(
            str(self.pulumi), self.program, request.env, threading.Event(), 5, None, RealClock()
        )
        with installation.held(load_project(self.program), context) as activated:
            assert activated.env["MIRROR_TOKEN"] == SECRET
        return installation

    def commands(self) -> list[str]:
        """Every command line the script was called with."""
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    """A fresh bed."""
    return Bed(tmp_path)


def test_the_plugin_step_runs_once_then_its_marker_is_a_hit(bed: Bed) -> None:
    """First operation: ``pulumi install --no-dependencies``; the next: a hit, no command."""
    bed.script("", 0)
    first = bed.install()
    assert bed.commands() == ["--non-interactive install --no-dependencies"]
    assert [(r.kind, r.hit, r.succeeded) for r in first.records] == [("plugins", False, True)]
    assert first.seconds is not None
    assert "plugins" in first.cache_bytes
    assert bed.heard
    assert bed.heard[0].step == "install"
    second = bed.install()
    assert len(bed.commands()) == 1
    assert [(r.kind, r.hit) for r in second.records] == [("plugins", True)]


def test_a_cli_without_the_install_command_carries_on(bed: Bed) -> None:
    """An older CLI: no record, no failure; the engine will fetch plugins itself."""
    bed.script('error: unknown command "install" for "pulumi"', 1)
    installation = bed.install()
    assert installation.records == []
    assert installation.seconds is None


def test_a_failed_plugin_step_raises_with_a_scrubbed_message(bed: Bed) -> None:
    """A download refused: StepFailedError in the plugins phase, the secret masked."""
    bed.script(f"error: 404 Not Found: https://mirror/{SECRET}/pulumi-resource-x.tar.gz", 1)
    with pytest.raises(StepFailedError) as raised:
        bed.install()
    failure = raised.value
    assert failure.phase == "plugins"
    assert failure.kind in (ErrorKind.DEPENDENCIES_INVALID, ErrorKind.DEPENDENCIES_FAILED)
    assert SECRET not in (failure.detail or "")
    assert "404 Not Found" in (failure.detail or "")
