"""Laying a program source out: each kind reaches its one call, with what it needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from workspace.runner.document import FluxArtifact, GitCheckout, ProgramSource, RenderedProject
from workspace.runner.layout import lay_out, program_in
from workspace.source import GitCredentials

CREDENTIALS = GitCredentials(token="t")  # noqa: S106 - a test value


class Recorder:
    """A ``SourceLayer`` that records each call."""

    def __init__(self) -> None:
        """Nothing called."""
        self.calls: list[tuple[object, ...]] = []

    def checkout(
        self,
        url: str,
        work_dir: Path,
        commit: str,
        credentials: GitCredentials | None,
        *,
        shallow: bool = True,
    ) -> None:
        """Record."""
        self.calls.append(("checkout", url, work_dir, commit, credentials, shallow))

    def fetch_artifact(self, url: str, digest: str, work_dir: Path) -> None:
        """Record."""
        self.calls.append(("fetch_artifact", url, digest, work_dir))

    def write_project(self, work_dir: Path, project: str) -> None:
        """Record."""
        self.calls.append(("write_project", work_dir, project))

    def program_dir(
        self, checkout: Path, repo_dir: str | None, field: str = "spec.repoDir"
    ) -> Path:
        """Record; the directory joined."""
        self.calls.append(("program_dir", checkout, repo_dir, field))
        return checkout / (repo_dir or ".")


@pytest.mark.parametrize(
    ("source", "laid", "field"),
    [
        (
            GitCheckout("https://g/r.git", "c" * 40, "app", shallow=True),
            ("checkout", "https://g/r.git", "c" * 40, CREDENTIALS, True),
            "spec.repoDir",
        ),
        (
            FluxArtifact("http://sc/a.tgz", "sha256:" + "a" * 64, "main@sha1:x", "app"),
            ("fetch_artifact", "http://sc/a.tgz", "sha256:" + "a" * 64),
            "spec.fluxSource.dir",
        ),
        (RenderedProject("name: p\n", "rev"), ("write_project", "name: p\n"), "spec.programRef"),
    ],
    ids=["git", "flux-artifact", "program"],
)
def test_each_kind_is_laid_out_once_and_its_directory_named_by_its_field(
    tmp_path: Path, source: ProgramSource, laid: tuple[object, ...], field: str
) -> None:
    """One call lays it out (git alone gets the credentials); ``program_in`` names the field."""
    layer, target = Recorder(), tmp_path / "source"
    lay_out(source, target, CREDENTIALS, layer)
    [call] = layer.calls
    assert (call[0], *[part for part in call[1:] if part != target]) == laid
    assert target in call
    directory = program_in(source, target, layer)
    assert layer.calls[-1] == ("program_dir", target, source.dir, field)
    assert directory == target / (source.dir or ".")
