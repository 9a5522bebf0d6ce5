"""Installing for one operation: hits and misses, links, progress, failures."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.workspace.runner.deps.conftest import FakeBin
from workspace.runner.deps import DependencyError, DependencyStore, Installer, Permanence
from workspace.runner.project import Project

FILES = {"package.json": "{}", "package-lock.json": "{}"}
OUT_OF_SYNC = (
    'echo "npm error code EUSAGE" >&2; echo "npm error \\`npm ci\\` can only install packages '
    'when your package.json and package-lock.json are in sync" >&2; exit 1'
)
REFUSED = 'echo "npm error code ECONNREFUSED" >&2; exit 1'


class Heard:
    """What ``on_install`` was told."""

    def __init__(self) -> None:
        """Nothing yet."""
        self.said: list[str] = []

    def __call__(self, what: str, since: datetime) -> None:
        """Record ``what``."""
        assert since.tzinfo is not None
        self.said.append(what)


def test_a_miss_installs_links_and_measures_then_a_hit_installs_nothing(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """The second run of an unchanged program runs no tool; both link node_modules."""
    installer, project = (
        Installer(DependencyStore(tmp_path / "cache", 0)),
        make_project("nodejs", **FILES),
    )
    heard = Heard()
    with installer.prepared(project, node_bin.tools(), heard) as first:
        link = project.directory / "node_modules"
        assert link.is_symlink()
        assert (link / "left-pad").is_dir()
    assert [(r.kind, r.tool, r.hit) for r in first.records] == [("nodejs", "npm ci", False)]
    assert first.usage is not None
    assert first.usage.environments > 0
    assert heard.said == ["installing dependencies (npm ci)"]
    calls = len(node_bin.calls)
    with installer.prepared(project, node_bin.tools(), heard) as second:
        assert (project.directory / "node_modules" / "left-pad").is_dir()
    assert [(r.kind, r.hit) for r in second.records] == [("nodejs", True)]
    assert second.usage is None
    assert len(node_bin.calls) == calls


def test_a_lockfile_out_of_step_is_permanent_with_the_tools_words(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """The npm error ends the message; the failed install is recorded; nothing is kept."""
    node_bin.add("npm", OUT_OF_SYNC)
    store = DependencyStore(tmp_path / "cache", 0)
    with (
        pytest.raises(DependencyError) as raised,
        Installer(store).prepared(make_project("nodejs", **FILES), node_bin.tools(), Heard()),
    ):
        pass
    error = raised.value
    assert error.permanence is Permanence.PERMANENT
    assert error.message.startswith(
        "installing dependencies (npm ci) failed: npm EUSAGE: `npm ci` can only install"
    )
    assert "package.json and package-lock.json are in sync" in error.message
    assert error.record is not None
    assert (error.record.hit, error.record.succeeded) == (False, False)
    assert list((tmp_path / "cache" / "envs").iterdir()) == []


def test_an_unreachable_registry_is_transient(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """ECONNREFUSED: retried later."""
    node_bin.add("npm", REFUSED)
    installer = Installer(DependencyStore(tmp_path / "cache", 0))
    with (
        pytest.raises(DependencyError) as raised,
        installer.prepared(make_project("nodejs", **FILES), node_bin.tools(), Heard()),
    ):
        pass
    assert raised.value.permanence is Permanence.TRANSIENT


def test_a_virtualenv_link_outside_the_program_is_refused(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """``virtualenv: ../elsewhere`` cannot place a link outside the program's directory."""
    makes_venv = (
        'for last; do :; done; mkdir -p "$last/bin"; '
        'printf "#!/bin/sh\\nexit 0\\n" > "$last/bin/python"; chmod +x "$last/bin/python"'
    )
    fake_bin.add("python3", makes_venv, version="Python 3.11.7")
    project = make_project("python", "{virtualenv: ../elsewhere}", **{"requirements.txt": ""})
    with (
        pytest.raises(DependencyError) as raised,
        Installer(DependencyStore(tmp_path / "cache", 0)).prepared(
            project, fake_bin.tools(system=True), Heard()
        ),
    ):
        pass
    assert "inside the program's directory" in raised.value.message


def test_runtimes_without_dependencies_install_nothing(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """YAML (and dotnet, java…): no plan, no record, nothing linked."""
    installer = Installer(DependencyStore(tmp_path / "cache", 0))
    with installer.prepared(make_project("yaml"), fake_bin.tools(), Heard()) as prepared:
        assert prepared.plan is None
        assert prepared.records == []


def test_stop_interrupts_an_install(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """A stopped run interrupts the tool the way Ctrl-C does."""
    started = tmp_path / "started"
    node_bin.add("npm", f"touch {started}; exec sleep 60")
    stop = threading.Event()
    threading.Thread(target=lambda: _set_when(started, stop), daemon=True).start()
    with (
        pytest.raises(Exception, match="npm ci") as raised,
        Installer(DependencyStore(tmp_path / "cache", 0)).prepared(
            make_project("nodejs", **FILES), node_bin.tools(stop), Heard()
        ),
    ):
        pass
    assert type(raised.value).__name__ == "ToolStoppedError"


def _set_when(path: Path, event: threading.Event) -> None:
    while not path.exists():
        threading.Event().wait(0.05)
    event.set()


def test_the_run_environment_has_the_download_caches_and_a_compile_cache_per_owner(
    tmp_path: Path,
) -> None:
    """Every tool's cache is in the store; ts-node's is there too, one per Stack."""
    installer = Installer(DependencyStore(tmp_path / "store", 1 << 30))
    first, again = installer.environment("home-a\ndev\n"), installer.environment("home-a\ndev\n")
    other = installer.environment("home-b\ndev\n")
    downloads = tmp_path / "store" / "downloads"
    assert Path(first["npm_config_cache"]) == downloads / "npm"
    ts_node = Path(first["TS_NODE_CACHE_DIRECTORY"])
    assert ts_node.parent == downloads / "ts-node"
    assert again["TS_NODE_CACHE_DIRECTORY"] == str(ts_node), "stable: the next run finds it"
    assert other["TS_NODE_CACHE_DIRECTORY"] != str(ts_node), "Stacks never share one"
    assert "home-a" not in str(ts_node), "named by a digest, not by the owner's words"
