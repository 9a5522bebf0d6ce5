"""Fixtures for the runner's tests: a runner on the test bed's CLI, program copies, requests.

Every test copies a test program (``files``: a dynamic provider managing one file;
``echo``: no resources, reports the config and environment it sees) into its own
directory and runs it on the ``pulumi_env`` file backend.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS
from tests.workspace.runner.support import SECRET_VALUE, STACK, ArgvSpy
from workspace.runner import LocalRunner, UpdateRequest


@pytest.fixture
def runner(pulumi_env: PulumiEnv) -> LocalRunner:
    """A runner on the test bed's CLI; its shared home is the test bed's PULUMI_HOME."""
    return LocalRunner(pulumi_env.command(), pulumi_env.home)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A private copy of the ``files`` program."""
    work_dir = tmp_path / "program"
    shutil.copytree(PROGRAMS / "files", work_dir)
    return work_dir


@pytest.fixture
def echo(tmp_path: Path) -> Path:
    """A private copy of the ``echo`` program (it reports the config it sees)."""
    work_dir = tmp_path / "echo"
    shutil.copytree(PROGRAMS / "echo", work_dir)
    return work_dir


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The file the ``files`` program manages."""
    return tmp_path / "managed.txt"


@pytest.fixture
def make_request(
    pulumi_env: PulumiEnv, program: Path, target: Path
) -> Callable[..., UpdateRequest]:
    """Build a request for the ``files`` program's ``dev`` stack; ``config`` adds to ``path``."""

    def make(config: dict[str, str] | None = None, **fields: Any) -> UpdateRequest:
        return UpdateRequest(
            work_dir=fields.pop("work_dir", program),
            stack=STACK,
            env={**pulumi_env.env, **fields.pop("env", {})},
            config={"path": str(target), **(config or {})},
            message="pulumi-stack-operator: test/dev generation 1",
            **fields,
        )

    return make


@pytest.fixture
def argv_spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ArgvSpy]:
    """Spy on every Popen and every process's cmdline for ``SECRET_VALUE``."""
    with ArgvSpy(SECRET_VALUE) as spy:
        monkeypatch.setattr(subprocess, "Popen", spy.popen)
        yield spy
