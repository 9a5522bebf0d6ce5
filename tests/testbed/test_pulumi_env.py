"""The real Pulumi CLI runs a Python program with a dynamic provider on a file backend."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pulumi import automation as auto

from testbed.assets import PULUMI_VERSION
from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS

pytestmark = pytest.mark.pulumi


def test_cli_is_the_built_version(pulumi_env: PulumiEnv) -> None:
    """The Automation API finds our CLI and its version passes the SDK's check."""
    assert str(pulumi_env.command().version) == PULUMI_VERSION


def test_up_then_destroy_manages_a_real_file(pulumi_env: PulumiEnv, tmp_path: Path) -> None:
    """``up`` creates the file and reports outputs; ``destroy`` removes it."""
    work_dir = tmp_path / "program"
    shutil.copytree(PROGRAMS / "files", work_dir)
    target = tmp_path / "managed.txt"
    stack = auto.create_stack(
        "smoke", work_dir=str(work_dir), opts=pulumi_env.workspace_options(work_dir)
    )
    stack.set_config("path", auto.ConfigValue(str(target)))
    stack.set_config("content", auto.ConfigValue("from pulumi"))

    result = stack.up(on_output=lambda _line: None)

    assert result.summary.result == "succeeded"
    assert result.summary.resource_changes == {"create": 2}  # the stack + the file
    assert target.read_text() == "from pulumi"
    assert result.outputs["path"].value == str(target)
    assert result.outputs["content"].value == "from pulumi"
    assert result.outputs["secretContent"].secret
    state = pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / "smoke.json"
    latest = json.loads(state.read_text())["checkpoint"]["latest"]
    outputs = next(r for r in latest["resources"] if r["type"] == "pulumi:pulumi:Stack")["outputs"]
    assert outputs["content"] == "from pulumi"
    assert "ciphertext" in outputs["secretContent"]  # encrypted with the passphrase provider

    stack.destroy(on_output=lambda _line: None)

    assert not target.exists()
