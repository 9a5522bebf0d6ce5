"""The operator's command line: its own flags beside the manager's, and usage errors.

The manager's flags (names, defaults, validation) are tested generically in
``tests/controller/test_config.py``; here the operator's prefix, Lease and flags.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pulumi_stack_operator.config import (
    ENV_PREFIX,
    RUNNERS,
    build_parser,
    parse_config,
    resource_requests,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_manager_flags_read_pso_variables() -> None:
    """PSO_* variables set the manager's flags too; a flag on the command line wins."""
    env = {"PSO_WORKERS": "5", "PSO_LEADER_ELECT": "true", "WATCH_NAMESPACE": "a,b"}
    cfg = parse_config([], env)
    assert (cfg.manager.workers, cfg.manager.leader_elect) == (5, True)
    assert cfg.manager.namespaces == ("a", "b")
    cfg = parse_config(["--workers=3", "--no-leader-elect"], env)
    assert (cfg.manager.workers, cfg.manager.leader_elect) == (3, False)
    assert ENV_PREFIX == "PSO_"


def test_the_lease_is_the_operators() -> None:
    """The Lease is ``pulumi-stack-operator`` unless ``--leader-election-id`` says otherwise."""
    assert parse_config([], {}).manager.leader_election_id == "pulumi-stack-operator"


def test_the_stack_selector_and_its_lease() -> None:
    """``--stack-selector``/``PSO_STACK_SELECTOR``: a shard; its Lease follows the selector.

    Without one, every Stack and the Lease ``pulumi-stack-operator`` (an upgrade keeps its
    Lease); with one, ``pulumi-stack-operator-<8 hex digits>``, a fixed digest of the
    selector's canonical form; ``--leader-election-id`` wins over both.
    """
    cfg = parse_config([], {})
    assert cfg.manager.label_selector.empty
    a = parse_config(["--stack-selector=shard=a"], {}).manager
    assert str(a.label_selector) == "shard=a"
    assert a.leader_election_id == "pulumi-stack-operator-3d8dfb26"
    not_a = parse_config([], {"PSO_STACK_SELECTOR": "shard!=a"}).manager
    assert str(not_a.label_selector) == "shard!=a"
    assert not_a.leader_election_id not in {a.leader_election_id, "pulumi-stack-operator"}
    named = parse_config(["--stack-selector=shard=a", "--leader-election-id=shard-a"], {})
    assert named.manager.leader_election_id == "shard-a"


def test_run_timeout() -> None:
    """Two hours by default, from the flag or PSO_RUN_TIMEOUT otherwise."""
    assert parse_config([], {}).run_timeout == 7200.0
    assert parse_config([], {"PSO_RUN_TIMEOUT": "90"}).run_timeout == 90.0
    assert parse_config(["--run-timeout=1.5"], {"PSO_RUN_TIMEOUT": "90"}).run_timeout == 1.5


def test_tenancy_defaults_are_the_safe_ones() -> None:
    """No priority class, no wildcard toleration, only ``default`` by name, a day at most."""
    cfg = parse_config([], {})
    assert cfg.tenancy.allowed_priority_classes == frozenset()
    assert cfg.tenancy.allow_any_toleration is False
    assert cfg.tenancy.allowed_service_accounts == frozenset({"default"})
    assert cfg.max_run_timeout == 86400.0


def test_tenancy_flags_and_variables() -> None:
    """Comma lists (blanks ignored), ``*`` for every account, the bool flag's ``--no-``."""
    cfg = parse_config(
        [
            "--allowed-priority-classes=batch, low.priority",
            "--allow-any-toleration",
            "--allowed-service-accounts=default,deployer",
            "--max-run-timeout=3600",
        ],
        {},
    )
    assert cfg.tenancy.allowed_priority_classes == frozenset({"batch", "low.priority"})
    assert cfg.tenancy.allow_any_toleration is True
    assert cfg.tenancy.allowed_service_accounts == frozenset({"default", "deployer"})
    assert cfg.max_run_timeout == 3600.0
    env = {"PSO_ALLOWED_SERVICE_ACCOUNTS": "*", "PSO_ALLOW_ANY_TOLERATION": "true"}
    cfg = parse_config(["--no-allow-any-toleration"], env)
    assert cfg.tenancy.allowed_service_accounts == frozenset({"*"})
    assert cfg.tenancy.allow_any_toleration is False
    assert parse_config(["--allowed-service-accounts="], {}).tenancy.allowed_service_accounts == (
        frozenset()
    )


def test_pulumi_defaults() -> None:
    """Work dir under $TMPDIR, the CLI's default backend, retries from 10 s, 5 failures."""
    cfg = parse_config([], {})
    assert Path(cfg.work_dir).name == "pulumi-stack-operator"
    assert cfg.default_backend is None
    assert (cfg.update_retry_base, cfg.max_update_failures) == (10.0, 5)
    assert isinstance(cfg.max_update_failures, int)


def test_pulumi_flags_from_the_environment_and_the_command_line() -> None:
    """Each operator flag has its PSO_ variable; the command line wins."""
    env = {
        "PSO_WORK_DIR": "/w",
        "PSO_DEFAULT_BACKEND": "file:///state",
        "PSO_UPDATE_RETRY_BASE": "2.5",
        "PSO_MAX_UPDATE_FAILURES": "3",
    }
    cfg = parse_config([], env)
    assert (cfg.work_dir, cfg.default_backend) == ("/w", "file:///state")
    assert (cfg.update_retry_base, cfg.max_update_failures) == (2.5, 3)
    cfg = parse_config(["--work-dir=/v", "--max-update-failures=1"], env)
    assert (cfg.work_dir, cfg.max_update_failures) == ("/v", 1)


def test_the_runner_is_local_by_default_and_named_by_flag_or_variable() -> None:
    """``--runner`` chooses among ``RUNNERS``; ``local`` is the default."""
    assert RUNNERS == ("local", "pod", "agent")
    assert parse_config([], {}).runner == "local"
    assert parse_config([], {"PSO_RUNNER": "pod"}).runner == "pod"
    assert parse_config(["--runner=pod"], {}).runner == "pod"
    assert parse_config(["--runner=agent"], {}).runner == "agent"
    assert parse_config([], {}).run_image is None
    assert parse_config(["--run-image=reg/x:1"], {}).run_image == "reg/x:1"


def test_dependency_cache_and_plugin_mirror_flags() -> None:
    """Sizes as Kubernetes quantities; a mirror URL and a claim name as given ("" for none)."""
    default = parse_config([], {})
    assert default.dependency_cache_size == 10 * 1024**3
    assert (default.plugin_mirror, default.run_cache_claim) == (None, "pulumi-cache")
    sizes = {"500Mi": 500 * 1024**2, "2G": 2 * 1000**3, "0": 0, "1024": 1024, "1Ti": 1024**4}
    for given, size in sizes.items():
        assert parse_config([f"--dependency-cache-size={given}"], {}).dependency_cache_size == size
    env = {"PSO_PLUGIN_MIRROR": "https://mirror.example/plugins", "PSO_RUN_CACHE_CLAIM": ""}
    cfg = parse_config([], env)
    assert (cfg.plugin_mirror, cfg.run_cache_claim) == ("https://mirror.example/plugins", "")


def test_run_pod_requests() -> None:
    """cpu=100m,memory=256Mi unless told otherwise; "" is none; bad pairs are refused."""
    assert parse_config([], {}).run_pod_requests == {"cpu": "100m", "memory": "256Mi"}
    given = " cpu = 0.5 , ephemeral-storage=1Gi"
    assert parse_config([f"--run-pod-requests={given}"], {}).run_pod_requests == {
        "cpu": "0.5",
        "ephemeral-storage": "1Gi",
    }
    assert parse_config([], {"PSO_RUN_POD_REQUESTS": ""}).run_pod_requests == {}
    for bad in ("gpu=1", "cpu=1,cpu=2", "memory", "memory=lots", "cpu=-1", "memory=1GiB"):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(bad.split(",")[-1]))):
            resource_requests(bad)


def test_run_pod_keep_warm() -> None:
    """Off (0) unless told; seconds or a duration; its variable; nothing negative or vague."""
    assert parse_config([], {}).run_pod_keep_warm == 0.0
    for given, seconds in [("60", 60.0), ("60s", 60.0), ("2m", 120.0), ("1h30m", 5400.0)]:
        assert parse_config([f"--run-pod-keep-warm={given}"], {}).run_pod_keep_warm == seconds
    assert parse_config([], {"PSO_RUN_POD_KEEP_WARM": "90s"}).run_pod_keep_warm == 90.0
    for bad in ("-1", "soon", "5x", "inf", "nan", "m", ""):
        with pytest.raises(SystemExit):
            parse_config([f"--run-pod-keep-warm={bad}"], {})


def test_source_discovery_period() -> None:
    """30 s unless the flag or its variable says otherwise; never zero or negative."""
    assert parse_config([], {}).source_discovery_period == 30.0
    env = {"PSO_SOURCE_DISCOVERY_PERIOD": "5"}
    assert parse_config([], env).source_discovery_period == 5.0
    assert parse_config(["--source-discovery-period=0.5"], env).source_discovery_period == 0.5
    with pytest.raises(SystemExit):
        parse_config(["--source-discovery-period=0"], {})


def test_every_flag_is_documented_in_help() -> None:
    """Each flag has help text that states its default."""
    parser = build_parser()
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]  # noqa: SLF001
    assert {"--runner", "--work-dir", "--workers", "--kubeconfig"} <= {
        a.option_strings[0] for a in flags
    }
    for action in flags:
        assert action.help
        assert "default" in action.help, action.option_strings[0]


def operator_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pulumi_stack_operator`` with ``argv`` and extra environment ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "pulumi_stack_operator", *argv],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )


def test_help_is_the_operators() -> None:
    """``--help`` exits 0 naming the program, its environment prefix and ``--runner``."""
    proc = operator_cli("--help")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert out.startswith("usage: pulumi-stack-operator")
    assert "Reconcile pulumi.com/v1 Stacks through the Pulumi Automation API." in out
    assert "environment variable PSO_<FLAG_NAME>" in out
    assert "--runner {local,pod,agent}" in out


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
        pytest.param(["--update-retry-base=0"], {}, "must be greater than 0", id="retry-base"),
        pytest.param(["--max-update-failures=x"], {}, "is not a number", id="max-failures"),
        pytest.param(["--runner=kubernetes"], {}, "invalid choice", id="runner"),
        pytest.param(
            ["--stack-selector=shard in (a"], {}, "is not a label selector", id="selector"
        ),
        pytest.param(
            [], {"PSO_STACK_SELECTOR": "shard==a==b"}, "is not a label selector", id="env-selector"
        ),
        pytest.param(["--dependency-cache-size=10GB"], {}, "is not a size", id="cache-size"),
        pytest.param(
            ["--plugin-mirror=http://u:p@mirror"],
            {},
            "must not hold credentials",
            id="mirror-creds",
        ),
        pytest.param(["--plugin-mirror=ftp://mirror"], {}, "http:// or https://", id="mirror-url"),
        pytest.param(
            ["--plugin-mirror=http://mirror/?a=b"], {}, "cannot hold '=' or ','", id="mirror-eq"
        ),
        pytest.param(["--run-cache-claim=Cache_1"], {}, "PersistentVolumeClaim", id="claim"),
        pytest.param(["--run-pod-requests=gpu=1"], {}, "name each of cpu", id="requests"),
        pytest.param([], {"PSO_RUNNER": "remote"}, "invalid choice", id="env-runner"),
        pytest.param(
            ["--allowed-priority-classes=High"], {}, "not a PriorityClass name", id="class"
        ),
        pytest.param(
            ["--allowed-priority-classes=*"], {}, "not a PriorityClass name", id="class-any"
        ),
        pytest.param(
            ["--allowed-service-accounts=a_b"], {}, "not a ServiceAccount name", id="account"
        ),
        pytest.param(
            ["--otel-endpoint=collector:4317"], {}, "not an http:// or https:// URL", id="otel"
        ),
        pytest.param(
            [], {"PSO_OTEL_ENDPOINT": "http://me:hunter2@c:4317"}, "must not hold", id="otel-cred"
        ),
    ],
)
def test_bad_input_exits_2_with_a_message(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    """The CLI refuses bad flags or variables with a usage message and status 2."""
    proc = operator_cli(*argv, env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: pulumi-stack-operator")
    assert message in proc.stderr
    assert "hunter2" not in proc.stderr


def test_an_otel_setting_it_cannot_honour_exits_2_naming_it() -> None:
    """A bad ``OTEL_*`` variable: status 2 and a message naming it, before anything starts."""
    proc = operator_cli(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"})
    assert proc.returncode == 2
    assert proc.stderr.startswith("pulumi-stack-operator: error: OTEL_EXPORTER_OTLP_ENDPOINT")


def test_otel_endpoint() -> None:
    """No endpoint unless told; the flag or its variable names one."""
    assert parse_config([], {}).otel_endpoint is None
    given = "http://otel-collector.observability:4317"
    assert parse_config([f"--otel-endpoint={given}"], {}).otel_endpoint == given
    assert parse_config([], {"PSO_OTEL_ENDPOINT": given}).otel_endpoint == given
