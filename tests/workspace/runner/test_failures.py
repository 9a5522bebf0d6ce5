"""Failures of an operation and the ``ErrorKind`` each becomes: real CLI runs, then the rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workspace.runner.support import TOKEN_VALUE, ArgvSpy, run, succeeded
from tests.workspace.runner.test_display import YAML_ERRORS
from workspace.runner import ErrorKind, LocalRunner, UpdateRequest
from workspace.runner.failures import classify
from workspace.runner.types import MASK, MESSAGE_LIMIT

# A YAML program with the deprecated `configuration:` block and two type errors (the
# program of the recordings in cli_output/yaml_type_errors_*.json).
BROKEN_YAML = """\
name: broken-yaml
runtime: yaml
configuration:
  path:
    type: String
resources:
  other:
    type: pulumi:pulumi:StackReference
    properties:
      stack: ${path}
      nosuchproperty: true
outputs:
  where: ${path.directory}
"""


@pytest.mark.pulumi
def test_failing_resource_is_update_failed_with_the_programs_message(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest]
) -> None:
    """A resource that raises gives UPDATE_FAILED with its error; env secrets are scrubbed."""
    outcome = run(
        runner,
        make_request(
            {"fail": f"boom: resource exploded with {TOKEN_VALUE}"},
            env={"API_TOKEN": TOKEN_VALUE},
        ),
    )

    assert not outcome.succeeded
    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert f"boom: resource exploded with {MASK}" in outcome.message
    assert TOKEN_VALUE not in outcome.message
    assert len(outcome.message.encode()) <= MESSAGE_LIMIT
    assert outcome.outputs == {}


@pytest.mark.pulumi
def test_wrong_passphrase_is_setup_failed(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest]
) -> None:
    """Config that cannot be encrypted (wrong passphrase) fails setup, without the passphrase."""
    assert succeeded(run(runner, make_request()))
    wrong = f"wrong-{TOKEN_VALUE}"

    outcome = run(
        runner,
        make_request(env={"PULUMI_CONFIG_PASSPHRASE": wrong}, secret_config={"pw": "x" * 8}),
    )

    assert outcome.error is ErrorKind.SETUP_FAILED
    assert "incorrect passphrase" in outcome.message
    assert wrong not in outcome.message


@pytest.mark.pulumi
def test_use_local_stack_only_without_the_stack_is_stack_not_found(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """``use_local_stack_only`` never creates a stack: a missing one is STACK_NOT_FOUND."""
    outcome = run(runner, make_request(use_local_stack_only=True))

    assert not outcome.succeeded
    assert outcome.error is ErrorKind.STACK_NOT_FOUND
    assert "no stack named" in outcome.message
    assert not target.exists()


@pytest.mark.pulumi
def test_missing_project_file_is_program_invalid_without_running_the_cli(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    program: Path,
    argv_spy: ArgvSpy,
) -> None:
    """Without Pulumi.yaml the outcome is PROGRAM_INVALID and no CLI was started."""
    (program / "Pulumi.yaml").unlink()

    outcome = run(runner, make_request())

    assert outcome.error is ErrorKind.PROGRAM_INVALID
    assert "Pulumi.yaml" in outcome.message
    assert argv_spy.argvs == []


@pytest.mark.pulumi
def test_python_syntax_error_is_program_invalid(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], program: Path
) -> None:
    """A program that does not compile needs a source change: PROGRAM_INVALID."""
    (program / "__main__.py").write_text("def broken(:\n")

    outcome = run(runner, make_request())

    assert outcome.error is ErrorKind.PROGRAM_INVALID, outcome.message
    assert "SyntaxError" in outcome.message


@pytest.mark.pulumi
@pytest.mark.parametrize("preview", [False, True], ids=["up", "preview"])
def test_a_yaml_program_that_does_not_type_check_is_program_invalid_with_its_errors_first(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    tmp_path: Path,
    *,
    preview: bool,
) -> None:
    """The YAML host's own colourful report, as a message: its errors first, plain.

    The host prints a deprecation warning and its type errors in colour and bails: no
    error diagnostic, so the message comes from the CLI's display (``test_display`` has
    these very outputs recorded).
    """
    program = tmp_path / "yaml"
    program.mkdir()
    (program / "Pulumi.yaml").write_text(BROKEN_YAML)

    outcome = run(runner, make_request(work_dir=program, preview=preview))

    assert outcome.error is ErrorKind.PROGRAM_INVALID, outcome.message
    assert outcome.message == YAML_ERRORS
    assert "\x1b" not in outcome.message


@pytest.mark.parametrize(
    ("phase", "stdout", "stderr", "kind"),
    [
        ("update", "", "error: the stack is currently locked by 1 lock(s)", ErrorKind.CONFLICT),
        (
            "refresh",
            "",
            "[409] Conflict: Another update is currently in progress.",
            ErrorKind.CONFLICT,
        ),
        ("select", "", "error: no stack named 'dev' found", ErrorKind.STACK_NOT_FOUND),
        ("config", "", "error: no stack named 'dev' found", ErrorKind.SETUP_FAILED),
        ("update", "", "  SyntaxError: invalid syntax", ErrorKind.PROGRAM_INVALID),
        ("update", "error: Build FAILED.", "", ErrorKind.PROGRAM_INVALID),
        ("select", "", "could not read Pulumi.dev.yaml", ErrorKind.PROGRAM_INVALID),
        ("update", "", "could not read Pulumi.dev.yaml", ErrorKind.UPDATE_FAILED),
        ("refresh", "", "error: no changes were expected", ErrorKind.REFRESH_CHANGES),
        ("update", "", "error: no changes were expected", ErrorKind.UPDATE_FAILED),
        ("select", "", "connection refused", ErrorKind.SETUP_FAILED),
        ("destroy", "", "boom", ErrorKind.UPDATE_FAILED),
    ],
)
def test_classification_rules(phase: str, stdout: str, stderr: str, kind: ErrorKind) -> None:
    """Where a failure happened and what the CLI said decide its kind."""
    assert classify(phase, stdout, stderr) is kind  # type: ignore[arg-type]
