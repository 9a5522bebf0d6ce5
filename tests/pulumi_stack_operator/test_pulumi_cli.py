"""Finding the CLI: resolved on PATH, its version checked, remembered where asked."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from pulumi_stack_operator.pulumi_cli import CliVersionError, PulumiCli, pulumi_command


def fake_cli(directory: Path, version: str) -> Path:
    """A CLI in ``directory`` printing ``version``; each call appends to ``calls``.

    ``pulumi`` on ``PATH`` is a symlink to it (``fake-pulumi``: not the real CLI's name,
    which the fast tier may not run), as an installed CLI often is.
    """
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "fake-pulumi"
    calls = directory / "calls"
    binary.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho {version}\n')
    binary.chmod(0o755)
    with contextlib.suppress(FileExistsError):
        (directory / "pulumi").symlink_to(binary.name)
    return binary


def calls(binary: Path) -> int:
    """How many times the fake CLI ran."""
    found = binary.parent / "calls"
    return len(found.read_text().splitlines()) if found.exists() else 0


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake CLI, v3.200.0, alone on PATH."""
    binary = fake_cli(tmp_path / "bin", "v3.200.0")
    monkeypatch.setenv("PATH", str(binary.parent))
    return binary


def test_the_cli_on_path_is_resolved_and_checked_each_time_without_a_memo(on_path: Path) -> None:
    """No memo: ``pulumi version`` runs on every call."""
    assert pulumi_command() == PulumiCli(str(on_path))
    assert pulumi_command() == PulumiCli(str(on_path))
    assert calls(on_path) == 2


def test_a_memo_makes_its_directory(on_path: Path, tmp_path: Path) -> None:
    """A memo in a directory not made yet (a new work root): made, and read the next time."""
    memo = tmp_path / "new" / ".cache" / "pulumi-version.json"
    pulumi_command(memo=memo)
    pulumi_command(memo=memo)
    assert calls(on_path) == 1
    assert memo.is_file()


def test_a_memo_keeps_the_version_of_the_same_binary(on_path: Path, tmp_path: Path) -> None:
    """The first call asks and writes the memo; the next ones read it."""
    memo = tmp_path / "cache" / "pulumi-version.json"
    memo.parent.mkdir()
    for _ in range(3):
        assert pulumi_command(memo=memo) == PulumiCli(str(on_path))
    assert calls(on_path) == 1
    assert json.loads(memo.read_text())["version"] == [3, 200, 0]
    assert [p.name for p in memo.parent.iterdir()] == ["pulumi-version.json"]


def test_a_replaced_binary_is_asked_again_and_a_too_old_one_refused(
    on_path: Path, tmp_path: Path
) -> None:
    """Another file at the same path (an older CLI): its own version, which fails the check."""
    memo = tmp_path / "pulumi-version.json"
    pulumi_command(memo=memo)
    fake_cli(tmp_path / "other", "v3.0.9").replace(on_path)
    with pytest.raises(CliVersionError, match=r"version 3\.0\.9; 3\.1\.0 or newer"):
        pulumi_command(memo=memo)


@pytest.mark.parametrize(
    "text", ["", "not json", "[]", '{"binary": null}', '{"binary": [], "version": [3]}']
)
def test_a_memo_that_is_not_one_is_as_none(on_path: Path, tmp_path: Path, text: str) -> None:
    """Unreadable or foreign content: the CLI is asked, and the memo rewritten."""
    memo = tmp_path / "pulumi-version.json"
    memo.write_text(text)
    assert pulumi_command(memo=memo) == PulumiCli(str(on_path))
    assert calls(on_path) == 1
    assert json.loads(memo.read_text())["version"] == [3, 200, 0]


def test_a_memo_that_cannot_be_written_only_costs_the_check(on_path: Path, tmp_path: Path) -> None:
    """A memo whose directory cannot be made (a file is in the way): checked every time."""
    (tmp_path / "a-file").write_text("")
    memo = tmp_path / "a-file" / "pulumi-version.json"
    pulumi_command(memo=memo)
    pulumi_command(memo=memo)
    assert calls(on_path) == 2
