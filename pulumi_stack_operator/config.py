"""The operator's command line: the manager's flags plus the operator's own.

The manager's flags (``controller.config``) are those of any controller; the operator adds
where Pulumi works (``--work-dir``), which backend Stacks default to, how long a run may
take, how failures are retried, and which runner runs Pulumi (``--runner``). Every flag
can also be set as ``PSO_<FLAG_NAME>`` (a flag on the command line wins).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from controller.config import Application, Config, parse, positive
from controller.config import build_parser as build_manager_parser

ENV_PREFIX = "PSO_"
RUNNERS = ("local", "pod")
"""``--runner`` choices. ``local``: the Pulumi CLI runs in the operator's own container;
``pod``: each run is a pod in the Stack's namespace, as the Stack's ServiceAccount."""


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


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the operator's own flags to the manager's ``parser``."""
    add = parser.add_argument
    add(
        "--runner",
        choices=RUNNERS,
        default="local",
        help="how Pulumi programs run: local runs the Pulumi CLI as a child process of the "
        "operator, in its container, with its Python interpreter; pod runs each operation "
        "in a pod of its own in the Stack's namespace, as the Stack's spec.serviceAccountName "
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
        "--max-update-failures",
        type=positive(int),
        default=5,
        help="consecutive failures after which a Stack is Stalled (RetriesExhausted) until "
        "its spec, source or a reconcile request changes (default: 5)",
    )


APPLICATION = Application(
    prog="pulumi-stack-operator",
    description="Reconcile pulumi.com/v1 Stacks through the Pulumi Automation API.",
    env_prefix=ENV_PREFIX,
    lease_name="pulumi-stack-operator",
    add_flags=add_flags,
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
    )
