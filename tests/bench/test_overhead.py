"""The overhead bench's breakdown, read from the operator's debug log."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.overhead import BareCli, Side, alternate, run_legs
from bench.readme import _overhead
from bench.stats import Summary
from workspace.runner.attempt import ENGINE_FLAGS
from workspace.runner.cli import FIXED_ENV


def test_the_stacks_run_legs_and_its_up_calls_are_read() -> None:
    """``Run timed`` legs and ``pulumi command`` ``up`` seconds of that Stack only."""
    lines = [
        {"event": "Run timed", "name": "op", "announce_s": 0.01, "checkout_s": 0.1,
         "runner_s": 1.0, "conclude_s": 0.02},
        {"event": "pulumi command", "name": "op", "command": "up", "seconds": 0.95},
        {"event": "pulumi command", "name": "op", "command": "stack select", "seconds": 0.2},
        {"event": "pulumi command", "name": "other", "command": "up", "seconds": 9},
    ]  # fmt: skip
    log = "\n".join([*map(json.dumps, lines), "not json"])

    assert run_legs(log, "op") == {
        "announce": [0.01],
        "checkout": [0.1],
        "conclude": [0.02],
        "cli_up": [0.95],
    }


def test_the_row_carries_the_breakdown_when_measured() -> None:
    """With ``ratio_cli`` the result names the operator's own up and the legs around it."""
    head = Summary.of("overhead", runs=5, op_e2e_s=2.4, op_run_s=2.3, cli_up_s=1.9,
                      ratio_e2e=1.26, ratio_run=1.21)  # fmt: skip
    full = head.extended(op_cli_up_s=2.2, debug_cli_up_s=1.9, ratio_cli=1.16,
                         op_announce_s=0.01, op_checkout_s=0.1, op_conclude_s=0.02)  # fmt: skip
    assert "breakdown" not in _overhead(head)[2]
    assert "own `pulumi up` 2.2 s vs bare 1.9 s (1.16" in _overhead(full)[2]
    assert "tracing on" not in _overhead(full)[2]


def test_the_row_says_whose_the_clis_extra_time_is_when_measured() -> None:
    """With ``ratio_flags`` the result splits the CLI's own cost from the operator's."""
    head = Summary.of("overhead", runs=5, op_e2e_s=2.4, op_run_s=2.3, cli_up_s=1.9,
                      ratio_e2e=1.26, ratio_run=1.21)  # fmt: skip
    assert "whose" not in _overhead(head)[2]
    split = head.extended(flagged_cli_up_s=2.1, ratio_flags=1.11, ratio_operator=1.05)
    row = _overhead(split)[2]
    assert "as the runner drives it (engine flags, `--event-log`) 2.1 s, 1.11" in row
    assert "the operator's `up` 1.05" in row


def test_a_cli_driven_as_the_runner_gets_its_flags_and_a_fresh_event_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``up`` only: the engine flags and an emptied ``--event-log``; the fixed env always."""
    ran: list[tuple[list[str], dict[str, str]]] = []

    def record(argv: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
        ran.append((argv, options["env"]))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", record)
    bed = SimpleNamespace(root=tmp_path, pulumi_bin=tmp_path, backend=tmp_path / "state")
    program = tmp_path / "program"
    program.mkdir()
    flagged = BareCli(bed, "s", program, as_runner=True)  # type: ignore[arg-type]
    assert flagged.events is not None
    flagged.events.write_text("old events\n")
    flagged("up", "--yes")
    flagged("config", "set", "k", "v")
    (up, up_env), (config, _) = ran
    assert up[: up.index("--event-log")] == ["pulumi", "up", "--yes", *ENGINE_FLAGS]
    assert up[up.index("--event-log") + 1] == str(flagged.events)
    assert flagged.events.read_text() == ""
    assert "--event-log" not in config
    assert {k: up_env[k] for k in FIXED_ENV} == FIXED_ENV
    plain = BareCli(bed, "p", program)  # type: ignore[arg-type]
    plain("up", "--yes")
    assert ran[-1][0] == ["pulumi", "up", "--yes", "--stack", "p", "--non-interactive"]


def test_the_row_carries_tracings_cost_when_measured() -> None:
    """With ``ratio_traced`` the result sets the traced rounds beside the headline."""
    head = Summary.of("overhead", runs=5, op_e2e_s=2.4, op_run_s=2.3, cli_up_s=1.9,
                      ratio_e2e=1.26, ratio_run=1.21)  # fmt: skip
    traced = head.extended(traced_op_e2e_s=2.6, traced_cli_up_s=1.9, ratio_traced=1.37,
                           traced_spans_per_run=31.0)  # fmt: skip
    row = _overhead(traced)[2]
    assert "tracing on (`--otel-endpoint`, a real Collector receiving 31 spans per run)" in row
    assert "operator 2.6 s vs bare 1.9 s → 1.37" in row


def test_each_round_rotates_which_side_goes_first() -> None:
    """Two sides swap every round; three take turns going first."""
    calls: list[str] = []

    def side(label: str) -> Side:
        return lambda value: calls.append(f"{label}{value}")

    alternate(lambda _: None, "x", 2, (side("a"), side("b")), "")
    assert calls == ["a1", "b1", "b2", "a2"]
    calls.clear()
    alternate(lambda _: None, "x", 3, (side("a"), side("b"), side("c")), "")
    assert calls == ["a1", "b1", "c1", "b2", "c2", "a2", "c3", "a3", "b3"]
