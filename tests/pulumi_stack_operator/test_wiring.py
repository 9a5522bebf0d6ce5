"""The wiring: one view shared by writer and manager, the runner ``--runner`` names, settings."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.cache import ObjectKey, Store
from controller.informer import DeletedFinalStateUnknown
from controller.manager import ManagerContext
from controller.view import ReadYourWritesView
from pulumi_stack_operator import config, pulumi_cli, wiring
from pulumi_stack_operator.config import OperatorConfig, parse_config
from pulumi_stack_operator.pulumi_cli import PulumiCli
from reconcile.acknowledge import Acknowledger
from reconcile.interrupts import RunInterrupts
from status.metrics import MetricsHandler
from status.writer import StatusWriter
from workspace.runner import DEFAULT_INTERRUPT_GRACE, LocalRunner, PodRunner, RunnerTraits
from workspace.runner.agent.runner import AgentRunner


def new_context(cfg: OperatorConfig, leading_since: float | None = None) -> ManagerContext:
    """A manager context as ``Manager`` builds it, with a client that never connects."""
    store = Store()
    return ManagerContext(
        client.ApiClient(),
        store,
        cfg.manager,
        CollectorRegistry(),
        threading.Event(),
        ReadYourWritesView(store),
        leading_since=lambda: leading_since,
    )


@pytest.fixture
def built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ManagerContext, list[tuple[Any, ...]], list[Path]]]:
    """A reconciler wired from flags: its context, the writer's arguments, the runner's."""
    cfg = parse_config([f"--work-dir={tmp_path / 'work'}"], {})
    context = new_context(cfg)
    writers: list[tuple[Any, ...]] = []
    stores: list[Path] = []

    def writer(*args: Any, **kwargs: Any) -> StatusWriter:
        writers.append(args)
        return StatusWriter(*args, **kwargs)

    def runner(context: ManagerContext, cfg: OperatorConfig, plugin_store: Path) -> Any:
        del context, cfg
        stores.append(plugin_store)
        return SimpleNamespace(traits=LocalRunner.traits)

    monkeypatch.setattr(wiring, "StatusWriter", writer)
    monkeypatch.setattr(wiring, "RUNNERS", {"local": runner})
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "python3")
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
    wiring.stack_reconciler_factory(cfg)(context)
    yield context, writers, stores
    for close in context.closers:
        close(1.0)


def test_every_runner_choice_has_a_factory() -> None:
    """``--runner``'s choices and the wiring's factories are the same names."""
    assert set(wiring.RUNNERS) == set(config.RUNNERS)


def test_the_writer_reads_and_records_through_the_managers_view(
    built: tuple[ManagerContext, list[tuple[Any, ...]], list[Path]],
) -> None:
    """One view per manager: the status writer gets the context's, not one of its own."""
    context, writers, _ = built
    [args] = writers
    assert args[1] is context.view


def test_the_runner_is_the_one_named_with_the_shared_plugin_store(
    built: tuple[ManagerContext, list[tuple[Any, ...]], list[Path]], tmp_path: Path
) -> None:
    """``RUNNERS[--runner]`` is called once, with ``<work_dir>/.pulumi-home``."""
    _, _, stores = built
    assert stores == [tmp_path / "work" / ".pulumi-home"]


def test_metrics_acknowledger_closers_and_liveness_are_registered(
    built: tuple[ManagerContext, list[tuple[Any, ...]], list[Path]],
) -> None:
    """Metrics, acknowledger and run interrupts follow the informer; four closers, checks.

    The fourth closer and check, and the one starter, are the source kinds' informers.
    """
    context, _, _ = built
    kinds = [type(handler) for handler in context.handlers]
    assert kinds == [MetricsHandler, Acknowledger, RunInterrupts]
    assert len(context.closers) == 4
    assert len(context.liveness_checks) == 4
    assert len(context.starters) == 1
    assert all(check() for check in context.liveness_checks)


def test_a_shards_run_interrupter_hears_only_announced_deletions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--stack-selector`` a delete event may be a Stack leaving the shard.

    The run interrupter gets adds and updates (``deletionTimestamp``) only: the manager
    stops a departing Stack's reconcile as on shutdown, never as a deletion.
    """
    cfg = parse_config([f"--work-dir={tmp_path / 'work'}", "--stack-selector=shard=a"], {})
    context = new_context(cfg)
    monkeypatch.setattr(
        wiring, "RUNNERS", {"local": lambda *_args: SimpleNamespace(traits=LocalRunner.traits)}
    )
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "python3")
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
    wiring.stack_reconciler_factory(cfg)(context)
    try:
        kinds = [type(handler) for handler in context.handlers]
        assert kinds == [MetricsHandler, Acknowledger, wiring.DeletionsAnnounced]
    finally:
        for close in context.closers:
            close(1.0)


class Interrupts(RunInterrupts):
    """Records what reaches the run interrupter."""

    def __init__(self) -> None:
        """Nothing heard yet."""
        super().__init__()
        self.heard: list[str] = []

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Record."""
        del obj
        self.heard.append("add")

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Record."""
        del old, new
        self.heard.append("update")

    def on_delete(self, obj: object) -> None:
        """Record."""
        del obj
        self.heard.append("delete")


def test_deletions_announced_forwards_adds_and_updates() -> None:
    """A delete event is dropped; an add or an update (a deletionTimestamp) goes through."""
    inner = Interrupts()
    handler = wiring.DeletionsAnnounced(inner)
    stack = {"metadata": {"namespace": "ns", "name": "s", "deletionTimestamp": "now"}}
    handler.on_add(stack)
    handler.on_update(stack, stack)
    handler.on_delete(stack)
    handler.on_delete(DeletedFinalStateUnknown(ObjectKey("ns", "s"), stack))
    assert inner.heard == ["add", "update"]


class Poster:
    """Records Events posted."""

    def __init__(self) -> None:
        """None yet."""
        self.posted: list[str] = []

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record the reason."""
        del obj, type_, message
        self.posted.append(reason)


def test_a_shard_posts_no_event_about_a_stack_it_no_longer_has() -> None:
    """Events go through only while the view has the Stack (it left: it has not)."""
    store = Store()
    view = ReadYourWritesView(store)
    poster = Poster()
    events = wiring.SelectedEvents(poster, view)
    stack = {"metadata": {"namespace": "ns", "name": "s", "resourceVersion": "3"}}
    store.upsert(stack)
    events.post(stack, "Normal", "UpdateStarted", "up")
    store.delete(ObjectKey("ns", "s"))
    view.on_delete(stack)
    events.post(stack, "Normal", "Interrupted", "Update interrupted by shutdown")
    assert poster.posted == ["UpdateStarted"]


def test_a_shard_never_takes_another_instances_update_for_dead() -> None:
    """With a selector the leader is its shard's sole runner only, not its Stacks'.

    A Stack that moved in may still have the other shard's update running: it is resumed
    (and its lock waited for), never concluded as orphaned and cancelled. A run pod is
    still attached to (the pod runner's runs outlive the operator).
    """
    lease = ["--leader-elect", "--lease-duration=30", "--renew-deadline=20"]
    cfg = parse_config([*lease, "--stack-selector=shard=a"], {})
    assert not wiring.settings(cfg, new_context(cfg), Path("/w"), LocalRunner.traits).sole_runner
    cfg = parse_config([*lease, "--stack-selector=shard=a", "--runner=pod"], {})
    found = wiring.settings(cfg, new_context(cfg), Path("/w"), PodRunner.traits)
    assert found.runner_traits.outlives_operator
    cfg = parse_config(lease, {})
    assert wiring.settings(cfg, new_context(cfg), Path("/w"), LocalRunner.traits).sole_runner


def test_the_work_root_is_prepared_and_an_old_token_removed(tmp_path: Path) -> None:
    """The work root and plugin store exist afterwards; a saved credentials.json is gone."""
    store = tmp_path / "work" / ".pulumi-home"
    store.mkdir(parents=True)
    (store / "credentials.json").write_text('{"accessTokens": {}}')
    work_root, plugin_store = wiring.prepare_work_root(str(tmp_path / "work"))
    assert (work_root, plugin_store) == (tmp_path / "work", store)
    assert plugin_store.is_dir()
    assert not (store / "credentials.json").exists()


def test_a_relative_work_dir_becomes_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI runs in each checkout: the work root must not depend on the cwd."""
    monkeypatch.chdir(tmp_path)
    work_root, _ = wiring.prepare_work_root("relative")
    assert work_root.is_absolute()
    assert work_root == tmp_path / "relative"


def test_settings_come_from_the_flags() -> None:
    """Backend, timeout, retry policy, identity and the takeover delay after a failover."""
    argv = [
        "--default-backend=file:///state",
        "--run-timeout=60",
        "--update-retry-base=3",
        "--max-update-failures=2",
        "--leader-elect",
        "--lease-duration=30",
        "--renew-deadline=20",
        "--retry-period=2",
    ]
    cfg = parse_config(argv, {})
    settings = wiring.settings(
        cfg, new_context(cfg, leading_since=12.5), Path("/w"), LocalRunner.traits
    )
    assert (settings.work_root, settings.default_backend) == (Path("/w"), "file:///state")
    assert settings.run_timeout == 60.0
    assert (settings.policy.retry_base_delay, settings.policy.max_update_failures) == (3.0, 2)
    assert settings.identity == cfg.manager.identity
    assert settings.sole_runner
    assert settings.takeover_delay == max(0.0, 20 + DEFAULT_INTERRUPT_GRACE - 30)
    assert settings.leading_since() == 12.5


def test_without_leader_election_no_takeover_wait_is_needed() -> None:
    """Not the sole runner; the delay formula never goes below 0."""
    cfg = parse_config([], {})
    settings = wiring.settings(cfg, new_context(cfg), Path("/w"), LocalRunner.traits)
    assert not settings.sole_runner
    assert settings.takeover_delay >= 0.0


def test_the_pod_runner_takes_its_image_from_the_flag_or_its_own_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--run-image`` wins; without it, POD_NAME/POD_NAMESPACE must say where to look."""
    cfg = parse_config(["--runner=pod", "--run-image=registry.example/pso:1"], {})
    runner = wiring.pod_runner(new_context(cfg), cfg, Path("/w"))
    assert isinstance(runner, PodRunner)
    assert runner.image == "registry.example/pso:1"
    cfg = parse_config(["--runner=pod"], {})
    monkeypatch.delenv("POD_NAME", raising=False)
    with pytest.raises(ValueError, match="--run-image"):
        wiring.pod_runner(new_context(cfg), cfg, Path("/w"))


def test_the_pod_runner_needs_no_takeover_wait() -> None:
    """A run pod outlives its operator: a new leader attaches at once."""
    argv = ["--runner=pod", "--leader-elect", "--lease-duration=30", "--renew-deadline=20"]
    cfg = parse_config(argv, {})
    settings = wiring.settings(cfg, new_context(cfg), Path("/w"), PodRunner.traits)
    assert settings.takeover_delay == 0.0
    assert settings.runner_traits == PodRunner.traits


def test_the_agent_runner_takes_jobs_and_keeps_its_runs_under_the_work_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--runner=agent``: workspaces and cache under the work root; takes a job, no pods."""
    memos: list[Path | None] = []

    def found(memo: Path | None = None) -> PulumiCli:
        memos.append(memo)
        return PulumiCli("/opt/pulumi/bin/pulumi")

    monkeypatch.setattr(wiring, "pulumi_command", found)
    cfg = parse_config(["--runner=agent", "--plugin-mirror=http://mirror.example"], {})
    runner = wiring.agent_runner(new_context(cfg), cfg, tmp_path / ".pulumi-home")
    assert isinstance(runner, AgentRunner)
    assert runner.root == tmp_path / ".agent-runs"
    assert runner.caching.directory == tmp_path / ".agent-cache"
    assert runner.caching.mirror == "http://mirror.example"
    assert runner.cli_dir == "/opt/pulumi/bin"
    assert runner.traits == RunnerTraits(takes_job=True)
    assert memos == [tmp_path / ".cache" / "pulumi-version.json"]
    settings = wiring.settings(cfg, new_context(cfg), tmp_path, runner.traits)
    assert (
        settings.takeover_delay
        == wiring.settings(cfg, new_context(cfg), tmp_path, LocalRunner.traits).takeover_delay
    )  # its runs die with the operator, as local ones do


def test_the_local_runner_remembers_its_clis_version_under_the_work_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A restart with the same binary reads the version instead of running the CLI."""
    asked: list[Path] = []

    def version(binary: Path) -> tuple[int, int, int]:
        asked.append(binary)
        return (3, 200, 0)

    binary = tmp_path / "bin" / "pulumi"  # found on PATH, never run: its version is faked
    binary.parent.mkdir()
    binary.write_text("")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(binary.parent))
    monkeypatch.setattr(pulumi_cli, "cli_version", version)
    cfg = parse_config([], {})
    store = tmp_path / ".pulumi-home"
    first = wiring.local_runner(new_context(cfg), cfg, store)
    again = wiring.local_runner(new_context(cfg), cfg, store)
    assert len(asked) == 1, "the second start found the memo"
    assert (tmp_path / ".cache" / "pulumi-version.json").is_file()
    assert isinstance(first, LocalRunner)
    assert isinstance(again, LocalRunner)
