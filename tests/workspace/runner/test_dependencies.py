"""Programs' own dependencies with the real CLI, language hosts, npm and pip.

Each test copies a test program with dependencies (``node-outputs``: TypeScript with a
``package-lock.json``; ``python-outputs``: a ``requirements.txt``; ``yaml-outputs``: none)
and runs it through ``LocalRunner`` on the test bed's ``file://`` backend. The packages come
from the public npm registry and PyPI; the dependency cache is shared by the session's
tests (it is keyed by content), so each program installs once per session.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.control_plane import ControlPlane
from testbed.plugin_mirror import PluginMirror
from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS
from tests.workspace.runner.support import STACK, ProgressLog, succeeded
from workspace.runner import ErrorKind, LocalRunner, Outcome, UpdateRequest
from workspace.runner.deps import DependencyStore

pytestmark = pytest.mark.pulumi


@pytest.fixture(scope="session")
def dependency_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's dependency cache (environments and downloads)."""
    return tmp_path_factory.mktemp("dependency-cache")


@pytest.fixture
def runner(pulumi_env: PulumiEnv, dependency_cache: Path) -> LocalRunner:
    """A runner on the test bed's CLI that installs into the session's cache."""
    return LocalRunner(pulumi_env.command(), pulumi_env.home, cache=dependency_cache)


@pytest.fixture
def copy_program(tmp_path: Path) -> Callable[[str], Path]:
    """A private copy of a test program."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(PROGRAMS / name, target)
        return target

    return copy


def request_for(pulumi_env: PulumiEnv, work_dir: Path, value: str = "one") -> UpdateRequest:
    """An ``up`` of the ``dev`` stack of ``work_dir`` with config ``value``."""
    return UpdateRequest(
        work_dir=work_dir,
        stack=STACK,
        env=pulumi_env.env,
        config={"value": value},
        pulumi_home=work_dir.parent / f"{work_dir.name}-home",
    )


def up(runner: LocalRunner, request: UpdateRequest) -> tuple[Outcome, ProgressLog]:
    """Run ``up``; the outcome and the progress it reported."""
    progress = ProgressLog()
    return runner.run(request, on_progress=progress, stop=threading.Event()), progress


def steps(outcome: Outcome) -> list[tuple[str, bool]]:
    """``(kind, hit)`` of each install step of the outcome."""
    return [(record.kind, record.hit) for record in outcome.installs]


def test_a_typescript_program_gets_its_node_modules_once(
    runner: LocalRunner,
    pulumi_env: PulumiEnv,
    copy_program: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """``npm ci`` from the lockfile, the program runs with it; the next run installs nothing.

    What ts-node compiled is kept in the store (``TS_NODE_CACHE_DIRECTORY``), unless the
    request sets that variable itself.
    """
    program = copy_program("node-outputs")
    first, progress = up(runner, request_for(pulumi_env, program))
    assert succeeded(first)
    assert first.outputs["value"] == "one"
    assert (program / "node_modules").is_symlink()
    modules = Path(first.outputs["modules"]).resolve()
    assert runner.dependency_store.root in modules.parents
    installing = [p for p in progress.reports if p.step == "install"]
    assert installing[0].current == "installing dependencies (npm ci)"
    assert installing[0].started is not None
    assert steps(first)[0][0] == "nodejs"
    compiled = list((runner.dependency_store.root / "downloads" / "ts-node").rglob("*.js"))
    assert compiled, "ts-node keeps what it compiled in the store, not in a temporary directory"
    second, progress = up(runner, request_for(pulumi_env, program, "two"))
    assert succeeded(second)
    assert second.outputs["value"] == "two"
    assert steps(second) == [("nodejs", True), ("plugins", True)]
    assert not [p for p in progress.reports if p.step == "install"]
    own = tmp_path / "own-ts-node-cache"
    request = request_for(pulumi_env, program, "three")
    mine = dataclasses.replace(request, env={**request.env, "TS_NODE_CACHE_DIRECTORY": str(own)})
    assert succeeded(up(runner, mine)[0])
    assert list(own.rglob("*.js")), "the Stack's own setting wins"


def test_a_python_program_gets_a_virtualenv_of_its_own(
    runner: LocalRunner, pulumi_env: PulumiEnv, copy_program: Callable[[str], Path]
) -> None:
    """The program's interpreter is a venv in the cache, never the operator's; then a hit."""
    program = copy_program("python-outputs")
    first, _ = up(runner, request_for(pulumi_env, program))
    assert succeeded(first)
    prefix = Path(first.outputs["prefix"])
    assert prefix.name == "venv"
    assert runner.dependency_store.root in prefix.resolve().parents
    assert (program / "venv").resolve() == prefix.resolve()  # runtime.options.virtualenv
    second, _ = up(runner, request_for(pulumi_env, program, "two"))
    assert succeeded(second)
    assert ("python", True) in steps(second)
    assert second.outputs["value"] == "two"


def test_a_yaml_program_needs_only_its_plugins(
    runner: LocalRunner, pulumi_env: PulumiEnv, copy_program: Callable[[str], Path]
) -> None:
    """No dependency to install; the plugin step runs once, then is skipped."""
    program = copy_program("yaml-outputs")
    first, _ = up(runner, request_for(pulumi_env, program))
    assert succeeded(first)
    assert first.outputs == {"value": "one"}
    assert steps(first) == [("plugins", False)]
    second, _ = up(runner, request_for(pulumi_env, program, "two"))
    assert succeeded(second)
    assert steps(second) == [("plugins", True)]


def test_a_lockfile_out_of_step_stalls_with_npms_words(
    runner: LocalRunner, pulumi_env: PulumiEnv, copy_program: Callable[[str], Path]
) -> None:
    """A dependency added to package.json but not to the lockfile: npm ci refuses, for good."""
    program = copy_program("node-outputs")
    manifest = json.loads((program / "package.json").read_text())
    manifest["dependencies"]["left-pad"] = "1.3.0"
    (program / "package.json").write_text(json.dumps(manifest))
    outcome, _ = up(runner, request_for(pulumi_env, program))
    assert outcome.error is ErrorKind.DEPENDENCIES_INVALID
    assert outcome.message.startswith("installing dependencies (npm ci) failed: ")
    assert "package-lock.json" in outcome.message
    assert [(r.kind, r.hit, r.succeeded) for r in outcome.installs] == [("nodejs", False, False)]


def test_an_unreachable_registry_is_retried(
    pulumi_env: PulumiEnv, copy_program: Callable[[str], Path], tmp_path: Path
) -> None:
    """A registry that refuses connections: a transient failure, retried with backoff."""
    runner = LocalRunner(pulumi_env.command(), pulumi_env.home, cache=tmp_path / "cold")
    program = copy_program("node-outputs")
    request = request_for(pulumi_env, program)
    unreachable = {
        "NPM_CONFIG_REGISTRY": "http://127.0.0.1:9/",
        "npm_config_cache": str(tmp_path / "empty-npm-cache"),  # nothing to fall back on
        "npm_config_fetch_retries": "0",
    }
    outcome, _ = up(runner, dataclasses.replace(request, env={**request.env, **unreachable}))
    assert outcome.error is ErrorKind.DEPENDENCIES_FAILED
    assert "ECONNREFUSED" in outcome.message


def test_the_store_is_bounded(
    pulumi_env: PulumiEnv, copy_program: Callable[[str], Path], tmp_path: Path
) -> None:
    """A cache smaller than one environment keeps only the one in use, and says its size."""
    runner = LocalRunner(
        pulumi_env.command(), pulumi_env.home, cache=tmp_path / "small", cache_limit=1
    )
    outcome, _ = up(runner, request_for(pulumi_env, copy_program("python-outputs")))
    assert succeeded(outcome)
    assert outcome.cache_bytes["environments"] > 0
    store = DependencyStore(tmp_path / "small", 1)
    assert store.usage(measure_downloads=False).environments == outcome.cache_bytes["environments"]


@pytest.fixture
def mirrored(pulumi_env: PulumiEnv, plugin_mirror: PluginMirror, tmp_path: Path) -> LocalRunner:
    """A runner whose plugins come from ``plugin_mirror``, into an empty plugin store."""
    return LocalRunner(
        pulumi_env.command(), tmp_path / "plugins-home", plugin_mirror=plugin_mirror.url
    )


@pytest.mark.integration
def test_a_missing_plugin_is_installed_from_the_mirror(
    mirrored: LocalRunner,
    pulumi_env: PulumiEnv,
    copy_program: Callable[[str], Path],
    plugin_mirror: PluginMirror,
    control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A YAML program's provider comes from ``plugin_mirror`` once; the next run skips it.

    The CLI leaves each plugin it downloads as a tarball in its TMPDIR: the operation's
    own temporary directory, gone with it, not the operator's.
    """
    runner = mirrored
    operator_tmp = tmp_path / "operator-tmp"
    operator_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(operator_tmp))  # what the CLI would inherit
    monkeypatch.setattr(tempfile, "tempdir", str(operator_tmp))  # where the operator's go
    program = copy_program("k8s-yaml")
    before = len(plugin_mirror.downloads())
    request = dataclasses.replace(
        request_for(pulumi_env, program),
        config={"namespace": "plugins-test", "content": "x"},
        env={**pulumi_env.env, "KUBECONFIG": str(control_plane.kubeconfig)},
        preview=True,
    )
    first, progress = up(runner, request)
    assert succeeded(first)
    assert ("plugins", False) in steps(first)
    assert len(plugin_mirror.downloads()) == before + 1
    assert "installing plugins (pulumi install)" in {p.current for p in progress.reports}
    assert (tmp_path / "plugins-home" / "plugins" / "resource-kubernetes-v4.25.0").is_dir()
    assert list(operator_tmp.iterdir()) == []
    second, _ = up(runner, request)
    assert succeeded(second)
    assert ("plugins", True) in steps(second)
    assert len(plugin_mirror.downloads()) == before + 1


def test_a_plugin_version_the_mirror_lacks_stalls_naming_it(
    mirrored: LocalRunner, pulumi_env: PulumiEnv, copy_program: Callable[[str], Path]
) -> None:
    """The provider at 4.24.0 is not on the mirror: the message names the plugin and version."""
    program = copy_program("k8s-yaml")
    project = program / "Pulumi.yaml"
    project.write_text(project.read_text().replace("version: 4.25.0", "version: 4.24.0"))
    outcome, _ = up(mirrored, request_for(pulumi_env, program))
    assert outcome.error is ErrorKind.DEPENDENCIES_INVALID
    assert outcome.message.startswith("installing plugins (pulumi install) failed: ")
    assert "kubernetes-4.24.0: 404" in outcome.message.splitlines()[0]
