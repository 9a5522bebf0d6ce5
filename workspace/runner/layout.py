"""Laying a run's program source out: one function for every runner.

Role: the only place that dispatches on the kind of a ``ProgramSource``. The local runner's
reconciler lays the source out in the operator before the run; a run pod's agent (and the
agent runner's) lays it out in the run's workspace; both call ``lay_out`` and then
``program_in``, through a ``SourceLayer`` (the real one is ``DIRECT``; the reconciler's is
its own collaborator, which tests replace).

Failures: ``SourceError`` from laying out (classified by ``workspace.source``),
``ProgramDirError`` from ``program_in`` (naming the Stack field that gave the directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from workspace import source as sources
from workspace.runner.document import FluxArtifact, GitCheckout, ProgramSource, RenderedProject
from workspace.source import GitCredentials


class SourceLayer(Protocol):
    """What laying a source out needs of ``workspace.source``."""

    def checkout(
        self,
        url: str,
        work_dir: Path,
        commit: str,
        credentials: GitCredentials | None,
        *,
        shallow: bool = True,
    ) -> None:
        """Make ``work_dir`` a working tree of ``url`` at ``commit`` (``SourceError``)."""
        ...

    def fetch_artifact(self, url: str, digest: str, work_dir: Path) -> None:
        """Make ``work_dir`` the verified, unpacked Flux artifact (``SourceError``)."""
        ...

    def write_project(self, work_dir: Path, project: str) -> None:
        """Make ``work_dir`` a directory holding only ``Pulumi.yaml`` with ``project``."""
        ...

    def program_dir(self, checkout: Path, repo_dir: str | None, field: str = ...) -> Path:
        """``repo_dir`` inside ``checkout`` (``ProgramDirError``, naming ``field``, if not)."""
        ...


class DirectLayer:
    """``SourceLayer`` through ``workspace.source`` itself (git and HTTP, for real)."""

    def checkout(
        self,
        url: str,
        work_dir: Path,
        commit: str,
        credentials: GitCredentials | None,
        *,
        shallow: bool = True,
    ) -> None:
        """See ``SourceLayer``."""
        sources.checkout(url, work_dir, commit=commit, credentials=credentials, shallow=shallow)

    def fetch_artifact(self, url: str, digest: str, work_dir: Path) -> None:
        """See ``SourceLayer``."""
        sources.fetch_artifact(url, digest, work_dir)

    def write_project(self, work_dir: Path, project: str) -> None:
        """See ``SourceLayer``."""
        sources.write_project(work_dir, project)

    def program_dir(
        self, checkout: Path, repo_dir: str | None, field: str = "spec.repoDir"
    ) -> Path:
        """See ``SourceLayer``."""
        return sources.program_dir(checkout, repo_dir, field)


DIRECT = DirectLayer()


def lay_out(
    source: ProgramSource,
    target: Path,
    credentials: GitCredentials | None,
    layer: SourceLayer = DIRECT,
) -> None:
    """Make ``target`` the program's source: a checkout, a verified artifact or a project.

    Raises:
        SourceError: the source could not be fetched (see ``workspace.source``).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(source, RenderedProject):
        layer.write_project(target, source.project)
    elif isinstance(source, FluxArtifact):
        layer.fetch_artifact(source.url, source.digest, target)
    else:
        layer.checkout(source.repo, target, source.commit, credentials, shallow=source.shallow)


def program_in(source: ProgramSource, target: Path, layer: SourceLayer = DIRECT) -> Path:
    """The program's directory in the laid-out ``target``.

    Raises:
        ProgramDirError: the source's ``dir`` is not there (naming its Stack field).
    """
    if isinstance(source, GitCheckout):
        return layer.program_dir(target, source.dir)
    return layer.program_dir(target, source.dir, source.FIELD)
