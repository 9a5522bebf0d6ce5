"""The manager's flags with environment fallbacks; an application's own flags beside them.

Bad input is a usage error (exit 2). The operator's own flags and its command line are
tested in ``tests/pulumi_stack_operator/test_config.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import socket

import pytest

from controller.config import (
    Application,
    build_parser,
    instance_identity,
    lease_name_for,
    non_negative_int,
    parse,
    parse_config,
    positive,
)
from controller.labels import EVERYTHING, parse_selector


def add_demo_flags(parser: argparse.ArgumentParser) -> None:
    """The demo application's own flags."""
    parser.add_argument("--colour", choices=("red", "blue"), default="red")
    parser.add_argument("--ratio", type=positive(float), default=1.0)
    parser.add_argument("--spare", type=non_negative_int, default=0)
    parser.add_argument("--verbose-demo", action=argparse.BooleanOptionalAction, default=False)


APP = Application(
    prog="demo-operator",
    description="Reconcile demo objects.",
    env_prefix="DEMO_",
    lease_name="demo-lease",
    add_flags=add_demo_flags,
)


def test_environment_fills_in_flags_and_flags_win() -> None:
    """<prefix>* variables set defaults; a flag on the command line overrides them."""
    env = {"DEMO_WORKERS": "5", "DEMO_LEADER_ELECT": "true", "WATCH_NAMESPACE": "a,b"}
    cfg = parse_config([], APP, env)
    assert (cfg.workers, cfg.leader_elect, cfg.namespaces) == (5, True, ("a", "b"))
    cfg = parse_config(["--workers=3", "--no-leader-elect"], APP, env)
    assert (cfg.workers, cfg.leader_elect) == (3, False)


def test_only_the_applications_prefix_is_read() -> None:
    """Another application's variables are not this one's flags."""
    cfg = parse_config([], APP, {"PSO_WORKERS": "5", "OTHER_WORKERS": "7"})
    assert cfg.workers == 2


def test_endpoints_bind_loopback_unless_told_otherwise() -> None:
    """/metrics and the probes are private by default; ``:port`` binds every interface."""
    cfg = parse_config([], APP, {})
    assert cfg.metrics_bind_address == "127.0.0.1:8080"
    assert cfg.health_probe_bind_address == "127.0.0.1:8081"
    cfg = parse_config([], APP, {"DEMO_METRICS_BIND_ADDRESS": ":9090"})
    assert cfg.metrics_bind_address == "0.0.0.0:9090"
    cfg = parse_config(["--health-probe-bind-address=:9091"], APP, {})
    assert cfg.health_probe_bind_address == "0.0.0.0:9091"


@pytest.mark.parametrize(
    ("argv", "env", "cap"),
    [
        pytest.param([], {}, 1, id="default-2-workers"),
        pytest.param(["--workers=1"], {}, 1, id="default-at-least-1"),
        pytest.param(["--workers=5"], {}, 2, id="default-half-the-workers"),
        pytest.param(["--max-concurrent-reconciles-per-namespace=0"], {}, 0, id="no-limit"),
        pytest.param(
            [], {"DEMO_MAX_CONCURRENT_RECONCILES_PER_NAMESPACE": "3"}, 3, id="environment"
        ),
    ],
)
def test_per_namespace_cap(argv: list[str], env: dict[str, str], cap: int) -> None:
    """Half the workers (at least 1) unless given; 0 means no limit."""
    assert parse_config(argv, APP, env).max_concurrent_reconciles_per_namespace == cap


def test_the_lease_name_defaults_to_the_applications() -> None:
    """``--leader-election-id`` defaults to the application's Lease; the flag overrides it."""
    assert parse_config([], APP, {}).leader_election_id == "demo-lease"
    assert parse_config(["--leader-election-id=x"], APP, {}).leader_election_id == "x"


SHARDED = Application(
    prog="sharded-operator",
    description="Reconcile some widgets.",
    env_prefix="SH_",
    lease_name="sharded",
    selector_flag="--widget-selector",
    objects="widgets",
)


def test_an_application_may_name_a_selector_flag() -> None:
    """``selector_flag``: the flag (and ``<prefix>WIDGET_SELECTOR``) sets the selector."""
    assert parse_config([], SHARDED, {}).label_selector == EVERYTHING
    cfg = parse_config(["--widget-selector=shard in (b, a)"], SHARDED, {})
    assert str(cfg.label_selector) == "shard in (a,b)"
    cfg = parse_config([], SHARDED, {"SH_WIDGET_SELECTOR": "!shard"})
    assert str(cfg.label_selector) == "!shard"
    cfg = parse_config(["--widget-selector=shard=a"], SHARDED, {"SH_WIDGET_SELECTOR": "!shard"})
    assert str(cfg.label_selector) == "shard=a"  # the flag wins
    dests = {a.dest for a in build_parser(APP)._actions}  # noqa: SLF001 - no public accessor
    assert not any("selector" in dest for dest in dests)  # APP names none
    assert parse_config([], APP, {}).label_selector == EVERYTHING


def test_the_lease_follows_the_selector_unless_named() -> None:
    """One Lease per selector, however spelt; none: the application's; the flag wins."""
    assert parse_config([], SHARDED, {}).leader_election_id == "sharded"
    a = parse_config(["--widget-selector=shard=a"], SHARDED, {}).leader_election_id
    not_a = parse_config(["--widget-selector=shard!=a"], SHARDED, {}).leader_election_id
    same_a = parse_config(["--widget-selector= shard == a "], SHARDED, {}).leader_election_id
    assert a == same_a == lease_name_for("sharded", parse_selector("shard=a"))
    assert a != not_a
    assert a.startswith("sharded-")
    assert len(a) == len("sharded-") + 8
    named = parse_config(["--widget-selector=shard=a", "--leader-election-id=mine"], SHARDED, {})
    assert named.leader_election_id == "mine"
    assert lease_name_for("sharded", EVERYTHING) == "sharded"


def test_the_derived_lease_name_is_fixed() -> None:
    """Installations of different versions must agree on it: a fixed digest of the form."""
    assert lease_name_for("pulumi-stack-operator", parse_selector("shard=a")) == (
        "pulumi-stack-operator-3d8dfb26"
    )


def test_a_selector_that_does_not_parse_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Checked at start-up with the API server's grammar: exit 2, the reason said."""
    for argv, env in (
        (["--widget-selector=shard in (a"], {}),
        ([], {"SH_WIDGET_SELECTOR": "shard=a,"}),
        (["--widget-selector=Shard/x=a"], {}),
    ):
        with pytest.raises(SystemExit) as exited:
            parse(argv, SHARDED, env)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: sharded-operator")
        assert "argument --widget-selector:" in err
        assert "is not a label selector:" in err


def test_help_describes_the_selector_and_the_lease_per_selector(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--help`` names the objects and how the Lease follows the selector."""
    with pytest.raises(SystemExit):
        parse(["--help"], SHARDED, {})
    out = " ".join(capsys.readouterr().out.split())
    assert "of the widgets to manage" in out
    assert "sharded-<first 8 hex digits of the SHA-256 of the selector" in out


def test_the_applications_flags_are_read_back_with_the_environment() -> None:
    """The application's flags parse beside the manager's, with the same env fallbacks."""
    parsed = parse(["--ratio=2.5"], APP, {"DEMO_COLOUR": "blue", "DEMO_VERBOSE_DEMO": "1"})
    assert (parsed.args.colour, parsed.args.ratio, parsed.args.verbose_demo) == ("blue", 2.5, True)
    assert parsed.args.spare == 0
    assert parsed.config.workers == 2  # the manager's part is there too
    assert parse([], APP, {}).args.colour == "red"


def test_help_names_the_application_and_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` shows the application's name, description, prefix and both sets of flags."""
    with pytest.raises(SystemExit) as exited:
        parse(["--help"], APP, {})
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: demo-operator")
    assert "Reconcile demo objects. Every flag can also be set as an environment variable " in out
    assert "DEMO_<FLAG_NAME>" in out
    for flag in ("--workers", "--leader-election-id", "--colour", "--verbose-demo"):
        assert flag in out
    assert "(default: demo-lease)" in out


def test_an_application_without_flags_gets_the_managers_only() -> None:
    """The default ``add_flags`` adds nothing; an unknown flag is still refused."""
    bare = Application(prog="bare", description="Bare.", env_prefix="BARE_", lease_name="bare")
    dests = {a.dest for a in build_parser(bare)._actions}  # noqa: SLF001 - no public accessor
    assert "workers" in dests
    assert "colour" not in dests
    assert not dests & {"work_dir", "run_timeout", "default_backend", "runner"}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--workers=0"], {}, "must be greater than 0", id="zero-workers"),
        pytest.param([], {"DEMO_WORKERS": "many"}, "is not a number", id="env-not-a-number"),
        pytest.param(["--namespaces=Bad_NS"], {}, "not a valid namespace", id="namespace"),
        pytest.param(["--metrics-bind-address=8080"], {}, "is not host:port", id="address"),
        pytest.param(["--retry-period=35"], {}, "--renew-deadline", id="lease-timing"),
        pytest.param(["--frobnicate"], {}, "unrecognized arguments", id="unknown-flag"),
        pytest.param([], {"DEMO_LEADER_ELECT": "maybe"}, "true or false", id="env-bool"),
        pytest.param(
            ["--max-concurrent-reconciles-per-namespace=-1"], {}, "must be 0 or more", id="cap"
        ),
        pytest.param(["--ratio=0"], {}, "must be greater than 0", id="app-positive"),
        pytest.param(["--spare=x"], {}, "is not a whole number", id="app-whole-number"),
        pytest.param([], {"DEMO_COLOUR": "green"}, "invalid choice", id="app-env-choice"),
        pytest.param([], {"DEMO_VERBOSE_DEMO": "maybe"}, "true or false", id="app-env-bool"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad flags or variables, the application's too, are a usage error: status 2."""
    with pytest.raises(SystemExit) as exited:
        parse(argv, APP, env)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: demo-operator")
    assert message in err


def test_each_start_is_a_new_instance_even_with_the_same_host_and_pid() -> None:
    """``<hostname>_<pid>_<hex>``: a container restarted with the same pid is not itself."""
    first, second = instance_identity(), instance_identity()
    prefix = f"{socket.gethostname()}_{os.getpid()}_"
    assert first.startswith(prefix)
    assert second.startswith(prefix)
    assert re.fullmatch(r"[0-9a-f]{6}", first.removeprefix(prefix))
    assert first != second
