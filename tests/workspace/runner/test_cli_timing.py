"""Each ``pulumi`` command's time is logged at debug level, on the operation's clock."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import structlog

from controller.clock import FakeClock
from workspace.runner.cli import Cli, CliContext


def test_each_command_logs_its_words_exit_code_and_seconds(tmp_path: Path) -> None:
    """The subcommand's words (no flag values), its exit code, and the clock's seconds."""
    clock = FakeClock(10.0)
    echo = shutil.which("echo")
    assert echo is not None

    def on_line(line: str) -> None:
        del line
        clock.step(1.5)  # the command "takes" 1.5 s of the clock while it runs

    context = CliContext(echo, tmp_path, {}, threading.Event(), 1.0, on_line, clock)
    with structlog.testing.capture_logs() as logs:
        Cli(context).run(["stack", "select", "--stack", "secret-name"])

    [logged] = [e for e in logs if e["event"] == "pulumi command"]
    assert logged == {
        "event": "pulumi command",
        "log_level": "debug",
        "command": "stack select",
        "code": 0,
        "seconds": 1.5,
    }
