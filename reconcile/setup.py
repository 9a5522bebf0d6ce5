"""Build the Stack reconciler from the manager's context and the operator's flags."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pulumi import automation as auto

from controller.manager import ManagerContext, Resource
from reconcile import decide
from reconcile.automation import DEFAULT_INTERRUPT_GRACE, Runner
from reconcile.stack import GROUP, PLURAL, VERSION, Settings, StackReconciler
from status.events import EventRecorder
from status.metrics import MetricsHandler, StackMetrics
from status.writer import StatusWriter

STACKS = Resource(GROUP, VERSION, PLURAL)


def pulumi_command() -> auto.PulumiCommand:
    """The Pulumi CLI on PATH (checked once, at start-up: a missing CLI fails fast)."""
    return auto.PulumiCommand()


def new_stack_reconciler(context: ManagerContext) -> StackReconciler:
    """A StackReconciler wired to the manager's API client, cache and registry."""
    cfg = context.config
    work_root = Path(cfg.work_dir)
    work_root.mkdir(parents=True, exist_ok=True)
    pulumi_home = work_root / ".pulumi-home"
    pulumi_home.mkdir(exist_ok=True)
    # Python programs run with the operator's own interpreter (and its packages) unless
    # their Pulumi.yaml names a virtualenv.
    os.environ.setdefault("PULUMI_PYTHON_CMD", sys.executable)
    os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    metrics = StackMetrics(context.registry)
    context.handlers.append(MetricsHandler(metrics))
    writer = StatusWriter(
        context.api_client,
        context.store,
        GROUP,
        VERSION,
        PLURAL,
        context.registry,
        on_written=metrics.record_transitions,
    )
    recorder = EventRecorder(context.api_client, cfg.identity, registry=context.registry)
    context.closers.extend((writer.close, recorder.close))
    settings = Settings(
        work_root=work_root,
        default_backend=cfg.default_backend,
        identity=cfg.identity,
        sole_runner=cfg.leader_elect,
        # A deposed leader stops renewing at renew_deadline and kills its CLI at most
        # DEFAULT_INTERRUPT_GRACE later; we hold the Lease lease_duration after its last
        # renewal at the earliest.
        takeover_delay=max(0.0, cfg.renew_deadline + DEFAULT_INTERRUPT_GRACE - cfg.lease_duration),
        leading_since=context.leading_since,
        policy=decide.Policy(
            retry_base_delay=cfg.update_retry_base, max_update_failures=cfg.max_update_failures
        ),
    )
    return StackReconciler(
        context.api_client,
        context.store,
        Runner(pulumi_command(), pulumi_home),
        writer,
        recorder,
        settings,
        metrics,
    )
