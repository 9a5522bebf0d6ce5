"""The pods benchmarks' bed: each has a directory of its own under the bench's root."""

from __future__ import annotations

import types
from pathlib import Path
from typing import cast

from bench.pods.bed import PodBed
from bench.testbed import TestBed


def test_two_beds_of_one_run_never_share_a_directory(tmp_path: Path) -> None:
    """The pods benchmark's bed and PKO v2's, one after the other: two fresh directories.

    A shared one had the second push its program into the first's checkout (``remote origin
    already exists``), which failed the PKO v2 comparison of every full ``make bench``.
    """
    bench = cast("TestBed", types.SimpleNamespace(root=tmp_path))
    first, second = PodBed(bench, print), PodBed(bench, print)
    assert first.root != second.root
    for bed in (first, second):
        assert bed.root.parent == tmp_path
        assert bed.root.is_dir()
        assert not any(bed.root.iterdir())
