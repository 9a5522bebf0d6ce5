"""The manager's configuration: command-line flags, each with an environment fallback.

The flags here are those of any controller built on this package: what to watch, how many
workers, leader election, the endpoints, logging, the kubeconfig. The program using the
manager describes itself with an ``Application``: its name and description (for
``--help``), its environment prefix, its default Lease name, and a function adding its
own flags to the same parser. ``parse(argv, app)`` returns both parts: the manager's
``Config`` and an ``argparse.Namespace`` with every flag, from which the application
reads its own (``parse_config`` when it has none). The argparse types below (``positive``,
``non_negative_int``) are for the application's flags too.

Every flag ``--some-flag``, the application's included, can also be set as the
environment variable ``<prefix>SOME_FLAG`` (a flag given on the command line wins).
``WATCH_NAMESPACE`` is accepted for ``--namespaces`` too, as operator-sdk operators read
it. A bad value is a usage error: a message on stderr and exit status 2, before anything
starts.

An application that names a selector flag (``Application.selector_flag``, e.g. the
operator's ``--stack-selector``) lets each installation manage only the objects whose labels
match a label selector (``controller.labels``: checked here with the API server's own
grammar, so a typo stops the process at start-up). The installations of one application
then elect a leader per selector: unless ``--leader-election-id`` names it, the Lease is
``<lease_name>-<first 8 hex digits of the SHA-256 of the selector's canonical form>``
(``lease_name_for``), so that installations with different selectors each lead, and two
with the same selector, however spelt, share one leader.

Every write the process makes is recorded in the written object's ``managedFields`` under
one name, ``Config.field_manager`` (the API's ``fieldManager``): the application's name
(``Application.prog``), and for a selector ``<name>:<the selector's canonical form>``
(``field_manager_for``), so that ``managedFields`` say which installation wrote what.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from controller.labels import EVERYTHING, Selector, SelectorError, parse_selector
from controller.logs import LEVELS, LogFormat
from controller.names import is_dns_label

_IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
FIELD_MANAGER_MAX = 128
"""The most characters the API server takes in a ``fieldManager``."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Validated manager settings; see ``build_parser`` for each one's meaning and default."""

    namespaces: tuple[str, ...]  # empty: all namespaces
    label_selector: Selector
    """Only objects whose labels it matches are listed, watched and reconciled (empty: all)."""
    workers: int
    max_concurrent_reconciles_per_namespace: int
    """At most this many reconciles of one namespace run at once; 0 means no limit.

    Namespaces take turns for free workers either way (round robin); the cap also keeps
    workers free for other namespaces while one namespace has many objects waiting.
    Default: half of ``workers``, at least 1.
    """
    resync_period: float
    metrics_bind_address: str
    metrics_secure: bool
    """Serve /metrics over HTTPS to callers the API server authenticates and authorizes."""
    metrics_cert_dir: str | None
    """``tls.crt`` and ``tls.key`` for secure metrics; None: a self-signed certificate."""
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
    field_manager: str
    """The name every write is recorded under in ``managedFields`` (``field_manager_for``)."""


def _no_flags(parser: argparse.ArgumentParser) -> None:
    """Add nothing: an application without flags of its own."""
    del parser


@dataclasses.dataclass(frozen=True)
class Application:
    """The program built on the manager, as its command line presents it."""

    prog: str
    """The program's name in usage lines (``usage: <prog> ...``)."""
    description: str
    """The first sentence of ``--help``; a sentence on the environment follows it."""
    env_prefix: str
    """Prefix of the environment variables standing in for flags, e.g. ``PSO_``."""
    lease_name: str
    """Default of ``--leader-election-id``: the Lease the replicas elect a leader on
    (with a label selector, ``lease_name_for`` derives one per selector from it)."""
    add_flags: Callable[[argparse.ArgumentParser], None] = _no_flags
    """Adds the application's own flags to the parser, after the manager's."""
    selector_flag: str | None = None
    """The flag taking a label selector of the objects to manage, e.g. ``--stack-selector``
    (environment variable ``<prefix>STACK_SELECTOR``); None: no such flag, every object."""
    objects: str = "objects"
    """What the objects are called in ``--help`` (plural), e.g. ``Stacks``."""


@dataclasses.dataclass(frozen=True)
class Parsed:
    """What ``parse`` returns: the manager's settings and every flag's value."""

    config: Config
    args: argparse.Namespace
    """Every flag by its ``dest``, the application's included, environment applied."""


def _address(value: str) -> tuple[str, int]:
    """Parse ``host:port`` (``:port`` binds all interfaces; port 0 disables)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        msg = f"{value!r} is not host:port"
        raise argparse.ArgumentTypeError(msg)
    return host or "0.0.0.0", int(port)  # noqa: S104 - the documented meaning of ":port"


def positive(kind: type[float]) -> Callable[[str], float]:
    """An argparse ``type``: a number of ``kind`` (``int`` or ``float``) greater than 0."""

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


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def duration(value: str) -> float:
    """An argparse ``type``: seconds, 0 or more, as a number or a duration (90s, 2m, 1h30m)."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            msg = f"{value!r} is not a duration (seconds, or a number with h, m and s: 90s, 2m)"
            raise argparse.ArgumentTypeError(msg) from None
        hours, minutes, secs = (float(part) if part else 0.0 for part in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if seconds < 0 or seconds != seconds or seconds == float("inf"):  # noqa: PLR0124 - NaN
        msg = f"{value!r} must be a finite duration of 0 or more"
        raise argparse.ArgumentTypeError(msg)
    return seconds


def non_negative_int(value: str) -> int:
    """An argparse ``type``: a whole number, 0 or more."""
    try:
        number = int(value)
    except ValueError:
        msg = f"{value!r} is not a whole number"
        raise argparse.ArgumentTypeError(msg) from None
    if number < 0:
        msg = f"{value!r} must be 0 or more"
        raise argparse.ArgumentTypeError(msg)
    return number


def label_selector(value: str) -> Selector:
    """An argparse ``type``: a label selector in ``kubectl -l`` syntax ("" selects all)."""
    try:
        return parse_selector(value)
    except SelectorError as err:
        msg = f"{value!r} is not a label selector: {err}"
        raise argparse.ArgumentTypeError(msg) from None


def lease_name_for(lease_name: str, selector: Selector) -> str:
    """The Lease of the installations managing ``selector``'s objects.

    ``lease_name`` itself for every object (the empty selector); otherwise ``lease_name``,
    ``-`` and the first 8 hex digits of the SHA-256 of the selector's canonical form
    (``str(selector)``), which spells one selector one way however it was written.
    """
    if selector.empty:
        return lease_name
    return f"{lease_name}-{_digest(selector)}"


def field_manager_for(name: str, selector: Selector) -> str:
    """The field manager of the installations managing ``selector``'s objects.

    ``name`` itself for every object (the empty selector); otherwise ``name``, ``:`` and the
    selector's canonical form (``str(selector)``, e.g. ``pulumi-stack-operator:shard!=a``),
    or, when that passes ``FIELD_MANAGER_MAX`` characters, the first 8 hex digits of its
    SHA-256 instead (the suffix of ``lease_name_for``). A selector's canonical form is
    printable ASCII, as the API server requires of a field manager.
    """
    if selector.empty:
        return name
    readable = f"{name}:{selector}"
    return readable if len(readable) <= FIELD_MANAGER_MAX else f"{name}:{_digest(selector)}"


def _digest(selector: Selector) -> str:
    """The first 8 hex digits of the SHA-256 of ``selector``'s canonical form."""
    return hashlib.sha256(str(selector).encode()).hexdigest()[:8]


def _namespaces(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    for name in names:
        if not is_dns_label(name):
            msg = f"{name!r} is not a valid namespace name"
            raise argparse.ArgumentTypeError(msg)
    return names


def _default_namespace() -> str:
    try:
        return Path(_IN_CLUSTER_NAMESPACE).read_text(encoding="utf-8").strip()
    except OSError:
        return "default"


def build_parser(app: Application) -> argparse.ArgumentParser:
    """The flag parser, ``app``'s flags included; ``--help`` is the reference for each."""
    parser = argparse.ArgumentParser(
        prog=app.prog,
        description=f"{app.description} Every flag can also be set as an environment "
        f"variable {app.env_prefix}<FLAG_NAME>.",
    )
    _add_work_flags(parser, app)
    _add_endpoint_flags(parser)
    _add_leader_election_flags(parser, app)
    _add_process_flags(parser)
    app.add_flags(parser)
    return parser


def _add_work_flags(parser: argparse.ArgumentParser, app: Application) -> None:
    """What is watched and how much runs at once."""
    add = parser.add_argument
    add(
        "--namespaces",
        type=_namespaces,
        default=(),
        help="comma-separated namespaces to watch (default: all; env also WATCH_NAMESPACE)",
    )
    if app.selector_flag is not None:
        add(
            app.selector_flag,
            type=label_selector,
            default=EVERYTHING,
            help=f"label selector (kubectl -l syntax, e.g. 'shard=a' or '!shard') of the "
            f"{app.objects} to manage: only those are listed, watched and reconciled, so that "
            f"installations with disjoint selectors share the {app.objects} (sharding); "
            f"{app.objects} whose labels stop matching are let go, never finalized "
            f"(default: all)",
        )
    add(
        "--workers",
        type=positive(int),
        default=2,
        help="concurrent reconciles (default: 2)",
    )
    add(
        "--max-concurrent-reconciles-per-namespace",
        type=non_negative_int,
        default=None,
        help="reconciles of one namespace running at once, so that a namespace with many "
        "objects waiting leaves workers to the others; namespaces also take turns for free "
        "workers; 0 for no limit (default: half of --workers, at least 1)",
    )
    add(
        "--resync-period",
        type=positive(float),
        default=600.0,
        help="seconds between re-checks of every cached object, from memory (default: 600)",
    )


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    """Where /metrics and the probes listen."""
    add = parser.add_argument
    add(
        "--metrics-bind-address",
        type=_address,
        default="127.0.0.1:8080",
        help="host:port serving /metrics; :port for every interface, as in a pod; "
        "port 0 disables (default: 127.0.0.1:8080)",
    )
    add(
        "--metrics-secure",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve /metrics over HTTPS, only to callers whose bearer token the API server "
        "accepts (TokenReview) and who may get the non-resource URL /metrics "
        "(SubjectAccessReview); needs create on tokenreviews and subjectaccessreviews "
        "(default: off, plain HTTP to anyone who reaches the address)",
    )
    add(
        "--metrics-cert-dir",
        default=None,
        help="--metrics-secure: directory with tls.crt and tls.key (a kubernetes.io/tls "
        "Secret's layout), read again when they change (default: a self-signed certificate "
        "made at start-up)",
    )
    add(
        "--health-probe-bind-address",
        type=_address,
        default="127.0.0.1:8081",
        help="host:port serving /healthz and /readyz; :port for every interface, as the "
        "kubelet's probes need; port 0 disables (default: 127.0.0.1:8081)",
    )


def _add_leader_election_flags(parser: argparse.ArgumentParser, app: Application) -> None:
    """Whether and how the replicas elect a leader."""
    lease_name = app.lease_name
    per_selector = (
        f"; with {app.selector_flag}: {lease_name}-<first 8 hex digits of the SHA-256 of "
        "the selector's canonical form>, one Lease per selector"
        if app.selector_flag
        else ""
    )
    add = parser.add_argument
    add(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="elect a leader on a Lease so that only one replica reconciles (default: off)",
    )
    add(
        "--leader-election-id",
        default=None,
        help=f"name of the Lease (default: {lease_name}{per_selector})",
    )
    add(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: the pod's namespace, else 'default')",
    )
    add(
        "--lease-duration",
        type=positive(float),
        default=60.0,
        help="seconds a standby waits before taking over a silent leader's Lease (default: 60)",
    )
    add(
        "--renew-deadline",
        type=positive(float),
        default=40.0,
        help="seconds the leader keeps trying to renew before it gives up (default: 40)",
    )
    add(
        "--retry-period",
        type=positive(float),
        default=5.0,
        help="seconds between Lease acquire/renew attempts (default: 5)",
    )


def _add_process_flags(parser: argparse.ArgumentParser) -> None:
    """Shutdown, logging and the cluster connection."""
    add = parser.add_argument
    add(
        "--shutdown-timeout",
        type=positive(float),
        default=600.0,
        help="seconds running reconciles get to finish after SIGTERM before they are "
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
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, else in-cluster config, else ~/.kube/config)",
    )


def _env_defaults(
    parser: argparse.ArgumentParser, prefix: str, environ: Mapping[str, str]
) -> list[str]:
    """Turn ``<prefix>*`` variables into flags placed before the real ones (which then win)."""
    flags: list[str] = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public accessor
        if not action.option_strings or action.dest == "help":
            continue
        name = prefix + action.dest.upper()
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


def parse(
    argv: Sequence[str], app: Application, environ: Mapping[str, str] | None = None
) -> Parsed:
    """Parse flags with environment fallbacks (``environ``, default ``os.environ``).

    Exits with status 2 and a usage message on bad input, the application's flags too.
    """
    environ = os.environ if environ is None else environ
    parser = build_parser(app)
    args = parser.parse_args([*_env_defaults(parser, app.env_prefix, environ), *argv])
    if not args.lease_duration > args.renew_deadline > 1.2 * args.retry_period:
        parser.error("need --lease-duration > --renew-deadline > 1.2 x --retry-period")
    return Parsed(_config(args, app, environ), args)


def parse_config(
    argv: Sequence[str], app: Application, environ: Mapping[str, str] | None = None
) -> Config:
    """``parse(argv, app, environ).config``, for an application without flags of its own."""
    return parse(argv, app, environ).config


def _config(args: argparse.Namespace, app: Application, environ: Mapping[str, str]) -> Config:
    """The manager's settings from the parsed flags."""
    selector = _selector(args, app)
    return Config(
        namespaces=args.namespaces,
        label_selector=selector,
        workers=args.workers,
        max_concurrent_reconciles_per_namespace=_per_namespace_cap(args),
        resync_period=args.resync_period,
        metrics_bind_address=f"{args.metrics_bind_address[0]}:{args.metrics_bind_address[1]}",
        metrics_secure=args.metrics_secure,
        metrics_cert_dir=args.metrics_cert_dir,
        health_probe_bind_address=(
            f"{args.health_probe_bind_address[0]}:{args.health_probe_bind_address[1]}"
        ),
        leader_elect=args.leader_elect,
        leader_election_id=args.leader_election_id or lease_name_for(app.lease_name, selector),
        leader_election_namespace=args.leader_election_namespace or _default_namespace(),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        shutdown_timeout=args.shutdown_timeout,
        log_format=args.log_format,
        log_level=args.log_level,
        kubeconfig=args.kubeconfig or environ.get("KUBECONFIG") or None,
        identity=instance_identity(),
        field_manager=field_manager_for(app.prog, selector),
    )


def instance_identity() -> str:
    """This process's identity: ``<hostname>_<pid>_<6 random hex digits>``.

    The random part makes every start a new instance: a container restarted in the same
    pod has the same hostname and, under an init process, usually the same pid, and must
    not take the run its predecessor left for its own (it attaches to it instead).
    """
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def _selector(args: argparse.Namespace, app: Application) -> Selector:
    """The selector flag's value, or every object for an application without one."""
    if app.selector_flag is None:
        return EVERYTHING
    selector: Selector = getattr(args, app.selector_flag.lstrip("-").replace("-", "_"))
    return selector
