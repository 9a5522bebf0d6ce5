"""What reaches the CLI and the programs it runs: the allow-listed environment, its own binary.

The real CLI runs the ``echo`` test program (no resources; it reports the config and the
environment it sees) on the test bed's ``file://`` backend.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pulumi_stack_operator.pulumi_cli import pulumi_command
from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS
from tests.workspace.runner.support import STACK, run, succeeded
from workspace.runner import LocalRunner, UpdateRequest
from workspace.runner.cli import INHERITED_ENV
from workspace.runner.deps.downloads import VARIABLES as DOWNLOAD_VARIABLES

pytestmark = pytest.mark.pulumi


def echo_program(root: Path, name: str = "echo") -> Path:
    """A private copy of the ``echo`` program."""
    work_dir = root / name
    shutil.copytree(PROGRAMS / "echo", work_dir)
    return work_dir


OPERATOR_ONLY = {
    "PSO_TEST_SENTINEL": "operator-only-sentinel",
    "KUBECONFIG": "/operator/kubeconfig",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "SOME_RANDOM_OPERATOR_VARIABLE": "random",
}
INHERITED = {"LC_TIME": "C.UTF-8", "TZ": "Europe/Vienna", "no_proxy": "127.0.0.1,localhost"}


def echo_request(
    pulumi_env: PulumiEnv, work_dir: Path, home: Path, *, env_names: list[str], **env: str
) -> UpdateRequest:
    """A request for the ``echo`` program that reports ``env_names``."""
    return UpdateRequest(
        work_dir=work_dir,
        stack=STACK,
        env={**pulumi_env.env, **env},
        config={"env": ",".join(env_names)},
        pulumi_home=home,
    )


def test_programs_see_the_allow_listed_environment_and_the_requests_only(
    runner: LocalRunner, pulumi_env: PulumiEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's own variables do not reach the program, except the allow-listed ones."""
    for name, value in {**OPERATOR_ONLY, **INHERITED}.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "stack" / "home"
    names = [*OPERATOR_ONLY, *INHERITED, "REQUEST_VAR", "HOME", "PULUMI_HOME"]
    request = echo_request(
        pulumi_env,
        echo_program(tmp_path),
        home,
        env_names=names,
        REQUEST_VAR="r42",  # short: the runner masks env values
    )

    outcome = run(runner, request)

    assert succeeded(outcome)
    seen = outcome.outputs["env"]
    assert {name: seen[name] for name in OPERATOR_ONLY} == dict.fromkeys(OPERATOR_ONLY, "<unset>")
    assert {name: seen[name] for name in INHERITED} == INHERITED
    assert seen["REQUEST_VAR"] == "r42"
    assert seen["HOME"] == seen["PULUMI_HOME"] == str(home)
    ours = {"HOME", "PULUMI_HOME", *request.env, *DOWNLOAD_VARIABLES}  # the installs' caches
    leaked = [
        name
        for name in outcome.outputs["envNames"]
        if name not in ours and name not in INHERITED_ENV and not name.startswith("LC_")
        # what the CLI sets for its programs (PULUMI_CONFIG, ...) is not the operator's
        if name in os.environ or not name.startswith("PULUMI_")
    ]
    assert leaked == []


def test_a_stacks_path_cannot_substitute_the_cli(
    pulumi_env: PulumiEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI is resolved once, at start-up; ``PATH`` in a Stack's env finds no other."""
    impostor_dir = tmp_path / "impostor"
    impostor_dir.mkdir()
    marker = tmp_path / "impostor-ran"
    impostor = impostor_dir / "pulumi"
    impostor.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    impostor.chmod(0o755)
    monkeypatch.setenv("PATH", f"{pulumi_env.bin_dir}{os.pathsep}{os.environ['PATH']}")
    command = pulumi_command()
    runner = LocalRunner(command, pulumi_env.home)
    request = echo_request(
        pulumi_env,
        echo_program(tmp_path),
        tmp_path / "home",
        env_names=["PATH"],
        PATH=f"{impostor_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
    )

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert Path(command.command) == (pulumi_env.bin_dir / "pulumi").resolve()
    assert not marker.exists()
    # The CLI's own directory comes first, so its language host and plugins are found.
    assert outcome.outputs["env"]["PATH"].split(os.pathsep)[0] == str(Path(command.command).parent)
