"""A rendered Program written as a source tree: only ``Pulumi.yaml``, swapped in whole."""

from __future__ import annotations

from pathlib import Path

from workspace.source import write_project


def test_a_project_is_written_alone_and_replaces_what_was_there(tmp_path: Path) -> None:
    """The directory holds exactly Pulumi.yaml; an old tree is gone; no staging is left."""
    target = tmp_path / "source"
    target.mkdir()
    (target / "stale.txt").write_text("from an earlier source")
    write_project(target, "name: p\nruntime: yaml\n")
    assert sorted(p.name for p in target.iterdir()) == ["Pulumi.yaml"]
    assert (target / "Pulumi.yaml").read_text() == "name: p\nruntime: yaml\n"
    write_project(target, "name: q\nruntime: yaml\n")
    assert (target / "Pulumi.yaml").read_text() == "name: q\nruntime: yaml\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source"]


def test_a_symlink_in_its_place_is_replaced_not_followed(tmp_path: Path) -> None:
    """A symlink at the target is replaced; what it pointed at is untouched."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    target = tmp_path / "source"
    target.symlink_to(elsewhere)
    write_project(target, "name: p\nruntime: yaml\n")
    assert not target.is_symlink()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
