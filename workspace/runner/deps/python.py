"""The ``python`` runtime: a virtualenv of the program's own, never the operator's.

The toolchain is ``runtime.options.toolchain`` (``pip``, the default, ``uv`` or
``poetry``); the dependencies come from ``requirements.txt``, else ``pyproject.toml``
(``uv.lock`` / ``poetry.lock`` when present). The virtualenv lives in the environment's
directory (made with ``python3 -m venv``, or ``uv venv --seed``; pip is in it, since the
language host runs ``python -m pip list`` to find the program's plugins), and the program
uses it through ``PULUMI_PYTHON_CMD``, ``VIRTUAL_ENV`` and ``PATH``, and through a
symlink named as ``runtime.options.virtualenv`` says when it says so. A program with
neither file installs nothing: it runs with the image's interpreter and its packages.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

from workspace.runner.deps.plan import InstallPlan, content_key, present
from workspace.runner.deps.tools import Tools
from workspace.runner.deps.types import Activation, DependencyError, Permanence
from workspace.runner.project import Project

REQUIREMENTS = "requirements.txt"
PYPROJECT = "pyproject.toml"
TOOLCHAINS = ("pip", "uv", "poetry")
VENV = "venv"


def plan(project: Project, tools: Tools) -> InstallPlan | None:
    """The install of the program's virtualenv; None when it declares no dependencies.

    Raises ``DependencyError`` (permanent) for an unknown toolchain, a toolchain that is
    not on ``PATH``, a ``pyproject.toml`` that does not parse, or poetry without one.
    """
    directory = project.directory
    toolchain = str(project.options.get("toolchain") or "pip")
    if toolchain not in TOOLCHAINS:
        message = (
            f"runtime.options.toolchain {toolchain!r} is not supported; "
            f"use one of {', '.join(TOOLCHAINS)}"
        )
        raise DependencyError(message, Permanence.PERMANENT)
    python = _binary(tools, "python3", toolchain)
    recipe = RECIPES[toolchain](directory, tools, python)
    if recipe is None:
        return None
    tool, inputs, steps = recipe
    versions = [tools.version(python), *_tool_versions(tools, toolchain)]
    key = content_key("python", tool, versions, inputs)

    def install(target: Path) -> None:
        for argv, cwd, extra in steps(target / VENV):
            tools.run(argv, cwd, extra)

    def activation(target: Path) -> Activation:
        venv = target / VENV
        named = project.options.get("virtualenv")
        links = {str(named): venv} if isinstance(named, str) and named else {}
        env = {"PULUMI_PYTHON_CMD": str(venv / "bin" / "python"), "VIRTUAL_ENV": str(venv)}
        return Activation(links=links, env=env, path=(str(venv / "bin"),))

    return InstallPlan("python", tool, key, install, activation)


Step = tuple[list[str], Path, dict[str, str]]
Recipe = tuple[str, list[Path], Callable[[Path], list[Step]]]


def _pip(directory: Path, tools: Tools, python: str) -> Recipe | None:
    del tools
    pip_install = ["-m", "pip", "install", "--no-input"]
    if (directory / REQUIREMENTS).is_file():

        def requirements(venv: Path) -> list[Step]:
            py = str(venv / "bin" / "python")
            return [
                ([python, "-m", "venv", str(venv)], directory, {}),
                ([py, *pip_install, "-r", REQUIREMENTS], directory, {}),
            ]

        return f"pip install -r {REQUIREMENTS}", [directory / REQUIREMENTS], requirements
    dependencies = _project_dependencies(directory)
    if not dependencies:
        return None

    def listed(venv: Path) -> list[Step]:
        py = str(venv / "bin" / "python")
        return [
            ([python, "-m", "venv", str(venv)], directory, {}),
            ([py, *pip_install, "--", *dependencies], directory, {}),
        ]

    return f"pip install ({PYPROJECT} dependencies)", [directory / PYPROJECT], listed


def _uv(directory: Path, tools: Tools, python: str) -> Recipe | None:
    uv = _binary(tools, "uv", "uv")
    seeded = [uv, "venv", "--quiet", "--seed", "--python", python]
    if (directory / "uv.lock").is_file() or (
        not (directory / REQUIREMENTS).is_file() and (directory / PYPROJECT).is_file()
    ):
        locked = (directory / "uv.lock").is_file()
        sync = [uv, "sync", "--no-install-project", *(["--frozen"] if locked else [])]

        def synced(venv: Path) -> list[Step]:
            extra = {"UV_PROJECT_ENVIRONMENT": str(venv)}
            return [([*seeded, str(venv)], directory, {}), (sync, directory, extra)]

        inputs = present(directory, (PYPROJECT, "uv.lock"))
        return " ".join(["uv", *sync[1:2], *(["--frozen"] if locked else [])]), inputs, synced
    if not (directory / REQUIREMENTS).is_file():
        return None

    def requirements(venv: Path) -> list[Step]:
        py = str(venv / "bin" / "python")
        install = [uv, "pip", "install", "--python", py, "-r", REQUIREMENTS]
        return [([*seeded, str(venv)], directory, {}), (install, directory, {})]

    return f"uv pip install -r {REQUIREMENTS}", [directory / REQUIREMENTS], requirements


def _poetry(directory: Path, tools: Tools, python: str) -> Recipe | None:
    poetry = _binary(tools, "poetry", "poetry")
    if not (directory / PYPROJECT).is_file():
        message = f"toolchain poetry needs a {PYPROJECT} in the program's directory"
        raise DependencyError(message, Permanence.PERMANENT)
    command = [poetry, "install", "--no-root", "--no-interaction"]

    def installed(venv: Path) -> list[Step]:
        # Poetry installs into the virtualenv that VIRTUAL_ENV names.
        extra = {"VIRTUAL_ENV": str(venv), "POETRY_VIRTUALENVS_CREATE": "false"}
        return [([python, "-m", "venv", str(venv)], directory, {}), (command, directory, extra)]

    return "poetry install", present(directory, (PYPROJECT, "poetry.lock")), installed


RECIPES: dict[str, Callable[[Path, Tools, str], Recipe | None]] = {
    "pip": _pip,
    "uv": _uv,
    "poetry": _poetry,
}


def _project_dependencies(directory: Path) -> list[str]:
    """``[project].dependencies`` of ``pyproject.toml``; [] when it has none or no file."""
    path = directory / PYPROJECT
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        message = f"cannot read {PYPROJECT}: {err}"
        raise DependencyError(message, Permanence.PERMANENT) from err
    dependencies = (data.get("project") or {}).get("dependencies") or []
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        message = f"{PYPROJECT}: project.dependencies must be a list of requirement strings"
        raise DependencyError(message, Permanence.PERMANENT)
    return list(dependencies)


def _tool_versions(tools: Tools, toolchain: str) -> list[str]:
    binary = tools.which(toolchain) if toolchain != "pip" else None
    return [toolchain, tools.version(binary) if binary else ""]


def _binary(tools: Tools, name: str, toolchain: str) -> str:
    found = tools.which(name)
    if found is None:
        message = (
            f"the python runtime with toolchain {toolchain} needs {name}, which this image "
            "does not have on PATH; use an image that has it (the Stack's "
            "workspaceTemplate.spec.image)"
        )
        if toolchain != "pip":
            message += " or runtime.options.toolchain: pip"
        raise DependencyError(message, Permanence.PERMANENT)
    return found
