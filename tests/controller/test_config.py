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


def test_endpoints_bind_loopback_unless_told_otherwise() -> None:
    """/metrics and the probes are private by default; ``:port`` binds every interface."""
    cfg = parse_config([], {})
    assert cfg.metrics_bind_address == "127.0.0.1:8080"
    assert cfg.health_probe_bind_address == "127.0.0.1:8081"
    cfg = parse_config([], {"PSO_METRICS_BIND_ADDRESS": ":9090"})
    assert cfg.metrics_bind_address == "0.0.0.0:9090"
    cfg = parse_config(["--health-probe-bind-address=:9091"], {})
    assert cfg.health_probe_bind_address == "0.0.0.0:9091"


@pytest.mark.parametrize(
    ("argv", "env", "cap"),
    [
        pytest.param([], {}, 1, id="default-2-workers"),
        pytest.param(["--workers=1"], {}, 1, id="default-at-least-1"),
        pytest.param(["--workers=5"], {}, 2, id="default-half-the-workers"),
        pytest.param(["--max-concurrent-reconciles-per-namespace=0"], {}, 0, id="no-limit"),
        pytest.param([], {"PSO_MAX_CONCURRENT_RECONCILES_PER_NAMESPACE": "3"}, 3, id="environment"),
    ],
)
def test_per_namespace_cap(argv: list[str], env: dict[str, str], cap: int) -> None:
    """Half the workers (at least 1) unless given; 0 means no limit."""
    assert parse_config(argv, env).max_concurrent_reconciles_per_namespace == cap


def test_run_timeout() -> None:
    """Two hours by default, from the flag or PSO_RUN_TIMEOUT otherwise."""
    assert parse_config([], {}).run_timeout == 7200.0
    assert parse_config([], {"PSO_RUN_TIMEOUT": "90"}).run_timeout == 90.0
    assert parse_config(["--run-timeout=1.5"], {"PSO_RUN_TIMEOUT": "90"}).run_timeout == 1.5


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
        pytest.param(
            ["--max-concurrent-reconciles-per-namespace=-1"], {}, "must be 0 or more", id="cap"
        ),
        pytest.param(["--run-timeout=0"], {}, "must be greater than 0", id="run-timeout"),
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
