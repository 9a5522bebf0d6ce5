"""The ``go`` runtime: the program's modules downloaded into the shared module cache.

The Go language host builds the program itself at every run; what can be installed
beforehand is its modules (``go mod download``, keyed on ``go.mod`` and ``go.sum``). The
module and build caches are the store's download caches (``GOMODCACHE``, ``GOCACHE``), so
a later build of an unchanged program only links. Needs a Go toolchain in the image.
"""

from __future__ import annotations

from pathlib import Path

from workspace.runner.deps.plan import InstallPlan, content_key, present
from workspace.runner.deps.tools import Tools
from workspace.runner.deps.types import Activation, DependencyError, Permanence
from workspace.runner.project import Project

TOOL = "go mod download"


def plan(project: Project, tools: Tools) -> InstallPlan | None:
    """The download of the program's modules; None without a ``go.mod``.

    Raises ``DependencyError`` (permanent) when there is no ``go`` on ``PATH``.
    """
    directory = project.directory
    if not (directory / "go.mod").is_file():
        return None
    go = tools.which("go")
    if go is None:
        message = (
            "the go runtime needs a Go toolchain, which this image does not have on PATH; "
            "use an image that has one (the Stack's workspaceTemplate.spec.image)"
        )
        raise DependencyError(message, Permanence.PERMANENT)
    inputs = present(directory, ("go.mod", "go.sum"))
    key = content_key("go", TOOL, [tools.version(go, "version")], inputs)

    def install(target: Path) -> None:
        del target  # the modules go to the shared module cache
        tools.run([go, "mod", "download"], directory)

    def activation(target: Path) -> Activation:
        del target
        return Activation()

    return InstallPlan("go", TOOL, key, install, activation)
