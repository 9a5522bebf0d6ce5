"""The PKO v2 table of the benchmarks page, rendered from one run's ``bench=pko-v2`` line."""

from __future__ import annotations

from bench import readme
from bench.peer import pko_v2_page
from bench.peer.pko_v2_build import SKIPPED, SOURCE_ENV
from bench.stats import TIMES, Summary

LINE = (
    "bench=pko-v2 version=v2.9.0 samples=5 idle_window=300 cached_timeout=300 "
    "pso_first_s=21.3 pso_cached_s=2.6 pso_cached_timeouts=0 pso_requests_per_run=17.2 "
    "pso_rss_mib=57.8 pso_idle_pods=0 pso_idle_mem_mib=182 "
    "pko_first_s=42.5 pko_cached_s=71 pko_cached_timeouts=1 pko_requests_per_run=78.6 "
    "pko_rss_mib=72.3 pko_idle_pods=1 pko_idle_mem_mib=451 pko_init_conflicts=11 "
    "pko_pod_revisions=6"
)


def measured(line: str = LINE) -> Summary:
    """``line`` parsed."""
    summary = Summary.parse(line)
    assert summary is not None
    return summary


def test_a_measured_line_gives_both_sides_ratios_and_the_verdict() -> None:
    """Each row has ours, PKO v2's and PKO ÷ ours; the plan's figures name the rows."""
    text = "\n".join(pko_v2_page.block(measured()))
    assert "PKO v2.9.0" in text
    assert (
        f"| spec PATCH → Ready (a new `value` config; median of 5) | 2.6 s | 71 s | 27.31{TIMES} |"
        in (text)
    )
    assert "| … changes not Ready within 300 s | 0 | 1 | — |" in text
    assert "| pods left running after 300 idle s (1 Stack) | 0 | 1 | — |" in text
    assert f"| operator RSS after the runs | 58 MiB | 72 MiB | 1.25{TIMES} |" in text
    assert "| fresh workspace pods deleted on an `Update` conflict | — | 11 | — |" in text
    assert text.endswith("**met** (2.6 s against 71 s; 0 against 1 pods idle).")


def test_the_verdict_is_not_met_when_ours_is_slower_or_leaves_a_pod() -> None:
    """Slower than PKO v2, a pod left idle, or a figure missing: not met."""
    slower = LINE.replace("pso_cached_s=2.6", "pso_cached_s=80")
    idle = LINE.replace("pso_idle_pods=0", "pso_idle_pods=1")
    missing = LINE.replace("pko_cached_s=71 ", "")
    for line in (slower, idle, missing):
        assert "**not met**" in pko_v2_page.verdict(measured(line))
    assert "| — | —" in "\n".join(pko_v2_page.block(measured(missing)))


def test_a_skipped_failed_or_missing_line_is_one_sentence_saying_why() -> None:
    """The skip names the variable as written; an error says which; no line: not run."""
    (skipped,) = pko_v2_page.block(Summary.of("pko-v2", skipped=SKIPPED))
    assert f"skipped, {SKIPPED}." in skipped
    assert SOURCE_ENV in skipped
    (failed,) = pko_v2_page.block(Summary.of("pko-v2", error="TimeoutError"))
    assert "failed, TimeoutError." in failed
    assert pko_v2_page.block(None) == [f"{pko_v2_page.TITLE}): not run."]


def test_the_page_renders_the_pko_v2_table_after_the_v1_one() -> None:
    """``bench.readme.render`` puts the PKO v2 block between the peer table and the notes."""
    page = readme.render({"pko-v2": measured()})
    assert page.index("Pulumi Kubernetes Operator v1.16") < page.index(pko_v2_page.TITLE)
    assert page.index(pko_v2_page.TITLE) < page.index("Notes:")
