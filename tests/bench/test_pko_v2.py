"""PKO v2 beside us: without its source the row is skipped with the reason, and nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench.peer import pko_v2
from bench.peer.pko_v2_build import SOURCE_ENV, BuildError, check_source, source_from_env
from bench.stats import Summary


def test_without_the_source_the_row_is_skipped_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``make bench`` prints ``bench=pko-v2 skipped=...`` naming the variable; no bed is used."""
    monkeypatch.delenv(SOURCE_ENV, raising=False)
    assert bench_main.BENCHMARKS["pko-v2"] is pko_v2.run
    summary = pko_v2.run(None)  # type: ignore[arg-type]  # a skipped row never reads its context
    parsed = Summary.parse(summary.line())
    assert parsed is not None
    assert parsed.name == "pko-v2"
    assert SOURCE_ENV in str(parsed.fields["skipped"])
    assert "hack/build-pko-v2" in str(parsed.fields["skipped"])


def test_a_source_that_is_not_pko_v2_is_refused_naming_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The variable set to a directory without PKO v2's go.mod: a BuildError naming it."""
    monkeypatch.setenv(SOURCE_ENV, str(tmp_path))
    source = source_from_env()
    assert source == tmp_path.resolve()
    with pytest.raises(BuildError, match=r"no go\.mod there"):
        check_source(source)
    (tmp_path / "go.mod").write_text("module example.com/other\n")
    with pytest.raises(BuildError, match="is not module"):
        check_source(source)
