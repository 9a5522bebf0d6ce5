"""A failure's message from the CLI's own output: the error first, no display, no warnings.

The recordings in ``cli_output/`` are real: the runner's failing ``pulumi up`` (and
``preview``) with the test bed's CLI, as ``Cli`` received it (raw, before
``controller.text.plain``), with the flags the runner passes (``args``). ``yaml_type_errors_*``
is a YAML program with the deprecated ``configuration:`` block and two type errors: the
YAML language host prints its warning and errors in colour (whatever the CLI's
``--color``) and bails, so the engine sends no error diagnostic and the message comes from
stdout. ``python_resource_error_up`` is the ``files`` program with ``fail`` set (machine
paths replaced by ``<site-packages>`` and ``<program>``). ``test_failures`` runs the YAML
program with the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controller.text import plain
from workspace.runner.display import error_text
from workspace.runner.failures import Phase, classify
from workspace.runner.types import ErrorKind

RECORDINGS = Path(__file__).parent / "cli_output"
YAML_ERRORS = (
    "Error: pulumi:pulumi:StackReference is not assignable from "
    "{stack: string, nosuchproperty: boolean}\n"
    "Cannot assign '{stack: string, nosuchproperty: boolean}' to 'pulumi:pulumi:StackReference':\n"
    "  Existing properties are: name\n"
    "  Existing properties are: name\n"
    "Error: cannot access a property on 'path' (type string)\n"
    "  on Pulumi.yaml line 13:\n"
    "  13:   where: ${path.directory}\n"
    "Property access is only allowed on Resources and Objects"
)


def recording(name: str) -> dict[str, Any]:
    """The recording ``cli_output/<name>.json``."""
    recorded: dict[str, Any] = json.loads((RECORDINGS / f"{name}.json").read_text())
    return recorded


@pytest.mark.parametrize("name", ["yaml_type_errors_up", "yaml_type_errors_preview"])
def test_a_yaml_programs_errors_come_first_without_colours_warnings_or_display(
    name: str,
) -> None:
    """Colours in, as the CLI printed them; the host's errors out, first, and nothing else."""
    recorded = recording(name)
    assert "--color" in recorded["args"]
    assert "\x1b[33mWarning\x1b[0m" in recorded["stdout"]  # what made the message unreadable

    assert error_text(plain(recorded["stdout"])) == YAML_ERRORS


@pytest.mark.parametrize("name", ["yaml_type_errors_up", "yaml_type_errors_preview"])
def test_a_yaml_program_that_does_not_type_check_is_program_invalid(name: str) -> None:
    """Only the host's own ``Error:`` lines, nothing from the engine: the program is invalid."""
    recorded = recording(name)
    phase: Phase = "update" if name.endswith("_up") else "preview"
    stdout, stderr = plain(recorded["stdout"]), plain(recorded["stderr"])
    assert classify(phase, stdout, stderr) is ErrorKind.PROGRAM_INVALID
    engine_said = "error: update failed"  # an error diagnostic: then it is not the host alone
    assert classify(phase, stdout, engine_said) is ErrorKind.UPDATE_FAILED


def test_the_diagnostics_of_a_failed_resource_stay_and_the_display_goes() -> None:
    """Rows, the resource headers, ``Resources:`` and ``Duration:`` go; the traceback stays."""
    text = error_text(plain(recording("python_resource_error_up")["stdout"]))
    lines = text.splitlines()
    assert lines[:3] == [
        "error: update failed",
        "error: Resource monitor has terminated, shutting down",
        "error: Traceback (most recent call last):",
    ]
    assert lines[-1] == "RuntimeError: disk on fire"
    assert '  File "<program>/__main__.py", line 26, in _write' in lines
    for gone in ("Updating (dev)", "pulumi:pulumi:Stack", "Resources:", "created", "Duration:"):
        assert gone not in text


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        pytest.param(
            "Updating (dev):\n\n@ updating....\n@ updating.....\n"
            " +  pulumi:pulumi:Stack app-dev creating (0s) \n"
            "error: the stack is currently locked by 1 lock(s)\n",
            "error: the stack is currently locked by 1 lock(s)",
            id="progress-ticks-and-a-cli-error",
        ),
        pytest.param(
            "warning: A new version of Pulumi is available.\n"
            "  To upgrade from version '3.1.0' to '3.274.1', run\n"
            "     $ curl -sSL https://get.pulumi.com | sh\n"
            "error: no stack named 'dev' found\n",
            "error: no stack named 'dev' found",
            id="a-warning-and-the-lines-under-it",
        ),
        pytest.param(
            "(node:71) [DEP0040] DeprecationWarning: The `punycode` module is deprecated.\n"
            "(Use `node --trace-deprecation ...` to show where the warning was created)\n"
            "/app/index.js:3\n"
            'TypeError [ERR_INVALID_ARG_TYPE]: The "path" argument must be of type string\n',
            'TypeError [ERR_INVALID_ARG_TYPE]: The "path" argument must be of type string\n'
            "/app/index.js:3",
            id="node-deprecation-then-the-error-first",
        ),
        pytest.param(
            "/app/__main__.py:4: DeprecationWarning: 'imp' is deprecated\n"
            "  import imp\n"
            "npm WARN deprecated inflight@1.0.6: not supported\n"
            "Previewing update (dev):\n"
            'Outputs:\n    path: "/tmp/x"\n\n'
            "Resources:\n    1 unchanged\n\n"
            "View Live: https://app.pulumi.com/org/app/dev/previews/1\n"
            "RuntimeError: boom\n",
            "RuntimeError: boom",
            id="python-and-npm-warnings-sections-and-a-permalink",
        ),
        pytest.param(
            "Updating (dev):\n\n    pulumi:pulumi:Stack app-dev  \n"
            "Resources:\n    1 unchanged\n\nDuration: 1s\n",
            "",
            id="only-display",
        ),
    ],
)
def test_what_is_dropped_and_what_comes_first(output: str, expected: str) -> None:
    """Display and warnings go, with the lines indented under a warning; the error leads."""
    assert error_text(output) == expected
