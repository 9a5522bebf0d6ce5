"""Build the Stack reconciler from the manager's context and the operator's flags."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from pulumi import automation as auto

from controller.manager import ManagerContext, Resource
from reconcile import decide
from reconcile.acknowledge import Acknowledger
from reconcile.automation import DEFAULT_INTERRUPT_GRACE, Runner
from reconcile.stack import GROUP, PLURAL, VERSION, Settings, StackReconciler
from status.events import EventRecorder
from status.metrics import MetricsHandler, StackMetrics
from status.writer import StatusWriter

STACKS = Resource(GROUP, VERSION, PLURAL)


def pulumi_command() -> auto.PulumiCommand:
    """The Pulumi CLI on the operator's PATH, as an absolute path (symlinks resolved).

    Found and version-checked once, at start-up: a missing CLI fails fast, and a Stack
    whose ``envRefs`` set ``PATH`` cannot substitute another ``pulumi``. The language
    host and bundled plugins are found next to the real binary (the runner puts its
    directory first on the CLI's PATH).
    """
    found = shutil.which("pulumi")
    if found is None:
        msg = "the pulumi CLI is not on PATH"
        raise FileNotFoundError(msg)
    binary = Path(found).resolve()
    if binary.parent.name == "bin":  # the SDK runs <root>/bin/pulumi
        return auto.PulumiCommand(root=str(binary.parent.parent))
    command = auto.PulumiCommand()  # checks the same binary: PATH is unchanged
    command.command = str(binary)
    return command


def new_stack_reconciler(context: ManagerContext) -> StackReconciler:
    """A StackReconciler wired to the manager's API client, cache and registry."""
    cfg = context.config
    # Absolute: the CLI runs in each Stack's checkout, and PULUMI_HOME must not move.
    work_root = Path(cfg.work_dir).absolute()
    work_root.mkdir(parents=True, exist_ok=True)
    # Every Stack has its own PULUMI_HOME (<work_root>/<namespace>/<name>/home); this one
    # only holds the plugin store they share. An older operator used it as every Stack's
    # home: a token it saved there must not outlive the upgrade.
    plugin_store = work_root / ".pulumi-home"
    plugin_store.mkdir(exist_ok=True)
    (plugin_store / "credentials.json").unlink(missing_ok=True)
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

    # A new generation is acknowledged at once, even while every worker is in a long run;
    # only by the replica that runs the workers (with leader election: the leader).
    def active() -> bool:
        return not cfg.leader_elect or context.leading_since() is not None

    acknowledger = Acknowledger(writer, active=active)
    context.handlers.append(acknowledger)
    context.closers.extend((acknowledger.close, writer.close, recorder.close))
    context.liveness_checks.extend((acknowledger.alive, writer.alive, recorder.alive))
    settings = Settings(
        work_root=work_root,
        default_backend=cfg.default_backend,
        run_timeout=cfg.run_timeout,
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
        Runner(pulumi_command(), plugin_store),
        writer,
        recorder,
        settings,
        metrics,
    )
