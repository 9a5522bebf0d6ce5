"""Build the Stack reconciler and its collaborators from the manager's context and the flags.

One place decides what talks to what: the status writer reads and records through the
manager's read-your-writes view; metrics, the acknowledger and the Event recorder hang off
the manager's registry, handlers, closers and liveness checks; the runner is the one
``--runner`` names (``agent``: the run pod's agent without a pod), and its traits shape the
reconciler's settings. Everything that writes to the API server (the status writer, the
Event recorder, the finalizer patcher, the pod runner) writes as the manager's
``Config.field_manager``, as the manager's leader election does.

With ``--stack-selector`` (a shard) a Stack can leave this process while it works on it:
the informer then delivers a delete, which is not the Stack's deletion. So, in a shard,
the run interrupter only hears deletions announced by ``deletionTimestamp`` (a departure
stops the run as a shutdown does: the manager releases its reconcile), no Event is posted
about a Stack this process no longer has, and an update another instance left unconcluded
is not taken for a dead one (``Settings.sole_runner``): it may be another shard's, still
running, and its lock is waited for instead of broken.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from controller.cache import Object, ObjectKey
from controller.coreapi import CoreApi
from controller.informer import DeletedFinalStateUnknown
from controller.manager import ManagerContext, Resource
from pulumi_stack_operator.config import OperatorConfig
from pulumi_stack_operator.pulumi_cli import VERSION_MEMO, pulumi_command
from pulumi_stack_operator.source_watch import SourceWatch
from reconcile.accounts import ServiceAccountReader
from reconcile.acknowledge import Acknowledger
from reconcile.collaborators import (
    Collaborators,
    EventPoster,
    GitSource,
    ObjectView,
    StackPatcher,
)
from reconcile.interrupts import RunInterrupts
from reconcile.policy import Policy
from reconcile.refs import SecretReader
from reconcile.stack import GROUP, PLURAL, VERSION, Settings, StackReconciler
from status.events import EventRecorder
from status.metrics import MetricsHandler, RunPodMetrics, StackMetrics, Vocabulary
from status.writer import StatusWriter
from workspace.runner import (
    DEFAULT_INTERRUPT_GRACE,
    LocalRunner,
    PodRunner,
    RunCaching,
    Runner,
    RunnerTraits,
    vocabulary,
)
from workspace.runner.agent.env import Caching
from workspace.runner.agent.runner import AgentRunner

STACKS = Resource(GROUP, VERSION, PLURAL)
RUNNER_VOCABULARY = Vocabulary(
    install_kinds=vocabulary.INSTALL_KINDS,
    caches=vocabulary.CACHES,
    pod_failure_reasons=vocabulary.POD_FAILURE_REASONS,
)
"""The runners' words the metrics are labelled by (``workspace.runner.vocabulary``)."""


def local_runner(context: ManagerContext, cfg: OperatorConfig, plugin_store: Path) -> Runner:
    """The ``local`` runner: the Pulumi CLI on PATH, run by this process.

    Programs' dependencies are cached in the work root's ``.cache`` (no namespace can have
    that name: namespaces are DNS labels), and so is the CLI's version (``cli_memo``).
    """
    return LocalRunner(
        pulumi_command(memo=cli_memo(plugin_store)),
        plugin_store,
        cache=plugin_store.parent / ".cache",
        cache_limit=cfg.dependency_cache_size,
        plugin_mirror=cfg.plugin_mirror,
        clock=context.clock,
    )


def pod_runner(context: ManagerContext, cfg: OperatorConfig, plugin_store: Path) -> Runner:
    """The ``pod`` runner: run pods of ``--run-image``, else of the operator's own image."""
    del plugin_store
    image = cfg.run_image or own_image(context.api_client, os.environ)
    metrics = RunPodMetrics(context.registry, RUNNER_VOCABULARY)
    caching = RunCaching(cfg.run_cache_claim, cfg.dependency_cache_size, cfg.plugin_mirror)
    runner = PodRunner(
        context.api_client,
        image,
        metrics=metrics,
        caching=caching,
        clock=context.clock,
        field_manager=cfg.manager.field_manager,
        requests=cfg.run_pod_requests,
        keep_warm=cfg.run_pod_keep_warm,
    )
    context.closers.append(runner.close)  # no warm run pod outlives the operator
    return runner


def agent_runner(context: ManagerContext, cfg: OperatorConfig, plugin_store: Path) -> Runner:
    """The ``agent`` runner: the run pod's agent as child processes, no pod (development).

    Each run's private workspace is under the work root's ``.agent-runs``, the agent's
    dependency and plugin cache its ``.agent-cache`` (namespaces are DNS labels: no clash).
    """
    work_root = plugin_store.parent
    caching = Caching(work_root / ".agent-cache", cfg.dependency_cache_size, cfg.plugin_mirror)
    return AgentRunner(
        CoreApi(context.api_client),
        work_root / ".agent-runs",
        pulumi_command(memo=cli_memo(plugin_store)),
        caching=caching,
        clock=context.clock,
    )


def cli_memo(plugin_store: Path) -> Path:
    """Where this operator remembers its CLI's version: the work root's ``.cache``.

    A restart with the same binary skips ``pulumi version`` (one CLI start, some 0.1 s
    before the first reconcile); a replaced binary is asked again.
    """
    return plugin_store.parent / ".cache" / VERSION_MEMO


def own_image(api_client: client.ApiClient, environ: Mapping[str, str]) -> str:
    """The image of this operator's own container (``POD_NAME``/``POD_NAMESPACE``).

    Raises ``ValueError`` when the variables are unset or the pod has no such container:
    ``--runner=pod`` outside a pod needs ``--run-image``.
    """
    name, namespace = environ.get("POD_NAME"), environ.get("POD_NAMESPACE")
    if not name or not namespace:
        msg = "--runner=pod needs --run-image, or POD_NAME and POD_NAMESPACE to find its own"
        raise ValueError(msg)
    pod = CoreApi(api_client).read_namespaced_pod(name, namespace)
    for container in pod.get("spec", {}).get("containers", ()):
        if container.get("name") == OWN_CONTAINER:
            return str(container.get("image"))
    msg = f"pod {namespace}/{name} has no container named {OWN_CONTAINER}; set --run-image"
    raise ValueError(msg)


OWN_CONTAINER = "manager"
RUNNERS: Mapping[str, Callable[[ManagerContext, OperatorConfig, Path], Runner]] = {
    "local": local_runner,
    "pod": pod_runner,
    "agent": agent_runner,
}
"""Each ``--runner`` choice's factory, given the manager's context, flags and plugin store."""


def prepare_work_root(work_dir: str) -> tuple[Path, Path]:
    """Create the work root and the shared plugin store; returns both, absolute.

    Every Stack has its own PULUMI_HOME (``<work_root>/<namespace>/<name>/home``); the
    plugin store only holds the plugins they share. An older operator used it as every
    Stack's home: a token it saved there must not outlive the upgrade, so it is removed.
    """
    # Absolute: the CLI runs in each Stack's checkout, and PULUMI_HOME must not move.
    work_root = Path(work_dir).absolute()
    work_root.mkdir(parents=True, exist_ok=True)
    plugin_store = work_root / ".pulumi-home"
    plugin_store.mkdir(exist_ok=True)
    (plugin_store / "credentials.json").unlink(missing_ok=True)
    return work_root, plugin_store


class DeletionsAnnounced:
    """An informer handler forwarding adds and updates only (for a shard's run interrupter).

    In a shard a delete event may be a Stack leaving the selection, not its deletion; a
    deletion of a Stack with the finalizer is announced by an update first
    (``deletionTimestamp``), which is forwarded.
    """

    def __init__(self, handler: RunInterrupts) -> None:
        """Forward to ``handler``."""
        self._handler = handler

    def on_add(self, obj: Object) -> None:
        """Forward."""
        self._handler.on_add(obj)

    def on_update(self, old: Object, new: Object) -> None:
        """Forward."""
        self._handler.on_update(old, new)

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Drop: the manager stops the Stack's reconcile as on shutdown."""


class SelectedEvents:
    """Posts Events only about Stacks this process still has (a shard's Event poster)."""

    def __init__(self, poster: EventPoster, view: ObjectView) -> None:
        """Post through ``poster`` when ``view`` still has the Stack."""
        self._poster, self._view = poster, view

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post, unless the Stack has left this process's selection (or is gone)."""
        if self._view.get(ObjectKey.of(obj)) is None:
            return
        self._poster.post(obj, type_, reason, message)


def settings(
    cfg: OperatorConfig, context: ManagerContext, work_root: Path, traits: RunnerTraits
) -> Settings:
    """The reconciler's settings from the flags, the leader election and the runner's traits."""
    manager = cfg.manager
    return Settings(
        work_root=work_root,
        default_backend=cfg.default_backend,
        run_timeout=cfg.run_timeout,
        max_run_timeout=cfg.max_run_timeout,
        tenancy=cfg.tenancy,
        identity=manager.identity,
        # The Lease makes this replica its shard's only runner, but a Stack that moved in
        # from another shard may still have that shard's update running.
        sole_runner=manager.leader_elect and manager.label_selector.empty,
        # A deposed leader stops renewing at renew_deadline and kills its CLI at most
        # DEFAULT_INTERRUPT_GRACE later; we hold the Lease lease_duration after its last
        # renewal at the earliest.
        # A run that outlives its operator is not killed with it: nothing to wait for.
        takeover_delay=0.0
        if traits.outlives_operator
        else max(0.0, manager.renew_deadline + DEFAULT_INTERRUPT_GRACE - manager.lease_duration),
        leading_since=context.leading_since,
        runner_traits=traits,
        policy=Policy(
            retry_base_delay=cfg.update_retry_base, max_update_failures=cfg.max_update_failures
        ),
    )


def new_stack_reconciler(context: ManagerContext, cfg: OperatorConfig) -> StackReconciler:
    """A StackReconciler wired to the manager's API client, cache, view and registry."""
    work_root, plugin_store = prepare_work_root(cfg.work_dir)
    # Python programs run with the operator's own interpreter (and its packages) unless
    # their Pulumi.yaml names a virtualenv.
    os.environ.setdefault("PULUMI_PYTHON_CMD", sys.executable)
    os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    metrics = StackMetrics(context.registry, RUNNER_VOCABULARY)
    context.handlers.append(MetricsHandler(metrics))
    writer = StatusWriter(
        context.api_client,
        context.view,
        GROUP,
        VERSION,
        PLURAL,
        context.registry,
        on_written=metrics.record_transitions,
        clock=context.clock,
        field_manager=cfg.manager.field_manager,
    )
    recorder = EventRecorder(
        context.api_client,
        cfg.manager.identity,
        registry=context.registry,
        clock=context.clock,
        field_manager=cfg.manager.field_manager,
    )

    # A new generation is acknowledged at once, even while every worker is in a long run;
    # only by the replica that runs the workers (with leader election: the leader).
    def active() -> bool:
        return not cfg.manager.leader_elect or context.leading_since() is not None

    acknowledger = Acknowledger(writer, context.view, active=active, clock=context.clock)
    interrupts = RunInterrupts()
    sharded = not cfg.manager.label_selector.empty
    context.handlers.extend(
        (acknowledger, DeletionsAnnounced(interrupts) if sharded else interrupts)
    )
    # Programs and Flux sources: their informers enqueue the (selected) Stacks naming them.
    sources = SourceWatch(
        context.api_client,
        context.config.namespaces or (None,),
        context.store,
        context.enqueue,
        context.clock,
        period=cfg.source_discovery_period,
    )
    context.starters.append(sources.run)
    context.closers.extend((acknowledger.close, writer.close, recorder.close, sources.stop))
    context.liveness_checks.extend(
        (acknowledger.alive, writer.alive, recorder.alive, sources.alive)
    )
    runner = RUNNERS[cfg.runner](context, cfg, plugin_store)
    parts = Collaborators(
        runner=runner,
        writer=writer,
        view=context.view,
        events=SelectedEvents(recorder, context.view) if sharded else recorder,
        metrics=metrics,
        secrets=functools.partial(SecretReader, context.api_client),
        patcher=StackPatcher(context.api_client, cfg.manager.field_manager),
        source=GitSource(),
        clock=context.clock,
        interrupts=interrupts,
        accounts=ServiceAccountReader(context.api_client) if runner.traits.in_pods else None,
        objects=sources,
    )
    return StackReconciler(parts, settings(cfg, context, work_root, runner.traits))


def stack_reconciler_factory(cfg: OperatorConfig) -> Callable[[ManagerContext], StackReconciler]:
    """The manager's reconciler factory for ``cfg``: ``new_stack_reconciler(context, cfg)``."""
    return functools.partial(new_stack_reconciler, cfg=cfg)
