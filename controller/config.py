"""The operator's configuration: command-line flags, each with an environment fallback.

Every flag ``--some-flag`` can also be set as ``PSO_SOME_FLAG`` (a flag given on the
command line wins). ``WATCH_NAMESPACE`` is accepted for ``--namespaces`` too, as the
Pulumi Kubernetes Operator reads it. A bad value is a usage error: a message on stderr
and exit status 2, before anything starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from controller.logs import LEVELS, LogFormat

ENV_PREFIX = "PSO_"
_IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclasses.dataclass(frozen=True)
class Config:
    """Validated settings; see ``build_parser`` for each one's meaning and default."""

    namespaces: tuple[str, ...]  # empty: all namespaces
    workers: int
    max_concurrent_reconciles_per_namespace: int
    """At most this many reconciles of one namespace run at once; 0 means no limit.

    Namespaces take turns for free workers either way (round robin); the cap also keeps
    workers free for other namespaces while one namespace has many Stacks waiting.
    Default: half of ``workers``, at least 1.
    """
    run_timeout: float
    """Seconds one Pulumi run may take before it is interrupted (default 7200).

    A Stack's ``spec.timeoutSeconds`` overrides it for that Stack.
    """
    resync_period: float
    metrics_bind_address: str
    health_probe_bind_address: str
    leader_elect: bool
    leader_election_id: str
    leader_election_namespace: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    shutdown_timeout: float
    log_format: LogFormat
    log_level: str
    kubeconfig: str | None
    identity: str
    work_dir: str
    default_backend: str | None
    update_retry_base: float
    max_update_failures: int


def _address(value: str) -> tuple[str, int]:
    """Parse ``host:port`` (``:port`` binds all interfaces; port 0 disables)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        msg = f"{value!r} is not host:port"
        raise argparse.ArgumentTypeError(msg)
    return host or "0.0.0.0", int(port)  # noqa: S104 - the documented meaning of ":port"


def _positive(kind: type[float]) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = kind(value)
        except ValueError:
            msg = f"{value!r} is not a number"
            raise argparse.ArgumentTypeError(msg) from None
        if number <= 0:
            msg = f"{value!r} must be greater than 0"
            raise argparse.ArgumentTypeError(msg)
        return number

    return parse


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        msg = f"{value!r} is not a whole number"
        raise argparse.ArgumentTypeError(msg) from None
    if number < 0:
        msg = f"{value!r} must be 0 or more"
        raise argparse.ArgumentTypeError(msg)
    return number


def _namespaces(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    for name in names:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
            msg = f"{name!r} is not a valid namespace name"
            raise argparse.ArgumentTypeError(msg)
    return names


def _default_namespace() -> str:
    try:
        return Path(_IN_CLUSTER_NAMESPACE).read_text(encoding="utf-8").strip()
    except OSError:
        return "default"


def build_parser() -> argparse.ArgumentParser:
    """The flag parser; ``--help`` is the reference for every flag."""
    p = argparse.ArgumentParser(
        prog="pulumi-stack-operator",
        description="Reconcile pulumi.com/v1 Stacks through the Pulumi Automation API. "
        f"Every flag can also be set as an environment variable {ENV_PREFIX}<FLAG_NAME>.",
    )
    add = p.add_argument
    add(
        "--namespaces",
        type=_namespaces,
        default=(),
        help="comma-separated namespaces to watch (default: all; env also WATCH_NAMESPACE)",
    )
    add(
        "--workers",
        type=_positive(int),
        default=2,
        help="concurrent reconciles (Pulumi updates) (default: 2)",
    )
    add(
        "--max-concurrent-reconciles-per-namespace",
        type=_non_negative_int,
        default=None,
        help="reconciles of one namespace running at once, so that a namespace with many "
        "Stacks waiting leaves workers to the others; namespaces also take turns for free "
        "workers; 0 for no limit (default: half of --workers, at least 1)",
    )
    add(
        "--run-timeout",
        type=_positive(float),
        default=7200.0,
        help="seconds one Pulumi run may take before it is interrupted; a Stack's "
        "spec.timeoutSeconds overrides it (default: 7200)",
    )
    add(
        "--resync-period",
        type=_positive(float),
        default=600.0,
        help="seconds between re-checks of every cached Stack, from memory (default: 600)",
    )
    add(
        "--metrics-bind-address",
        type=_address,
        default="127.0.0.1:8080",
        help="host:port serving /metrics; :port for every interface, as in a pod; "
        "port 0 disables (default: 127.0.0.1:8080)",
    )
    add(
        "--health-probe-bind-address",
        type=_address,
        default="127.0.0.1:8081",
        help="host:port serving /healthz and /readyz; :port for every interface, as the "
        "kubelet's probes need; port 0 disables (default: 127.0.0.1:8081)",
    )
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="elect a leader on a Lease so that only one replica reconciles (default: off)",
    )
    add(
        "--leader-election-id",
        default="pulumi-stack-operator",
        help="name of the Lease (default: pulumi-stack-operator)",
    )
    add(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: the pod's namespace, else 'default')",
    )
    add(
        "--lease-duration",
        type=_positive(float),
        default=60.0,
        help="seconds a standby waits before taking over a silent leader's Lease (default: 60)",
    )
    add(
        "--renew-deadline",
        type=_positive(float),
        default=40.0,
        help="seconds the leader keeps trying to renew before it gives up (default: 40)",
    )
    add(
        "--retry-period",
        type=_positive(float),
        default=5.0,
        help="seconds between Lease acquire/renew attempts (default: 5)",
    )
    add(
        "--shutdown-timeout",
        type=_positive(float),
        default=600.0,
        help="seconds running updates get to finish after SIGTERM before they are "
        "interrupted; keep below the pod's terminationGracePeriodSeconds (default: 600)",
    )
    add(
        "--log-format",
        choices=("json", "console"),
        default="json",
        help="log line format (default: json)",
    )
    add("--log-level", choices=LEVELS, default="info", help="minimum level logged (default: info)")
    add(
        "--work-dir",
        default=str(Path(tempfile.gettempdir()) / "pulumi-stack-operator"),
        help="directory for source checkouts and PULUMI_HOME "
        "(default: $TMPDIR/pulumi-stack-operator)",
    )
    add(
        "--default-backend",
        default=None,
        help="state backend for Stacks without spec.backend, e.g. s3://bucket or "
        "file:///state (default: the Pulumi CLI's own default, Pulumi Cloud)",
    )
    add(
        "--update-retry-base",
        type=_positive(float),
        default=10.0,
        help="seconds before the first retry of a failed update; doubles per failure up "
        "to the Stack's retryMaxBackoffDurationSeconds (default: 10)",
    )
    add(
        "--max-update-failures",
        type=_positive(int),
        default=5,
        help="consecutive failures after which a Stack is Stalled (RetriesExhausted) until "
        "its spec, source or a reconcile request changes (default: 5)",
    )
    add(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config)",
    )
    return p


def _env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> list[str]:
    """Turn PSO_* variables into flags placed before the real ones (which then win)."""
    flags: list[str] = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public accessor
        if not action.option_strings or action.dest == "help":
            continue
        name = ENV_PREFIX + action.dest.upper()
        value = environ.get(name)
        if value is None and action.dest == "namespaces":
            value = environ.get("WATCH_NAMESPACE")
        if value is None:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            if value.lower() not in {"true", "false", "1", "0"}:
                parser.error(f"{name}={value!r} must be true or false")
            flags.append(flag if value.lower() in {"true", "1"} else f"--no-{flag[2:]}")
        else:
            flags.append(f"{flag}={value}")
    return flags


def _per_namespace_cap(args: argparse.Namespace) -> int:
    """The flag's value, or half the workers (at least 1) when it is not given."""
    cap: int | None = args.max_concurrent_reconciles_per_namespace
    return max(1, args.workers // 2) if cap is None else cap


def parse_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Config:
    """Parse flags (with environment fallbacks); exits with status 2 on bad input."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    args = parser.parse_args([*_env_defaults(parser, environ), *argv])
    if not args.lease_duration > args.renew_deadline > 1.2 * args.retry_period:
        parser.error("need --lease-duration > --renew-deadline > 1.2 x --retry-period")
    return Config(
        namespaces=args.namespaces,
        workers=args.workers,
        max_concurrent_reconciles_per_namespace=_per_namespace_cap(args),
        run_timeout=args.run_timeout,
        resync_period=args.resync_period,
        metrics_bind_address=f"{args.metrics_bind_address[0]}:{args.metrics_bind_address[1]}",
        health_probe_bind_address=(
            f"{args.health_probe_bind_address[0]}:{args.health_probe_bind_address[1]}"
        ),
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=args.leader_election_namespace or _default_namespace(),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        shutdown_timeout=args.shutdown_timeout,
        log_format=args.log_format,
        log_level=args.log_level,
        kubeconfig=args.kubeconfig or environ.get("KUBECONFIG") or None,
        identity=f"{socket.gethostname()}_{os.getpid()}",
        work_dir=args.work_dir,
        default_backend=args.default_backend,
        update_retry_base=args.update_retry_base,
        max_update_failures=int(args.max_update_failures),
    )
