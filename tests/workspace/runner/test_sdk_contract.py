"""What the runner relies on from Pulumi itself: these fail when the SDK or the CLI moves.

The runner no longer calls the Automation API: it runs the CLI and reads its event log.
What is left to pin:

* the SDK: the signature marking a secret value, which the runner copies (the operator
  does not import the Automation API: ``pulumi_stack_operator.pulumi_cli`` finds the CLI);
* the CLI: the hidden ``--event-log`` flag and the JSON engine events it writes (the keys
  ``StepObserver`` reads), how it marks secret outputs in events, and that
  ``stack output --json`` masks secrets unless ``--show-secrets`` (which the runner never
  passes).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import rpc

from pulumi_stack_operator.pulumi_cli import MINIMUM_VERSION, cli_version, pulumi_command
from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.support import STACK, ProgressLog
from workspace.runner.engine import SECRET_SIG, SIG_KEY, Event, StepObserver, holds_secret
from workspace.runner.local.runner import CliBinary


def test_the_secret_signature_is_the_sdks() -> None:
    """The runner's copy of the secret signature equals the SDK's own."""
    assert (rpc._special_sig_key, rpc._special_secret_sig) == (SIG_KEY, SECRET_SIG)  # noqa: SLF001


@pytest.mark.pulumi
def test_the_cli_is_found_resolved_and_version_checked(
    pulumi_env: PulumiEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pulumi_command`` names the real binary on PATH; ``pulumi version`` parses."""
    monkeypatch.setenv("PATH", f"{pulumi_env.bin_dir}{os.pathsep}{os.environ['PATH']}")
    binary: CliBinary = pulumi_command()

    assert Path(binary.command) == (pulumi_env.bin_dir / "pulumi").resolve()
    assert cli_version(Path(binary.command)) >= MINIMUM_VERSION


def cli(pulumi_env: PulumiEnv, program: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the test bed's CLI in ``program`` (non-interactive, as the runner does)."""
    env = {**os.environ, **pulumi_env.env, "PULUMI_DEBUG_COMMANDS": "true"}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(pulumi_env.bin_dir / "pulumi"), "--non-interactive", *args]
        return subprocess.run(
            argv, cwd=program, env=env, capture_output=True, text=True, check=check, timeout=300
        )

    return run


def events_of(path: Path) -> list[Event]:
    """The engine events in an event log."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def observe(events: list[Event]) -> StepObserver:
    """A step observer that saw ``events``."""
    observer = StepObserver("update", ProgressLog())
    for event in events:
        observer.on_event(event)
    observer.flush()
    return observer


@pytest.mark.pulumi
def test_the_event_log_carries_what_the_observer_reads(
    pulumi_env: PulumiEnv, program: Path, target: Path, tmp_path: Path
) -> None:
    """A real ``up``'s events give the change summary, steps, and outputs with secrets marked."""
    run = cli(pulumi_env, program)
    run("stack", "init", "--stack", STACK)
    run("config", "set", "--stack", STACK, "path", str(target))
    log = tmp_path / "up.jsonl"

    run("up", "--yes", "--skip-preview", "--exec-kind", "auto.local", "--event-log", str(log))

    events = events_of(log)
    observer = observe(events)
    assert observer.changes == {"create": 2}
    assert observer.errors == []
    pre = [e["resourcePreEvent"]["metadata"] for e in events if "resourcePreEvent" in e]
    assert {"op", "urn", "type"} <= set(pre[0])
    outputs = observer.stack_outputs
    assert outputs is not None
    assert outputs["content"] == "hello"
    assert outputs["secretContent"][SIG_KEY] == SECRET_SIG
    assert holds_secret(outputs["secretContent"])
    assert not holds_secret(outputs["content"])


@pytest.mark.pulumi
def test_a_failed_step_and_its_error_arrive_as_events(
    pulumi_env: PulumiEnv, program: Path, target: Path, tmp_path: Path
) -> None:
    """A resource that fails sends a failed-step event and an error diagnostic with its URN."""
    run = cli(pulumi_env, program)
    run("stack", "init", "--stack", STACK)
    run("config", "set", "--stack", STACK, "path", str(target))
    run("config", "set", "--stack", STACK, "fail", "contract-boom")
    log = tmp_path / "up.jsonl"

    failed = run("up", "--yes", "--skip-preview", "--event-log", str(log), check=False)

    assert failed.returncode != 0
    events = events_of(log)
    assert any("resOpFailedEvent" in event for event in events)
    errors = observe(events).errors
    assert errors
    assert errors[0].startswith("file: ")
    assert "contract-boom" in errors[0]


@pytest.mark.pulumi
def test_stack_output_masks_secrets_unless_asked_to_show_them(
    pulumi_env: PulumiEnv, program: Path, target: Path
) -> None:
    """``stack output --json`` prints ``"[secret]"``; ``--show-secrets`` prints the value."""
    run = cli(pulumi_env, program)
    run("stack", "init", "--stack", STACK)
    run("config", "set", "--stack", STACK, "path", str(target))
    run("up", "--yes", "--skip-preview")

    masked: dict[str, Any] = json.loads(run("stack", "output", "--json").stdout)
    shown: dict[str, Any] = json.loads(run("stack", "output", "--json", "--show-secrets").stdout)

    assert masked["secretContent"] == "[secret]"
    assert shown["secretContent"] == "hello"


@pytest.mark.pulumi
def test_a_program_on_the_operators_interpreter_needs_no_plugin(
    pulumi_env: PulumiEnv, program: Path
) -> None:
    """``pulumi plugin install`` finds nothing to install for the files program.

    Programs without a virtualenv of their own run on the operator's interpreter, whose
    ``pip list`` the Python language host reads: a distribution named ``pulumi-<x>`` there
    would make the CLI download a plugin ``<x>`` before every operation (the operator's
    own distribution once did). Plugin downloads are allowed here, so that any attempt
    shows, and fails, for the machine has no route to a plugin server.
    """
    env = {**os.environ, **pulumi_env.env}
    del env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"]
    argv = [str(pulumi_env.bin_dir / "pulumi"), "--non-interactive", "plugin", "install"]
    done = subprocess.run(
        argv, cwd=program, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "installing" not in done.stdout + done.stderr
