"""The plugin step is skipped while the plugins it left are still installed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from workspace.runner.deps.plugins import PluginChecks, project_key
from workspace.runner.project import Project


def test_a_recorded_step_is_satisfied_until_one_of_its_plugins_goes(tmp_path: Path) -> None:
    """Recorded plugins present: skip; one removed (evicted, deleted): run the step again."""
    plugins = tmp_path / "plugins"
    (plugins / "resource-kubernetes-v4.25.0").mkdir(parents=True)
    (plugins / "resource-random-v4.0.0.partial").mkdir()  # an install in flight: not counted
    checks = PluginChecks(tmp_path / "checks", plugins)
    assert not checks.satisfied("k")
    checks.record("k")
    assert checks.satisfied("k")
    assert not checks.satisfied("other")
    shutil.rmtree(plugins / "resource-kubernetes-v4.25.0")
    assert not checks.satisfied("k")


def test_markers_are_per_plugin_store(tmp_path: Path) -> None:
    """A marker made for one plugin store says nothing about another."""
    (tmp_path / "a").mkdir()
    PluginChecks(tmp_path / "checks", tmp_path / "a").record("k")
    assert not PluginChecks(tmp_path / "checks", tmp_path / "b").satisfied("k")


def test_a_yaml_programs_key_follows_its_program_not_its_stack_settings(
    make_project: Callable[..., Project],
) -> None:
    """Config in Pulumi.dev.yaml does not change which plugins the program needs."""
    project = make_project("yaml")
    first = project_key(project)
    (project.directory / "Pulumi.dev.yaml").write_text("config: {a: b}\n")
    assert project_key(project) == first
    (project.directory / "Main.yaml").write_text("resources: {}\n")
    assert project_key(project) != first
