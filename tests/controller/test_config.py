"""Flags with environment fallbacks; bad input is a usage error (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.config import parse_config

REPO = Path(__file__).resolve().parents[2]


def test_environment_fills_in_flags_and_flags_win() -> None:
    """PSO_* variables set defaults; a flag on the command line overrides them."""
    env = {"PSO_WORKERS": "5", "PSO_LEADER_ELECT": "true", "WATCH_NAMESPACE": "a,b"}
    cfg = parse_config([], env)
    assert (cfg.workers, cfg.leader_elect, cfg.namespaces) == (5, True, ("a", "b"))
    cfg = parse_config(["--workers=3", "--no-leader-elect"], env)
    assert (cfg.workers, cfg.leader_elect) == (3, False)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--workers=0"], {}, "must be greater than 0", id="zero-workers"),
        pytest.param([], {"PSO_WORKERS": "many"}, "is not a number", id="env-not-a-number"),
        pytest.param(["--namespaces=Bad_NS"], {}, "not a valid namespace", id="namespace"),
        pytest.param(["--metrics-bind-address=8080"], {}, "is not host:port", id="address"),
        pytest.param(["--retry-period=35"], {}, "--renew-deadline", id="lease-timing"),
        pytest.param(["--frobnicate"], {}, "unrecognized arguments", id="unknown-flag"),
        pytest.param([], {"PSO_LEADER_ELECT": "maybe"}, "true or false", id="env-bool"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    """The CLI refuses bad flags or variables with a usage message and status 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "controller", *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
