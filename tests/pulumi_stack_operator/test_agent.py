"""The run pod's agent: its job and Secrets from the pod's environment, into a request."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controller.clock import FakeClock
from pulumi_stack_operator import agent
from pulumi_stack_operator.agent import AgentJob
from pulumi_stack_operator.fence import SETTLE_BOUND, Fence
from pulumi_stack_operator.pulumi_cli import PulumiCli
from workspace import source as sources
from workspace.runner import (
    EnvSources,
    ErrorKind,
    Outcome,
    SourceFault,
    UpdateRequest,
    failed_outcome,
)
from workspace.runner.channel import parse_line
from workspace.runner.document import (
    FluxArtifact,
    GitCheckout,
    JobDocument,
    ProgramSource,
    ValueRef,
)
from workspace.runner.lease import RENEW_SECONDS
from workspace.runner.locks import LEASE_MARGIN, LEASE_SECONDS, StackLocks
from workspace.runner.scrub import Scrubber
from workspace.source import SourceError, SourceFailure

GIT = GitCheckout("https://git.example/repo.git", "c" * 40)
JOB = JobDocument(
    source=GIT,
    stack="dev",
    git_auth={"token": ValueRef(env="PSO_SECRET_0")},
    env={"PULUMI_BACKEND_URL": "file:///state"},
    env_refs={"TOKEN": ValueRef(env="PSO_SECRET_0"), "PLAIN": ValueRef(value="p")},
    config={"content": "one"},
    secret_config={"apiKey": ValueRef(env="PSO_SECRET_1")},
    targets=("urn:x",),
    refresh=True,
)


def environment(**extra: str) -> dict[str, str]:
    """A run pod's environment for ``JOB``."""
    return {
        "PSO_JOB": JOB.encode(),
        "PSO_OPERATION": "up",
        "PSO_SECRET_0": "tok",
        "PSO_SECRET_1": "key",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        **extra,
    }


def test_the_request_has_the_values_the_kubelet_filled_in() -> None:
    """Secret refs resolved from PSO_SECRET_*; the pod's own env kept, PSO_* dropped."""
    environ = environment()
    job = AgentJob.from_environment(environ)
    request = job.request(Path("/w/source/app"), environ)
    assert dict(request.env) == {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "PULUMI_BACKEND_URL": "file:///state",
        "TOKEN": "tok",
        "PLAIN": "p",
    }
    assert dict(request.secret_config) == {"apiKey": "key"}
    assert (request.stack, dict(request.config), request.targets) == (
        "dev",
        {"content": "one"},
        ("urn:x",),
    )
    assert request.refresh
    assert not request.preview
    credentials = job.credentials()
    assert credentials is not None
    assert credentials.token == "tok"  # noqa: S105 - a test value
    assert "tok" not in repr(request)


@pytest.mark.parametrize("operation", ["", "rm -rf", "refresh"])
def test_an_unknown_operation_is_refused(operation: str) -> None:
    """Only up, preview and destroy."""
    with pytest.raises(ValueError, match="PSO_OPERATION"):
        AgentJob.from_environment(environment(PSO_OPERATION=operation))


def test_the_run_caches_on_the_namespaces_volume_when_the_pod_mounts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PSO_CACHE_DIR: dependencies, downloads, plugins, the CLI's version; else the workspace."""
    memos: list[Path | None] = []

    def found(memo: Path | None = None) -> PulumiCli:
        memos.append(memo)
        return PulumiCli("/usr/bin/true")

    monkeypatch.setattr(agent, "pulumi_command", found)
    monkeypatch.setattr(agent, "WORKSPACE", tmp_path / "workspace")
    volume = tmp_path / "volume"
    cached = agent.local_runner(
        {"PSO_CACHE_DIR": str(volume), "PSO_CACHE_LIMIT": "1024", "PSO_PLUGIN_MIRROR": "http://m"}
    )
    assert cached.pulumi_home == volume / "pulumi-home"
    assert cached.dependency_store.root == volume / "dependencies"
    assert cached.dependency_store.limit == 1024
    assert cached.plugin_mirror == "http://m"
    alone = agent.local_runner({})
    assert alone.pulumi_home == tmp_path / "workspace" / ".pulumi-home"
    assert alone.dependency_store.root == tmp_path / "workspace" / ".cache"
    assert alone.plugin_mirror is None
    assert memos == [volume / "pulumi-version.json", None]


def test_the_jobs_pulumi_options_reach_the_request() -> None:
    """targetDependents, runProgram and environment; absent, they are off and empty."""
    environ = environment()
    plain = AgentJob.from_environment(environ).request(Path("/w"), environ)
    assert (plain.target_dependents, plain.run_program, plain.environments) == (False, False, ())
    job = dataclasses.replace(
        JOB, target_dependents=True, run_program=True, environments=("a/b", "c/d")
    )
    environ = environment(PSO_JOB=job.encode())
    request = AgentJob.from_environment(environ).request(Path("/w"), environ)
    assert request.target_dependents
    assert request.run_program
    assert request.environments == ("a/b", "c/d")


@pytest.mark.parametrize(("shallow", "expected"), [(None, False), (False, False), (True, True)])
def test_the_checkout_is_shallow_when_the_job_says_so(
    monkeypatch: pytest.MonkeyPatch, *, shallow: bool | None, expected: bool
) -> None:
    """``shallow`` in the job becomes ``checkout(shallow=...)``; absent, a full clone."""
    calls: list[dict[str, Any]] = []

    def checkout(url: str, work_dir: Path, **options: Any) -> str:
        calls.append({"url": url, "work_dir": work_dir, **options})
        return "c" * 40

    monkeypatch.setattr(sources, "checkout", checkout)
    source = GIT if shallow is None else dataclasses.replace(GIT, shallow=shallow)
    environ = environment(PSO_JOB=dataclasses.replace(JOB, source=source).encode())
    failed = agent._checkout(AgentJob.from_environment(environ), agent._now())  # noqa: SLF001
    assert failed is None
    (call,) = calls
    assert call["shallow"] is expected
    assert (call["url"], call["commit"], call["work_dir"]) == (
        GIT.repo,
        GIT.commit,
        agent.SOURCE,
    )
    assert call["credentials"].token == "tok"  # noqa: S105 - a test value


def test_only_values_from_secrets_are_secret_env() -> None:
    """Secret envRefs and the template's Secret variables; not the pod's plain ones."""
    sources = EnvSources(
        secret=frozenset({"DB_PASSWORD"}),
        plain=frozenset({"NPM_CONFIG_REGISTRY", "TOKEN"}),
        secret_prefixes=frozenset({"AWS_"}),
    )
    pod_env = {
        "PSO_ENV_SOURCES": sources.encode(),
        "DB_PASSWORD": "pw-value",
        "NPM_CONFIG_REGISTRY": "http://10.0.0.1:41771/",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "AWS_REGION": "eu-west-1",
    }
    environ = environment(**pod_env)
    request = AgentJob.from_environment(environ).request(Path("/w"), environ)

    # TOKEN: a Secret envRef (the job's ref wins over the template's plain variable).
    assert request.secret_env == frozenset(
        {"DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "TOKEN"}
    )
    scrubber = Scrubber(request)
    assert scrubber.scrub("GET http://10.0.0.1:41771/x") == "GET http://10.0.0.1:41771/x"
    assert scrubber.scrub("pw-value aws-secret") == "[secret] [secret]"
    # TOKEN's value here is 3 characters: too short to be a secret, it is left in text.
    assert scrubber.scrub("a tok b") == "a tok b"


def test_without_the_sources_every_env_value_may_be_secret() -> None:
    """An older operator's pod says nothing of its variables: the cautious rule holds."""
    environ = environment()
    request = AgentJob.from_environment(environ).request(Path("/w"), environ)

    assert request.secret_env is None
    assert Scrubber(request).scrub("host 10.0.0.1") == "host [secret]"


def test_the_checkout_time_of_the_init_container_joins_the_outcome(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``checkout`` writes its seconds; the run's outcome carries them as ``checkout``."""
    monkeypatch.setattr(agent, "CHECKOUT_SECONDS", tmp_path / "checkout-seconds")
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", tmp_path / "checkout-failed")
    monkeypatch.setattr(sources, "checkout", lambda *_args, **_options: "c" * 40)
    started = agent._now()  # noqa: SLF001
    ran = failed_outcome("up", ErrorKind.UPDATE_FAILED, "x", started, started)
    assert agent.with_checkout_seconds(ran).seconds == {}  # no checkout ran: nothing added

    assert agent.main(["checkout"], environment()) == 0

    seconds = agent.with_checkout_seconds(ran).seconds
    assert set(seconds) == {"checkout"}
    assert 0 <= seconds["checkout"] < 60  # the monkeypatched checkout returns at once


def test_a_run_container_without_an_init_container_checks_out_first_then_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``checkout run``: the source laid out, its time in the outcome, then the run."""
    monkeypatch.setattr(agent, "CHECKOUT_SECONDS", tmp_path / "checkout-seconds")
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", tmp_path / "checkout-failed")
    monkeypatch.setattr(agent, "relay_signals", lambda _relay: None)  # the worker's own
    laid: list[str] = []
    monkeypatch.setattr(sources, "checkout", lambda url, *_args, **_options: laid.append(url))

    def ran(*_args: object) -> Outcome:
        assert laid == [GIT.repo], "the run comes after the checkout"
        return outcome()

    monkeypatch.setattr(agent, "run", ran)
    assert agent.main(["checkout", "run"], environment()) == 0
    reported = parse_line(capsys.readouterr().out.strip())
    assert isinstance(reported, Outcome)
    assert reported.succeeded
    assert set(reported.seconds) == {"checkout"}


def test_a_failed_checkout_in_the_run_container_is_its_outcome_and_nothing_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``checkout run`` with a source that cannot be laid out: SOURCE_FAILED, typed."""
    monkeypatch.setattr(agent, "CHECKOUT_SECONDS", tmp_path / "checkout-seconds")
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", tmp_path / "checkout-failed")
    monkeypatch.setattr(agent, "relay_signals", lambda _relay: None)
    monkeypatch.setattr(agent, "local_runner", _no_runner)
    err = SourceError("no answer", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)

    def fail(*_args: object, **_options: object) -> None:
        raise err

    monkeypatch.setattr(sources, "checkout", fail)
    assert agent.main(["checkout", "run"], environment()) == 0
    reported = parse_line(capsys.readouterr().out.strip())
    assert isinstance(reported, Outcome)
    assert reported.error is ErrorKind.SOURCE_FAILED
    assert reported.source == SourceFault(err.reason, err.transient)


@pytest.mark.parametrize("args", [["run"], ["checkout", "checkout"], ["--help"]])
def test_other_arguments_are_refused_with_the_usage(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and the usage on stderr; nothing read, nothing run."""
    assert agent.main(args, {}) == 2
    assert capsys.readouterr().err.strip() == agent.USAGE


NOT_THE_AGENTS = ("kubernetes", "urllib3", "prometheus_client", "controller.manager")
"""The operator's modules: a run pod's agent (started twice per run) imports none of them."""


def test_the_agent_starts_without_the_operators_modules() -> None:
    """The entry point as a run pod starts it (``agent``) loads nothing of the operator."""
    probe = (
        "import sys\n"
        "from pulumi_stack_operator import agent\n"
        f"agent.main = lambda args: print(sorted(m for m in {NOT_THE_AGENTS!r} "
        "if m in sys.modules)) or 0\n"
        "from pulumi_stack_operator.__main__ import main\n"
        "sys.exit(main(['agent']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# -- an earlier run pod's lock, and the run's own lease ------------------------------------


class Operations:
    """A stand-in for ``LocalRunner.run``: each call returns the next outcome given."""

    def __init__(self, *outcomes: Outcome, before: Callable[[int], None] | None = None) -> None:
        """Return ``outcomes`` in turn; ``before(n)`` runs first on the n-th call (from 0)."""
        self.outcomes, self.before, self.calls = list(outcomes), before, 0

    def __call__(self, request: UpdateRequest, **options: Any) -> Outcome:
        """The next outcome."""
        del request, options
        if self.before is not None:
            self.before(self.calls)
        self.calls += 1
        return self.outcomes.pop(0)


def outcome(error: ErrorKind | None = None, message: str = "") -> Outcome:
    """A succeeded ``up`` (no ``error``) or a failed one."""
    now = datetime.now(UTC)
    failed = failed_outcome("up", error or ErrorKind.UPDATE_FAILED, message, now, now)
    return failed if error else dataclasses.replace(failed, succeeded=True, error=ErrorKind.NONE)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The agent's clock, faked."""
    clock = FakeClock()
    monkeypatch.setattr(agent, "CLOCK", clock)
    return clock


@pytest.fixture
def stack_locks(tmp_path: Path) -> StackLocks:
    """The stack's lock directory in a file backend."""
    return StackLocks((tmp_path / "backend" / ".pulumi" / "locks" / "organization" / "p" / "dev",))


def lock_of(locks: StackLocks, clock: FakeClock, *, age: float, host: str | None = None) -> Path:
    """A lock of this pod's name (or ``host``'s), renewed ``age`` seconds ago."""
    directory = locks.dirs[0]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{len(list(directory.iterdir()))}.json"
    info = {"pid": 1, "hostname": host or socket.gethostname(), "timestamp": "2026-01-01T00:00:00Z"}
    path.write_text(json.dumps(info))
    stamp = (clock.wall() - timedelta(seconds=age)).timestamp()
    os.utime(path, (stamp, stamp))
    return path


def leased(operate: Operations, locks: StackLocks, clock: FakeClock) -> agent.Leased:
    """The operation of ``JOB`` on ``locks``, fenced on ``clock``."""
    request = UpdateRequest(work_dir=Path("/nowhere"), stack="dev", env={})
    job = AgentJob(JOB, "up", {})
    return agent.Leased(job, operate, request, locks, Fence(threading.Event(), clock))


def run_leased(work: agent.Leased, clock: FakeClock, *, renew: Path | None = None) -> Outcome:
    """``_leased`` on a thread, the clock stepped until it returns (``renew``: kept fresh)."""
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(agent._leased(work, None)), daemon=True)  # noqa: SLF001
    thread.start()
    while not result:
        if clock.wait_for_waiters(timeout=0.5):
            clock.step(RENEW_SECONDS)
            if renew is not None and renew.exists():
                os.utime(renew, (clock.wall().timestamp(),) * 2)
        thread.join(timeout=0.01)
    return result[0]


def test_a_run_waits_for_an_earlier_run_pods_lock_to_lapse_then_takes_it(
    fake_clock: FakeClock, stack_locks: StackLocks
) -> None:
    """A lock of this pod's name renewed just now: nothing runs until its lease has lapsed."""
    held = lock_of(stack_locks, fake_clock, age=0)
    ran_at: list[float] = []
    operate = Operations(outcome(), before=lambda _n: ran_at.append(fake_clock.now()))

    done = run_leased(leased(operate, stack_locks, fake_clock), fake_clock)

    assert done.succeeded
    assert ran_at
    assert ran_at[0] > LEASE_SECONDS + LEASE_MARGIN
    assert not held.exists()


def test_a_lock_renewed_all_along_is_a_conflict_and_no_run(
    fake_clock: FakeClock, stack_locks: StackLocks
) -> None:
    """An earlier run pod that goes on renewing its lock: CONFLICT naming it; the CLI never runs."""
    held = lock_of(stack_locks, fake_clock, age=0)
    operate = Operations(outcome())

    done = run_leased(leased(operate, stack_locks, fake_clock), fake_clock, renew=held)

    assert done.error is ErrorKind.CONFLICT
    assert f"locked by an earlier run pod of this Stack ({socket.gethostname()}" in done.message
    assert "may still be running" in done.message
    assert operate.calls == 0
    assert held.exists()
    assert fake_clock.now() >= SETTLE_BOUND


def test_a_conflict_over_a_lapsed_lock_of_this_name_runs_once_more(
    fake_clock: FakeClock, stack_locks: StackLocks
) -> None:
    """The CLI met a lock of this pod's name that lapsed: released, and the run goes again."""
    stale: list[Path] = []

    def lock_appears(call: int) -> None:
        if call == 0:
            stale.append(lock_of(stack_locks, fake_clock, age=LEASE_SECONDS + LEASE_MARGIN + 1))

    operate = Operations(outcome(ErrorKind.CONFLICT, "locked"), outcome(), before=lock_appears)

    done = run_leased(leased(operate, stack_locks, fake_clock), fake_clock)

    assert done.succeeded
    assert operate.calls == 2
    assert not stale[0].exists()


def test_another_hosts_lock_is_the_clis_conflict(
    fake_clock: FakeClock, stack_locks: StackLocks
) -> None:
    """A lock another host took (a CI job, a human): the CLI's CONFLICT stands, nothing released."""
    foreign = lock_of(stack_locks, fake_clock, age=10_000, host="laptop")
    operate = Operations(outcome(ErrorKind.CONFLICT, "the stack is currently locked"))

    done = run_leased(leased(operate, stack_locks, fake_clock), fake_clock)

    assert (done.error, done.message) == (ErrorKind.CONFLICT, "the stack is currently locked")
    assert operate.calls == 1
    assert foreign.exists()


def test_a_stop_while_waiting_interrupts_without_running(
    fake_clock: FakeClock, stack_locks: StackLocks
) -> None:
    """Stopped while an earlier run pod's lock is waited for: INTERRUPTED; nothing ran."""
    lock_of(stack_locks, fake_clock, age=0)
    operate = Operations(outcome())
    work = leased(operate, stack_locks, fake_clock)
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(agent._leased(work, None)), daemon=True)  # noqa: SLF001
    thread.start()
    assert fake_clock.wait_for_waiters()
    work.fence.stop.set()
    thread.join(timeout=10)
    assert result[0].error is ErrorKind.INTERRUPTED
    assert operate.calls == 0


def test_a_fenced_run_says_why_it_stopped(fake_clock: FakeClock) -> None:
    """The fence stopped the run: its outcome says so first; a success is left as it is."""
    guard = Fence(threading.Event(), fake_clock)
    guard.reason = "its pod was deleted"
    interrupted = outcome(ErrorKind.INTERRUPTED, "interrupted")
    told = agent._fenced(interrupted, guard)  # noqa: SLF001
    assert told.message == "the run stopped itself: its pod was deleted; interrupted"
    assert agent._fenced(outcome(), guard).message == ""  # noqa: SLF001


def test_what_init_containers_wrote_is_in_the_runs_environment_and_masked() -> None:
    """``$PULUMI_ENV``'s variables: over the pod's, under the job's own; masked as Secrets."""
    sources = EnvSources(secret=frozenset(), plain=frozenset(), secret_prefixes=frozenset())
    environ = environment(PSO_ENV_SOURCES=sources.encode(), KUBERNETES_SERVICE_HOST="pod")
    written = {
        "PULUMI_CONFIG_PASSPHRASE": "made-at-run-time",
        "KUBERNETES_SERVICE_HOST": "written",
        "PLAIN": "written-too",
    }
    request = AgentJob.from_environment(environ).request(Path("/w"), environ, written)
    assert request.env["PULUMI_CONFIG_PASSPHRASE"] == "made-at-run-time"  # noqa: S105
    assert request.env["KUBERNETES_SERVICE_HOST"] == "written"
    assert request.env["PLAIN"] == "p", "the Stack's own envRefs win"
    assert request.secret_env is not None
    assert {"PULUMI_CONFIG_PASSPHRASE", "KUBERNETES_SERVICE_HOST"} <= request.secret_env
    assert "PLAIN" not in request.secret_env
    assert Scrubber(request).scrub("bad made-at-run-time") == "bad [secret]"


def test_an_environment_file_that_cannot_be_used_fails_the_run_saying_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reserved name: SetupFailed naming the file, the line and the name; nothing runs."""
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", tmp_path / "checkout-failed")
    monkeypatch.setattr(agent, "_program_dir", lambda _job: tmp_path)
    monkeypatch.setattr(agent, "local_runner", _no_runner)
    env_file = tmp_path / ".env"
    env_file.write_text("GOOD=fine\nPSO_JOB=forged-value\n")
    environ = environment(PULUMI_ENV=str(env_file))
    outcome = agent.run(AgentJob.from_environment(environ), environ, threading.Event())
    assert outcome.error is ErrorKind.SETUP_FAILED
    assert f"{env_file}, line 2: PSO_JOB is set by the runner itself" in outcome.message
    assert "forged-value" not in outcome.message


def _no_runner(_environ: object) -> object:
    raise AssertionError("nothing may run with an environment file that cannot be used")


@pytest.mark.parametrize(
    ("layout", "failing"),
    [
        (GIT, "checkout"),
        (FluxArtifact("http://sc/a.tar.gz", "sha256:" + "a" * 64, "latest@sha256:aa"), "fetch"),
    ],
    ids=["git", "flux-artifact"],
)
@pytest.mark.parametrize(
    "err",
    [
        SourceError("refused", reason=SourceFailure.AUTHENTICATION_FAILED, transient=False),
        SourceError("differs", reason=SourceFailure.ARTIFACT_DIGEST_MISMATCH, transient=False),
        SourceError("unsafe", reason=SourceFailure.ARTIFACT_UNSAFE, transient=False),
        SourceError("no answer", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True),
    ],
    ids=str,
)
def test_a_source_that_cannot_be_laid_out_is_reported_typed(
    monkeypatch: pytest.MonkeyPatch, layout: ProgramSource, failing: str, err: SourceError
) -> None:
    """``SOURCE_FAILED`` with the source layer's failure and transience, in its own words.

    The operator judges it as the local runner's checkout failing the same way.
    """

    def fail(*_args: object, **_options: object) -> None:
        raise err

    monkeypatch.setattr(sources, "checkout" if failing == "checkout" else "fetch_artifact", fail)
    environ = environment(PSO_JOB=dataclasses.replace(JOB, source=layout).encode())
    failed = agent._checkout(AgentJob.from_environment(environ), agent._now())  # noqa: SLF001
    assert failed is not None
    assert failed.error is ErrorKind.SOURCE_FAILED
    assert failed.source == SourceFault(err.reason, err.transient)
    assert failed.message == str(err)


def test_a_program_directory_not_in_the_source_is_reported_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``repoDir`` the checkout lacks: ``SOURCE_FAILED`` with no source failure (InvalidSpec)."""
    monkeypatch.setattr(agent, "CHECKOUT_FAILED", tmp_path / "checkout-failed")
    monkeypatch.setattr(agent, "SOURCE", tmp_path / "source")
    (tmp_path / "source").mkdir()
    missing = dataclasses.replace(GIT, dir="missing")
    environ = environment(PSO_JOB=dataclasses.replace(JOB, source=missing).encode())
    outcome = agent.run(AgentJob.from_environment(environ), environ, threading.Event())
    assert outcome.error is ErrorKind.SOURCE_FAILED
    assert outcome.source == SourceFault(None)
    assert "spec.repoDir 'missing'" in outcome.message
