"""The python runtime's install: a virtualenv of the program's own, by its toolchain."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workspace.runner.deps.conftest import FakeBin
from workspace.runner.deps import python
from workspace.runner.deps.types import DependencyError, Permanence
from workspace.runner.project import Project

VENV_LAST_ARG = 'if [ "$1" = venv ]; then for last; do :; done; mkdir -p "$last/bin"; fi'


def tiny_wheel(directory: Path) -> Path:
    """A wheel of a module ``tiny`` (``VALUE = 42``), installable offline."""
    files = {
        "tiny.py": b"VALUE = 42\n",
        "tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        "tiny-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("tiny-1.0.dist-info/RECORD,,")
    wheel = directory / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("tiny-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_pip_makes_a_virtualenv_from_requirements_txt(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """A real venv with pip, the requirements installed, used through the variables."""
    wheel = tiny_wheel(tmp_path)
    project = make_project(
        "python", "{virtualenv: venv}", **{"requirements.txt": f"--no-index\n{wheel}\n"}
    )
    tools = fake_bin.tools(system=True)
    plan = python.plan(project, tools)
    assert plan is not None
    assert plan.tool == "pip install -r requirements.txt"
    target = tmp_path / "env"
    target.mkdir()
    plan.install(target)
    activation = plan.activation(target)
    interpreter = activation.env["PULUMI_PYTHON_CMD"]
    assert interpreter == str(target / "venv" / "bin" / "python")
    assert activation.env["VIRTUAL_ENV"] == str(target / "venv")
    assert activation.links == {"venv": target / "venv"}
    assert activation.path == (str(target / "venv" / "bin"),)
    check = [interpreter, "-c", "import tiny, pip; print(tiny.VALUE)"]
    assert subprocess.run(check, capture_output=True, text=True, check=True).stdout == "42\n"


def test_pyproject_dependencies_install_with_pip(
    make_project: Callable[..., Project], fake_bin: FakeBin
) -> None:
    """No requirements.txt: pip installs ``[project].dependencies`` of pyproject.toml."""
    pyproject = '[project]\nname = "app"\ndependencies = ["pulumi>=3", "pulumi-random"]\n'
    project = make_project("python", **{"pyproject.toml": pyproject})
    plan = python.plan(project, fake_bin.tools(system=True))
    assert plan is not None
    assert plan.tool == "pip install (pyproject.toml dependencies)"


def test_uv_syncs_a_locked_project_into_its_own_seeded_venv(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """``toolchain: uv`` with uv.lock: ``uv venv --seed`` (pip inside), ``uv sync --frozen``."""
    fake_bin.add("uv", VENV_LAST_ARG + '\nenv | grep UV_PROJECT_ENVIRONMENT >> "$HOME/env" || true')
    files = {"pyproject.toml": '[project]\nname = "app"\n', "uv.lock": "version = 1\n"}
    project = make_project("python", "{toolchain: uv}", **files)
    plan = python.plan(project, fake_bin.tools(system=True))
    assert plan is not None
    assert plan.tool == "uv sync --frozen"
    target = tmp_path / "env"
    target.mkdir()
    plan.install(target)
    venv_call, sync_call = fake_bin.calls[-2:]
    assert venv_call.startswith("uv venv --quiet --seed --python ")
    assert venv_call.endswith(str(target / "venv"))
    assert sync_call == "uv sync --no-install-project --frozen"
    assert (fake_bin.directory / "env").read_text() == f"UV_PROJECT_ENVIRONMENT={target}/venv\n"


def test_uv_installs_requirements_into_its_venv(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """``toolchain: uv`` with requirements.txt: ``uv pip install`` into the seeded venv."""
    fake_bin.add("uv", VENV_LAST_ARG)
    project = make_project("python", "{toolchain: uv}", **{"requirements.txt": "pulumi\n"})
    plan = python.plan(project, fake_bin.tools(system=True))
    assert plan is not None
    target = tmp_path / "env"
    target.mkdir()
    plan.install(target)
    python_path = target / "venv" / "bin" / "python"
    assert fake_bin.calls[-1] == f"uv pip install --python {python_path} -r requirements.txt"


def test_poetry_installs_into_the_venv_it_is_given(
    make_project: Callable[..., Project], fake_bin: FakeBin, tmp_path: Path
) -> None:
    """``toolchain: poetry``: a venv made first, then ``poetry install`` with VIRTUAL_ENV."""
    fake_bin.add(
        "poetry", 'env | grep -E "^(VIRTUAL_ENV|POETRY_VIRTUALENVS_CREATE)=" > "$HOME/env"'
    )
    files = {"pyproject.toml": "[tool.poetry]\n", "poetry.lock": "x"}
    project = make_project("python", "{toolchain: poetry}", **files)
    plan = python.plan(project, fake_bin.tools(system=True))
    assert plan is not None
    target = tmp_path / "env"
    target.mkdir()
    plan.install(target)
    assert fake_bin.calls[-1] == "poetry install --no-root --no-interaction"
    seen = set((fake_bin.directory / "env").read_text().splitlines())
    assert seen == {f"VIRTUAL_ENV={target}/venv", "POETRY_VIRTUALENVS_CREATE=false"}
    assert (target / "venv" / "bin" / "python").exists()


@pytest.mark.parametrize(
    ("options", "files", "words"),
    [
        ("{toolchain: conda}", {"requirements.txt": "x"}, "toolchain 'conda' is not supported"),
        ("{toolchain: uv}", {"requirements.txt": "x"}, "needs uv"),
        ("{toolchain: poetry}", {"pyproject.toml": ""}, "needs poetry"),
        ("", {"pyproject.toml": "[project"}, "cannot read pyproject.toml"),
        ("", {"pyproject.toml": "[project]\ndependencies = 3\n"}, "must be a list"),
    ],
)
def test_what_cannot_work_is_permanent_and_says_why(
    make_project: Callable[..., Project],
    fake_bin: FakeBin,
    options: str,
    files: dict[str, str],
    words: str,
) -> None:
    """Unknown toolchains, missing tools and broken pyproject files stall, naming the fix."""
    fake_bin.add("python3", version="Python 3.11.7")  # only the toolchain may be missing
    project = make_project("python", options, **{k.replace(".", "__"): v for k, v in files.items()})
    with pytest.raises(DependencyError) as raised:
        python.plan(project, fake_bin.tools())
    assert raised.value.permanence is Permanence.PERMANENT
    assert words in raised.value.message


def test_no_dependency_file_installs_nothing(
    make_project: Callable[..., Project], fake_bin: FakeBin
) -> None:
    """Neither requirements.txt nor pyproject.toml: the image's interpreter, as before."""
    assert (
        python.plan(make_project("python", **{"__main__.py": ""}), fake_bin.tools(system=True))
        is None
    )
