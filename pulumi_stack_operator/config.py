"""The operator's command line: the manager's flags plus the operator's own.

The manager's flags (``controller.config``) are those of any controller; the operator adds
where Pulumi works (``--work-dir``), which backend Stacks default to, how long a run may
take, how failures are retried, and which runner runs Pulumi (``--runner``); it names the
manager's selector flag ``--stack-selector`` (the Stacks of one shard; the Lease follows
the selector). Every flag can also be set as ``PSO_<FLAG_NAME>`` (a flag on the command
line wins).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from controller.config import Application, Config, duration, parse, positive
from controller.config import build_parser as build_manager_parser
from controller.names import is_dns_label, is_dns_subdomain
from pulumi_stack_operator.telemetry import TracingConfigError, check_url
from reconcile.tenancy import ANY, RUNNER_LABEL, Tenancy
from workspace.runner.pod.spec import DEFAULT_REQUESTS

ENV_PREFIX = "PSO_"
RUNNERS = ("local", "pod", "agent")
"""``--runner`` choices. ``local``: the Pulumi CLI runs in the operator's own container;
``pod``: each run is a pod in the Stack's namespace, as the Stack's ServiceAccount;
``agent`` (for development and tests): each operation runs through the run pod's agent as
a child process on the operator's machine, no pod isolation, the same trust as ``local``."""


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    """Validated settings: the manager's, then the operator's own (see ``add_flags``)."""

    manager: Config
    runner: str
    """Which runner runs Pulumi operations; one of ``RUNNERS``."""
    run_image: str | None
    """The run pods' image (``pod`` runner); None: the operator's own pod's image."""
    run_timeout: float
    """Seconds one Pulumi run may take before it is interrupted (default 7200).

    A Stack's ``spec.timeoutSeconds`` overrides it for that Stack.
    """
    work_dir: str
    default_backend: str | None
    update_retry_base: float
    max_update_failures: int
    dependency_cache_size: int = 10 * 1024**3
    """Bytes of installed dependencies and download caches kept per cache (LRU eviction)."""
    plugin_mirror: str | None = None
    """The URL every Pulumi plugin is downloaded from; None: each plugin's own source."""
    run_cache_claim: str = "pulumi-cache"
    """``pod`` runner: the PersistentVolumeClaim of a Stack's namespace that its run pods
    mount as their dependency and plugin cache, when the namespace has one ("": never)."""
    max_run_timeout: float = 86400.0
    """The most seconds any run may take: a larger ``spec.timeoutSeconds`` is cut to it."""
    tenancy: Tenancy = dataclasses.field(default_factory=Tenancy)
    """``pod`` runner: what Stacks may ask of their run pods (priority, tolerations, SAs)."""
    source_discovery_period: float = 30.0
    """Seconds between two looks for program source kinds not served yet (Flux's)."""
    run_pod_requests: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_REQUESTS)
    )
    """``pod`` runner: a run pod's resource requests for each resource its Stack's
    ``workspaceTemplate`` neither requests nor limits (empty: none)."""
    otel_endpoint: str | None = None
    """The OTLP/gRPC collector of ``--otel-endpoint``; None: the ``OTEL_*`` variables say."""
    run_pod_keep_warm: float = 0.0
    """``pod`` runner: seconds a run pod that reported waits for its Stack's next run (0: none)."""


_QUANTITY = re.compile(r"(?P<number>\d+)(?P<unit>[KMGT]i?)?")
_UNITS = {"K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}
_UNITS |= {f"{unit}i": 1024 ** (index + 1) for index, unit in enumerate("KMGT")}


def byte_quantity(value: str) -> int:
    """An argparse ``type``: bytes as a Kubernetes quantity (``500Mi``, ``10Gi``, ``2G``, ``0``)."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        msg = f"{value!r} is not a size such as 500Mi, 10Gi or 2G"
        raise argparse.ArgumentTypeError(msg)
    return int(match["number"]) * _UNITS.get(match["unit"] or "", 1)


def mirror_url(value: str) -> str:
    """An argparse ``type``: an http(s) URL without credentials, ``=`` or ``,``.

    The CLI reads it from ``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES`` (``regexp=URL,…``), which
    cannot hold those two characters; run pods get it in their spec, where no credential
    belongs.
    """
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        msg = f"{value!r} is not an http:// or https:// URL"
        raise argparse.ArgumentTypeError(msg)
    if parsed.username is not None or parsed.password is not None:
        msg = "the plugin mirror's URL must not hold credentials"
        raise argparse.ArgumentTypeError(msg)
    if "=" in value or "," in value:
        msg = f"{value!r}: the plugin mirror's URL cannot hold '=' or ','"
        raise argparse.ArgumentTypeError(msg)
    return value


def collector_url(value: str) -> str:
    """An argparse ``type``: an OTLP/gRPC collector's http(s) URL, without credentials."""
    try:
        check_url("--otel-endpoint", value)
    except TracingConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return value


_REQUEST = re.compile(r"\d+(\.\d+)?(m|[kMGTPE]|[KMGTPE]i)?")
REQUESTABLE = ("cpu", "memory", "ephemeral-storage")


def resource_requests(value: str) -> dict[str, str]:
    """An argparse ``type``: ``name=quantity`` pairs, comma-separated (``cpu=100m,memory=256Mi``).

    Names are ``REQUESTABLE``, each once; quantities are Kubernetes quantities; "" is none.
    """
    requests: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, _, quantity = (s.strip() for s in part.partition("="))
        if name not in REQUESTABLE or name in requests:
            known = ", ".join(REQUESTABLE)
            msg = f"{part!r}: name each of {known} at most once, as name=quantity"
            raise argparse.ArgumentTypeError(msg)
        if not _REQUEST.fullmatch(quantity):
            msg = f"{part!r}: {quantity!r} is not a quantity such as 100m, 0.5, 256Mi or 1Gi"
            raise argparse.ArgumentTypeError(msg)
        requests[name] = quantity
    return requests


def claim_name(value: str) -> str:
    """An argparse ``type``: a PersistentVolumeClaim name (a DNS label), or "" for none."""
    if value and not is_dns_label(value):
        msg = f"{value!r} is not a PersistentVolumeClaim name (lower case, digits, '-')"
        raise argparse.ArgumentTypeError(msg)
    return value


def name_list(kind: str, *, wildcard: bool = False) -> Callable[[str], frozenset[str]]:
    """An argparse ``type``: comma-separated ``kind`` names (DNS subdomains); "" is none.

    ``wildcard``: ``*`` may stand for every name.
    """

    def parse(value: str) -> frozenset[str]:
        names = frozenset(part.strip() for part in value.split(",") if part.strip())
        for name in names:
            if not (wildcard and name == ANY) and not is_dns_subdomain(name):
                msg = f"{name!r} is not a {kind} name (lower case, digits, '-', '.')"
                raise argparse.ArgumentTypeError(msg)
        return names

    return parse


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the operator's own flags to the manager's ``parser``."""
    _add_runner_flags(parser)
    _add_tenancy_flags(parser)


def _add_tenancy_flags(parser: argparse.ArgumentParser) -> None:
    """What Stacks may ask of their runs beyond their namespace's rights."""
    add = parser.add_argument
    add(
        "--max-run-timeout",
        type=positive(float),
        default=86400.0,
        help="the most seconds any run may take: a Stack's larger spec.timeoutSeconds (and a "
        "larger --run-timeout) is cut to it, and the Stack's status says so (default: 86400)",
    )
    add(
        "--allowed-priority-classes",
        type=name_list("PriorityClass"),
        default=frozenset(),
        help="--runner=pod: comma-separated PriorityClasses a Stack's run pods may use "
        "(workspaceTemplate...priorityClassName); any other is refused with InvalidSpec "
        "(default: none)",
    )
    add(
        "--allow-any-toleration",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="--runner=pod: let Stacks' run pods tolerate every taint (a toleration without a "
        "key) and the control plane's taints; otherwise those are refused with InvalidSpec "
        "(default: off)",
    )
    add(
        "--allowed-service-accounts",
        type=name_list("ServiceAccount", wildcard=True),
        default=frozenset({"default"}),
        help="--runner=pod: comma-separated ServiceAccount names a Stack may run as in its "
        f"namespace; others must carry the label {RUNNER_LABEL}=true; '*' allows every "
        "ServiceAccount (default: default)",
    )


def _add_runner_flags(parser: argparse.ArgumentParser) -> None:
    """Which runner runs Pulumi, where, and for how long."""
    add = parser.add_argument
    add(
        "--runner",
        choices=RUNNERS,
        default="local",
        help="how Pulumi programs run: local runs the Pulumi CLI as a child process of the "
        "operator, in its container, with its Python interpreter; pod runs each operation "
        "in a pod of its own in the Stack's namespace, as the Stack's spec.serviceAccountName; "
        "agent (for development and tests) runs each operation through the run pod's agent as "
        "a child process on the operator's machine, no pod isolation, the same trust as local "
        "(default: local)",
    )
    add(
        "--run-image",
        default=None,
        help="image of the run pods (--runner=pod) unless a Stack's workspaceTemplate names "
        "one (default: the image of the operator's own pod, read from the API server "
        "through POD_NAME and POD_NAMESPACE)",
    )
    add(
        "--run-timeout",
        type=positive(float),
        default=7200.0,
        help="seconds one Pulumi run may take before it is interrupted; a Stack's "
        "spec.timeoutSeconds overrides it (default: 7200)",
    )
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
        type=positive(float),
        default=10.0,
        help="seconds before the first retry of a failed update; doubles per failure up "
        "to the Stack's retryMaxBackoffDurationSeconds (default: 10)",
    )
    add(
        "--dependency-cache-size",
        type=byte_quantity,
        default=10 * 1024**3,
        help="size the cache of programs' installed dependencies and downloads may reach "
        "before the least recently used are evicted, as a quantity (500Mi, 10Gi); one cache "
        "for the local runner (in --work-dir), one per namespace for the pod runner "
        "(default: 10Gi)",
    )
    add(
        "--plugin-mirror",
        type=mirror_url,
        default=None,
        help="http(s) URL that every Pulumi plugin is downloaded from, as release archives "
        "(pulumi-<kind>-<name>-v<version>-<os>-<arch>.tar.gz), for clusters without internet "
        "access (default: each plugin's own source)",
    )
    add(
        "--run-cache-claim",
        type=claim_name,
        default="pulumi-cache",
        help="--runner=pod: the PersistentVolumeClaim, in a Stack's namespace, that its run "
        "pods mount as their dependency and plugin cache when the namespace has one; without "
        "it each run installs into its own pod; '' never mounts one (default: pulumi-cache)",
    )
    add(
        "--run-pod-requests",
        type=resource_requests,
        default=dict(DEFAULT_REQUESTS),
        help="--runner=pod: the resource requests of a run pod's containers for each "
        "resource (cpu, memory, ephemeral-storage) its Stack's workspaceTemplate neither "
        "requests nor limits, as name=quantity pairs; '' sets none, leaving them to the "
        "namespace's LimitRange (default: cpu=100m,memory=256Mi)",
    )
    add(
        "--run-pod-keep-warm",
        type=duration,
        default=0.0,
        help="--runner=pod: how long a run pod that has reported its run waits for its "
        "Stack's next run, which it then takes instead of a new pod (a burst of changes pays "
        "one pod start), as seconds or a duration (60s, 2m); only a pod whose run checks its "
        "source out itself (no gitAuth, no init containers, the operator's image) and whose "
        "Secrets and ConfigMaps are unchanged takes a run; the operator needs pods/exec; the "
        "pulumi_stack_run_pods_idle gauge counts the pods waiting; 0 keeps none (default: 0)",
    )
    add(
        "--otel-endpoint",
        type=collector_url,
        default=None,
        help="the OpenTelemetry collector (OTLP/gRPC, http://host:4317 or https://…) that a "
        "trace of every reconcile and run goes to; mirrors OTEL_EXPORTER_OTLP_TRACES_ENDPOINT "
        "and wins over it, the other OTEL_* variables still apply (default: tracing is on "
        "only when those variables name a collector)",
    )
    add(
        "--source-discovery-period",
        type=positive(float),
        default=30.0,
        help="seconds between two looks for the program source kinds the cluster does not "
        "serve yet (Flux's GitRepository, OCIRepository, Bucket; Program), so that a Flux "
        "installed later is watched without a restart (default: 30)",
    )
    add(
        "--max-update-failures",
        type=positive(int),
        default=5,
        help="consecutive failures after which a Stack is Stalled (RetriesExhausted) until "
        "its spec, source or a reconcile request changes (default: 5)",
    )


SELECTOR_FLAG = "--stack-selector"
"""Only the Stacks whose labels match this selector are managed (``Config.label_selector``)."""

APPLICATION = Application(
    prog="pulumi-stack-operator",
    description="Reconcile pulumi.com/v1 Stacks through the Pulumi Automation API.",
    env_prefix=ENV_PREFIX,
    lease_name="pulumi-stack-operator",
    add_flags=add_flags,
    selector_flag=SELECTOR_FLAG,
    objects="Stacks",
)


def build_parser() -> argparse.ArgumentParser:
    """The operator's whole flag parser; ``--help`` is the reference for every flag."""
    return build_manager_parser(APPLICATION)


def parse_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> OperatorConfig:
    """Parse flags (environment fallbacks from ``environ``, default ``os.environ``).

    Exits with status 2 and a usage message on bad input.
    """
    parsed = parse(argv, APPLICATION, environ)
    args = parsed.args
    return OperatorConfig(
        manager=parsed.config,
        runner=args.runner,
        run_image=args.run_image,
        run_timeout=args.run_timeout,
        work_dir=args.work_dir,
        default_backend=args.default_backend,
        update_retry_base=args.update_retry_base,
        max_update_failures=int(args.max_update_failures),
        dependency_cache_size=args.dependency_cache_size,
        plugin_mirror=args.plugin_mirror,
        run_cache_claim=args.run_cache_claim,
        run_pod_requests=args.run_pod_requests,
        run_pod_keep_warm=args.run_pod_keep_warm,
        otel_endpoint=args.otel_endpoint,
        max_run_timeout=args.max_run_timeout,
        source_discovery_period=args.source_discovery_period,
        tenancy=Tenancy(
            allowed_priority_classes=args.allowed_priority_classes,
            allow_any_toleration=args.allow_any_toleration,
            allowed_service_accounts=args.allowed_service_accounts,
        ),
    )
