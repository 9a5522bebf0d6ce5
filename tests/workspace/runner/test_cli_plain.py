"""A command's output comes back from ``Cli`` as plain text, whatever the command printed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from workspace.runner.cli import Cli, CliContext, CliError

# Colours, a hyperlink and a carriage return, as a language host or plugin may print them.
SCRIPT = r"""#!/bin/sh
printf '\033[31mError\033[0m: boom\r\n'
printf '  on \033]8;;file:///p\033\\Pulumi.yaml\033]8;;\033\\ line 3:\n'
printf '\033[33mWarning\033[0m: deprecated\n' >&2
exit 1
"""


def test_a_failed_commands_output_has_no_terminal_codes(tmp_path: Path) -> None:
    """Both streams of the result (and so every message made of them) are plain."""
    binary = tmp_path / "noisy-cli"  # a stand-in: no real CLI runs
    binary.write_text(SCRIPT)
    binary.chmod(0o755)
    context = CliContext(str(binary), tmp_path, {}, threading.Event(), 1.0)
    cli = Cli(context)

    with pytest.raises(CliError) as failed:
        cli.run(["up"])

    assert failed.value.result.stdout == "Error: boom\n  on Pulumi.yaml line 3:\n"
    assert failed.value.result.stderr == "Warning: deprecated\n"
    assert cli.last is failed.value.result
