"""The nodejs runtime's install: the package manager the lockfile names, frozen installs."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workspace.runner.deps.conftest import FakeBin
from workspace.runner.deps import Tools, nodejs
from workspace.runner.deps.plan import InstallPlan
from workspace.runner.deps.types import DependencyError, Permanence
from workspace.runner.project import Project

PACKAGE = '{"name": "app", "dependencies": {"left-pad": "1.3.0"}}'


def install(project: Project, bin_: FakeBin, target: Path) -> InstallPlan:
    """Plan and run the install into ``target``; the plan."""
    plan = nodejs.plan(project, bin_.tools())
    assert plan is not None
    target.mkdir()
    plan.install(target)
    return plan


@pytest.mark.parametrize(
    ("lockfile", "tool"),
    [
        ("package-lock.json", "npm ci"),
        ("npm-shrinkwrap.json", "npm ci"),
        ("yarn.lock", "yarn install --frozen-lockfile"),
        ("pnpm-lock.yaml", "pnpm install --frozen-lockfile"),
    ],
)
def test_the_lockfile_names_the_package_manager_and_freezes_the_install(
    make_project: Callable[..., Project],
    node_bin: FakeBin,
    tmp_path: Path,
    lockfile: str,
    tool: str,
) -> None:
    """A package-lock.json means ``npm ci``; yarn and pnpm lockfiles their frozen installs."""
    project = make_project("nodejs", **{"package.json": PACKAGE, lockfile: "{}"})
    plan = install(project, node_bin, tmp_path / "env")
    assert plan.tool == tool
    assert node_bin.calls[-1] == tool
    assert (tmp_path / "env" / "package.json").read_text() == PACKAGE
    assert (tmp_path / "env" / lockfile).exists()
    links = plan.activation(tmp_path / "env").links
    assert links == {"node_modules": tmp_path / "env" / "node_modules"}


def test_without_a_lockfile_npm_installs_from_package_json(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """No lockfile: ``npm install``."""
    plan = install(make_project("nodejs", **{"package.json": PACKAGE}), node_bin, tmp_path / "e")
    assert plan.tool == "npm install"


def test_yarn_berry_lockfiles_install_immutably(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """A yarn 2+ lockfile (``__metadata``) installs with ``--immutable``."""
    project = make_project(
        "nodejs", **{"package.json": PACKAGE, "yarn.lock": "__metadata:\n  version: 8\n"}
    )
    assert install(project, node_bin, tmp_path / "e").tool == "yarn install --immutable"


def test_the_packagemanager_option_wins_over_the_lockfiles(
    make_project: Callable[..., Project], node_bin: FakeBin
) -> None:
    """``runtime.options.packagemanager: pnpm`` with only a package-lock: pnpm, unfrozen."""
    project = make_project(
        "nodejs", "{packagemanager: pnpm}", **{"package.json": PACKAGE, "package-lock.json": "{}"}
    )
    plan = nodejs.plan(project, node_bin.tools())
    assert plan is not None
    assert plan.tool == "pnpm install"


def test_an_unknown_package_manager_is_permanent(
    make_project: Callable[..., Project], node_bin: FakeBin
) -> None:
    """``packagemanager: bun`` names no supported tool: the message says which are."""
    project = make_project("nodejs", "{packagemanager: bun}", **{"package.json": PACKAGE})
    with pytest.raises(DependencyError) as raised:
        nodejs.plan(project, node_bin.tools())
    assert raised.value.permanence is Permanence.PERMANENT
    assert "npm, yarn, pnpm" in raised.value.message


def test_a_package_manager_the_image_lacks_is_permanent_and_named(
    make_project: Callable[..., Project], fake_bin: FakeBin
) -> None:
    """A yarn.lock on an image without yarn: the message names yarn and the ways out."""
    fake_bin.add("node")
    fake_bin.add("npm")
    project = make_project("nodejs", **{"package.json": PACKAGE, "yarn.lock": "x"})
    with pytest.raises(DependencyError) as raised:
        nodejs.plan(project, fake_bin.tools())
    assert raised.value.permanence is Permanence.PERMANENT
    assert "needs yarn" in raised.value.message
    assert "workspaceTemplate.spec.image" in raised.value.message


def test_the_key_follows_the_dependency_files_not_the_program(
    make_project: Callable[..., Project], node_bin: FakeBin
) -> None:
    """Editing index.ts keeps the environment; editing the lockfile makes a new one."""
    files = {"package.json": PACKAGE, "package-lock.json": "{}", "index.ts": "a"}
    project = make_project("nodejs", **files)
    first = nodejs.plan(project, node_bin.tools())
    (project.directory / "index.ts").write_text("b")
    same = nodejs.plan(project, node_bin.tools())
    (project.directory / "package-lock.json").write_text('{"v": 2}')
    changed = nodejs.plan(project, node_bin.tools())
    assert first is not None
    assert same is not None
    assert changed is not None
    assert first.key == same.key != changed.key
    node_bin.add("node", version="v22.0.0")
    upgraded = nodejs.plan(project, node_bin.tools())
    assert upgraded is not None
    assert upgraded.key != changed.key


def test_no_package_json_or_committed_node_modules_install_nothing(
    make_project: Callable[..., Project], node_bin: FakeBin
) -> None:
    """Nothing to install without package.json, or when node_modules is in the source."""
    assert nodejs.plan(make_project("nodejs", **{"index.js": ""}), node_bin.tools()) is None
    project = make_project("nodejs", **{"package.json": PACKAGE})
    (project.directory / "node_modules").mkdir()
    assert nodejs.plan(project, node_bin.tools()) is None


def test_pnpm_keeps_its_store_beside_the_other_download_caches(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """The pnpm store is given as ``--store-dir`` (npm warns about ``npm_config_store_dir``)."""
    project = make_project("nodejs", **{"package.json": PACKAGE, "pnpm-lock.yaml": "x"})
    cache = tmp_path / "cache" / "downloads" / "npm"
    tools = node_bin.tools()
    tools = Tools({**tools.env, "npm_config_cache": str(cache)}, tools.stop, tools.grace)
    plan = nodejs.plan(project, tools)
    assert plan is not None
    assert plan.tool == "pnpm install --frozen-lockfile"
    (tmp_path / "env").mkdir()
    plan.install(tmp_path / "env")
    store = tmp_path / "cache" / "downloads" / "pnpm"
    assert node_bin.calls[-1] == f"pnpm install --frozen-lockfile --store-dir {store}"


def test_a_package_managers_own_package_json_gives_its_version_without_running_it(
    make_project: Callable[..., Project], node_bin: FakeBin, tmp_path: Path
) -> None:
    """A manager linked to its package's script: the key has package.json's version.

    It is not asked (no ``--version`` call); a script of another package, or of none, is.
    """
    project = make_project("nodejs", **{"package.json": PACKAGE, "package-lock.json": "{}"})
    package = tmp_path / "lib" / "node_modules" / "npm"
    (package / "bin").mkdir(parents=True)
    manifest = package / "package.json"
    manifest.write_text('{"name": "npm", "version": "10.0.0"}')
    script = node_bin.directory / "npm"
    script.rename(package / "bin" / "npm-cli.js")
    script.symlink_to(package / "bin" / "npm-cli.js")
    first = nodejs.plan(project, node_bin.tools())
    manifest.write_text('{"name": "npm", "version": "11.0.0"}')
    upgraded = nodejs.plan(project, node_bin.tools())
    assert first is not None
    assert upgraded is not None
    assert first.key != upgraded.key
    assert not [call for call in node_bin.calls if call.startswith("npm --version")]
    assert nodejs.packaged_version(str(script), "npm") == "11.0.0"
    assert nodejs.packaged_version(str(script), "pnpm") is None
    assert nodejs.packaged_version(str(node_bin.directory / "node"), "node") is None


def test_the_real_npms_package_json_says_what_its_version_flag_prints() -> None:
    """The key of a real npm is the same read or asked: the installed npm says so."""
    npm = shutil.which("npm")
    assert npm is not None, "the test machine has npm"
    printed = subprocess.run(
        [npm, "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert nodejs.packaged_version(npm, "npm") == printed
