"""The go runtime: modules downloaded into the shared cache, keyed on go.mod and go.sum."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workspace.runner.deps.conftest import FakeBin
from workspace.runner.deps import golang
from workspace.runner.deps.types import DependencyError, Permanence
from workspace.runner.project import Project


def test_go_mod_download_in_the_program_directory(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """``go mod download`` runs where go.mod is; a go.sum change is a new key."""
    fake_bin.add("go", version="go version go1.26.8 linux/amd64")
    project = make_project("go", **{"go.mod": "module app\n", "go.sum": ""})
    plan = golang.plan(project, fake_bin.tools())
    assert plan is not None
    assert plan.tool == "go mod download"
    plan.install(tmp_path)
    assert fake_bin.calls[-1] == "go mod download"
    (project.directory / "go.sum").write_text("x v1 h1:y\n")
    changed = golang.plan(project, fake_bin.tools())
    assert changed is not None
    assert changed.key != plan.key


def test_go_needs_a_toolchain_in_the_image(
    make_project: Callable[..., Project], fake_bin: FakeBin
) -> None:
    """Without ``go`` on PATH: permanent, naming the image as the fix."""
    project = make_project("go")
    assert golang.plan(project, fake_bin.tools()) is None  # no go.mod: nothing to install
    (project.directory / "go.mod").write_text("module app\n")
    with pytest.raises(DependencyError) as raised:
        golang.plan(project, fake_bin.tools())
    assert raised.value.permanence is Permanence.PERMANENT
    assert "workspaceTemplate.spec.image" in raised.value.message
