"""The ``nodejs`` runtime: ``node_modules`` installed by the program's package manager.

The package manager is the one ``runtime.options.packagemanager`` names, else the one
whose lockfile the program has (npm, yarn, pnpm), else npm. With a lockfile the install is
frozen (``npm ci``, ``yarn install --frozen-lockfile`` or ``--immutable``, ``pnpm install
--frozen-lockfile``); without one it is ``npm install`` from ``package.json``. The install
runs in the environment's own directory on copies of ``package.json``, the lockfile and
the package manager's settings files (which the key hashes), and the program's directory
gets a ``node_modules`` symlink to the result. A program that commits its own
``node_modules`` installs nothing.

The key holds the versions of node and of the package manager. A package manager that is
a script of its own package (npm's ``bin/npm-cli.js``, a global pnpm or yarn) has the
version its ``package.json`` says, as ``--version`` prints it, read without starting it
(``npm --version`` takes 0.1 s, paid by every run pod); any other is asked.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from workspace.runner.deps.downloads import pnpm_store
from workspace.runner.deps.plan import InstallPlan, content_key, present
from workspace.runner.deps.tools import Tools
from workspace.runner.deps.types import Activation, DependencyError, Permanence
from workspace.runner.project import Project

MANIFEST = "package.json"
LOCKFILES = {
    "npm": ("npm-shrinkwrap.json", "package-lock.json"),
    "yarn": ("yarn.lock",),
    "pnpm": ("pnpm-lock.yaml",),
}
SETTINGS = (".npmrc", ".yarnrc", ".yarnrc.yml", "pnpm-workspace.yaml", ".pnpmfile.cjs")
MODULES = "node_modules"
PACKAGE_DEPTH = 2  # directories above a package manager's script its package.json may be in


def plan(project: Project, tools: Tools) -> InstallPlan | None:
    """The install of the program's ``node_modules``; None when there is nothing to install.

    Raises ``DependencyError`` (permanent) for an unknown package manager or one that is
    not on ``PATH``.
    """
    directory = project.directory
    vendored = directory / MODULES
    if not (directory / MANIFEST).is_file() or (vendored.is_dir() and not vendored.is_symlink()):
        return None
    manager = _manager(project)
    lockfile = next(iter(present(directory, LOCKFILES[manager])), None)
    node, binary = _binary(tools, "node"), _binary(tools, manager)
    argv = [binary, *_arguments(manager, lockfile)]
    tool = " ".join([manager, *argv[1:3]])
    store = pnpm_store(tools.env) if manager == "pnpm" else None
    if store is not None:
        argv += ["--store-dir", str(store)]
    inputs = [
        directory / MANIFEST,
        *([lockfile] if lockfile else []),
        *present(directory, SETTINGS),
    ]
    versions = [
        tools.version(node),
        packaged_version(binary, manager) or tools.version(binary),
        manager,
    ]
    key = content_key("nodejs", tool, versions, inputs)

    def install(target: Path) -> None:
        for source in inputs:
            shutil.copyfile(source, target / source.name)
        tools.run(argv, target)
        if not (target / MODULES).is_dir():
            message = f"{tool} made no {MODULES} directory (yarn Plug'n'Play is not supported)"
            raise DependencyError(message, Permanence.PERMANENT)

    def activation(target: Path) -> Activation:
        return Activation(links={MODULES: target / MODULES})

    return InstallPlan("nodejs", tool, key, install, activation)


def packaged_version(binary: str, name: str) -> str | None:
    """The version in the ``package.json`` of package ``name`` that ``binary`` is a script of.

    None when ``binary`` (symlinks resolved) is not in such a package within
    ``PACKAGE_DEPTH`` directories of it, or its ``package.json`` cannot be read.
    """
    for directory in list(Path(os.path.realpath(binary)).parents)[:PACKAGE_DEPTH]:
        manifest = directory / MANIFEST
        if manifest.is_file():
            try:
                found = json.loads(manifest.read_text())
            except (OSError, ValueError):
                return None
            is_it = isinstance(found, dict) and found.get("name") == name
            version = found.get("version") if is_it else None
            return version if isinstance(version, str) and version else None
    return None


def _manager(project: Project) -> str:
    named = project.options.get("packagemanager")
    if named is not None:
        if named not in LOCKFILES:
            message = (
                f"runtime.options.packagemanager {named!r} is not supported here; "
                f"use one of {', '.join(LOCKFILES)}"
            )
            raise DependencyError(message, Permanence.PERMANENT)
        return str(named)
    for manager, lockfiles in LOCKFILES.items():
        if present(project.directory, lockfiles):
            return manager
    return "npm"


def _arguments(manager: str, lockfile: Path | None) -> list[str]:
    if manager == "npm":
        return ["ci"] if lockfile else ["install"]
    if manager == "pnpm":
        return ["install", "--frozen-lockfile"] if lockfile else ["install"]
    if lockfile is not None and lockfile.read_bytes().lstrip().startswith(b"__metadata"):
        return ["install", "--immutable"]  # yarn 2 and later
    return ["install", "--frozen-lockfile"] if lockfile else ["install"]


def _binary(tools: Tools, name: str) -> str:
    found = tools.which(name)
    if found is None:
        message = (
            f"the nodejs runtime needs {name}, which this image does not have on PATH; "
            "use an image that has it (the Stack's workspaceTemplate.spec.image)"
        )
        if name in ("yarn", "pnpm"):
            message += f", or npm with a package-lock.json instead of the {name} lockfile"
        raise DependencyError(message, Permanence.PERMANENT)
    return found
