"""The test bed's file provider, through the real CLI running the YAML files program.

The provider (``testbed/providers/testfile``) is installed from a plugin mirror, as the
operator installs it; what the Python files program does, it must do alike: create,
update in place on a new content, replace (delete first) on a new path, fail with the
message ``fail`` gives, wait ``delay`` seconds, destroy, and keep every input a string
however YAML typed its config. A ``cancellable`` wait ends when the CLI is interrupted (the
engine's Cancel); any other runs to its end, as with a provider that ignores Cancel.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pulumi import automation as auto

from testbed.plugin_mirror import PluginMirror
from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS

pytestmark = pytest.mark.pulumi


def quiet(_line: str) -> None:
    """Drop the CLI's output."""


@pytest.fixture
def stack(pulumi_env: PulumiEnv, files_mirror: PluginMirror, tmp_path: Path) -> auto.Stack:
    """A stack of the YAML files program whose CLI installs plugins from the mirror."""
    work_dir = shutil.copytree(PROGRAMS / "files-yaml", tmp_path / "program")
    options = pulumi_env.workspace_options(work_dir)
    overrides = {"PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES": files_mirror.overrides}
    options.env_vars = {**pulumi_env.env, **overrides}
    return auto.create_stack("files", work_dir=str(work_dir), opts=options)


def configure(stack: auto.Stack, **values: str) -> None:
    """Set each config value (a plain string)."""
    for key, value in values.items():
        stack.set_config(key, auto.ConfigValue(value))


def test_the_yaml_files_program_manages_a_file_as_the_python_one_does(
    stack: auto.Stack, files_mirror: PluginMirror, tmp_path: Path
) -> None:
    """Create, update, replace, fail, destroy; outputs as strings, the secret one secret."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    configure(stack, path=str(first), content="42")
    assert isinstance(stack.workspace, auto.LocalWorkspace)
    stack.workspace.install(no_dependencies=True)  # the operator's plugin step
    assert [r.path for r in files_mirror.requests][-1].endswith(
        "testfile-v0.1.0-linux-amd64.tar.gz"
    )

    created = stack.up(on_output=quiet)
    assert created.summary.resource_changes == {"create": 2}
    assert first.read_text() == "42"
    assert created.outputs["content"].value == "42"  # a string, though YAML read a number
    assert created.outputs["secretContent"].secret

    configure(stack, content="two", delay="1.5")
    started = time.monotonic()
    updated = stack.up(on_output=quiet)
    assert time.monotonic() - started >= 1.5
    assert updated.summary.resource_changes == {"update": 1, "same": 1}
    assert first.read_text() == "two"

    configure(stack, path=str(second), delay="")
    replaced = stack.up(on_output=quiet)
    assert replaced.summary.resource_changes == {"replace": 1, "same": 1}
    assert (not first.exists(), second.read_text()) == (True, "two")

    configure(stack, content="three", fail="disk on fire")
    with pytest.raises(auto.CommandError, match="disk on fire"):
        stack.up(on_output=quiet)
    assert second.read_text() == "two"

    stack.destroy(on_output=quiet)
    assert not second.exists()


@pytest.mark.parametrize("cancellable", ["true", ""])
def test_an_interrupted_cli_cancels_a_cancellable_wait_only(
    stack: auto.Stack, pulumi_env: PulumiEnv, files_mirror: PluginMirror, cancellable: str
) -> None:
    """SIGINT mid-create: a cancellable wait fails at once; another one creates the file.

    The cancellable create waits 120 s: were the Cancel ignored, the CLI would write the
    file before it exits, and the test would fail.
    """
    target = Path(stack.workspace.work_dir) / "target.txt"
    delay = "120" if cancellable else "2"
    configure(stack, path=str(target), content="x", delay=delay, cancellable=cancellable)
    assert isinstance(stack.workspace, auto.LocalWorkspace)
    stack.workspace.install(no_dependencies=True)
    env = {**os.environ, **pulumi_env.env}
    env["PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"] = files_mirror.overrides
    argv = ["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "--stack", "files"]
    with subprocess.Popen(
        argv,
        cwd=stack.workspace.work_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as cli:
        assert cli.stdout is not None
        seen: list[str] = []
        for line in cli.stdout:  # until the file's create runs (the stack's comes first)
            seen.append(line)
            if "testfile:index:File" in line and "creating" in line:
                break
        assert "creating" in seen[-1], seen
        cli.send_signal(signal.SIGINT)
        rest = cli.stdout.read()
        code = cli.wait()
    assert code != 0
    if cancellable:
        assert "canceled: the engine asked the provider to stop" in rest, rest
        assert not target.exists()
    else:
        assert target.read_text() == "x"  # the engine waited for the step it could not stop
