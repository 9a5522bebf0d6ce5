"""``AgentRunner``: the agent's steps as children, their reports, their ends, their stop.

Most tests run a fake agent (a small Python program printing report lines made with the
channel's own functions); one runs the real agent on the real CLI.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.agent.test_env import GIT_PASSWORD, PASSPHRASE, FakeCore, a_core
from tests.workspace.runner.support import ProgressLog
from workspace.runner import ErrorKind, Outcome, Progress, RunJob, SecretEnv, UpdateRequest
from workspace.runner.agent.runner import AgentRunner
from workspace.runner.channel import outcome_line, progress_line
from workspace.runner.document import JobDocument, RenderedProject, ValueRef
from workspace.runner.job import Owner
from workspace.runner.local.runner import CliBinary

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PROGRESS = Progress("update", 1, 2, 0, "create urn:x")


def an_outcome(operation: str, error: ErrorKind = ErrorKind.NONE, **fields: Any) -> Outcome:
    """An outcome of ``operation`` (it succeeded unless ``error``) at ``NOW``."""
    base: dict[str, Any] = {"message": "", "outputs": {}, "resource_changes": {}}
    return Outcome(
        operation=operation,  # type: ignore[arg-type]
        succeeded=error is ErrorKind.NONE,
        error=error,
        permalink=None,
        started=NOW,
        ended=NOW,
        **(base | fields),
    )


OUTCOME = an_outcome("up", outputs={"out": 1}, resource_changes={"create": 1})


class Cli:
    """A ``CliBinary`` at ``command``."""

    def __init__(self, command: str) -> None:
        """The CLI at ``command``."""
        self.command = command


def fake_agent(tmp_path: Path, run_body: str) -> tuple[str, ...]:
    """A fake agent: its checkout records its argv and environment; its run runs ``run_body``.

    The run step records its environment too, in ``tmp_path / "run.json"``.
    """
    script = tmp_path / "agent.py"
    script.write_text(
        f"""\
import json, os, signal, sys, time
step = "checkout" if sys.argv[1:] == ["checkout"] else "run"
record = {{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
          "mode": oct(os.stat(os.environ["PSO_WORKSPACE"]).st_mode & 0o777)}}
with open({str(tmp_path)!r} + f"/{{step}}.json", "w") as f:
    json.dump(record, f)
if step == "checkout":
    sys.exit(int(os.environ.get("FAKE_CHECKOUT_EXIT", "0")))
{run_body}
"""
    )
    return (sys.executable, str(script))


def a_runner(tmp_path: Path, agent: tuple[str, ...], **kwargs: Any) -> AgentRunner:
    """A runner of ``agent`` with workspaces under ``tmp_path / "root"``."""
    return AgentRunner(
        a_core(), tmp_path / "root", Cli("/opt/pulumi/bin/pulumi"), agent=agent, **kwargs
    )


def a_request(template: dict[str, Any] | None = None, **fields: Any) -> UpdateRequest:
    """An ``up`` request with a job naming one git credential and one run Secret."""
    job = RunJob(
        namespace="ns",
        owner=Owner("pulumi.com/v1", "Stack", "app", "uid"),
        generation=1,
        commit="abc",
        service_account="default",
        document='{"stack":"dev"}',
        secret_env=(SecretEnv("PSO_SECRET_0", "pulumi-secrets", "passphrase"),),
        git_env=(SecretEnv("PSO_GIT_0", "git-auth", "password"),),
        overrides=json.dumps(template or {}),
    )
    return UpdateRequest(Path("/workspace/source"), "dev", {}, job=job, **fields)


def recorded(tmp_path: Path, step: str) -> dict[str, Any]:
    """What the fake agent's ``step`` recorded."""
    found: dict[str, Any] = json.loads((tmp_path / f"{step}.json").read_text())
    return found


def test_progress_and_the_outcome_come_through_the_report_channel(tmp_path: Path) -> None:
    """Report lines become progress and the outcome; other lines are ignored."""
    lines = ["not a report", progress_line(PROGRESS), outcome_line(OUTCOME)]
    body = "; ".join(f"print({line!r})" for line in lines)
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    reports = ProgressLog()
    outcome = runner.run(a_request(), on_progress=reports, stop=threading.Event())
    assert outcome == OUTCOME
    assert reports.reports == [PROGRESS]


def test_each_step_gets_its_own_secrets_none_on_its_command_line(tmp_path: Path) -> None:
    """Git credentials for the checkout, Secrets for the run, none in argv; a private workspace."""
    body = f"print({outcome_line(OUTCOME)!r})"
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    runner.run(a_request(), on_progress=ProgressLog(), stop=threading.Event())
    checkout, run = recorded(tmp_path, "checkout"), recorded(tmp_path, "run")
    assert checkout["argv"][1:] == ["checkout"]
    assert run["argv"][1:] == []
    assert checkout["env"]["PSO_GIT_0"] == GIT_PASSWORD
    assert "PSO_SECRET_0" not in checkout["env"]
    assert run["env"]["PSO_SECRET_0"] == PASSPHRASE
    assert "PSO_GIT_0" not in run["env"]
    for step in (checkout, run):
        assert not any(PASSPHRASE in a or GIT_PASSWORD in a for a in step["argv"])
        assert step["cwd"] == step["env"]["PSO_WORKSPACE"]
        assert step["mode"] == "0o700"
        assert Path(step["cwd"]).parent == tmp_path / "root"
    assert not Path(run["cwd"]).exists()  # removed after the run


def test_a_job_without_git_credentials_checks_out_and_runs_in_one_step(tmp_path: Path) -> None:
    """As its run pod has no checkout container: one step, ``checkout run``, the run's env."""
    body = f"print({outcome_line(OUTCOME)!r})"
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    request = a_request()
    assert request.job is not None
    job = dataclasses.replace(request.job, git_env=())
    outcome = runner.run(
        dataclasses.replace(request, job=job), on_progress=ProgressLog(), stop=threading.Event()
    )
    assert outcome == OUTCOME
    assert not (tmp_path / "checkout.json").exists(), "no checkout step of its own"
    run = recorded(tmp_path, "run")
    assert run["argv"][1:] == ["checkout", "run"]
    assert run["env"]["PSO_SECRET_0"] == PASSPHRASE


def test_a_destroy_and_a_preview_are_told_to_the_agent(tmp_path: Path) -> None:
    """The operation reaches the agent; an outcome of another one is refused."""
    preview = an_outcome("preview")
    body = f"print({outcome_line(preview)!r})"
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    outcome = runner.run(a_request(preview=True), on_progress=ProgressLog(), stop=threading.Event())
    assert outcome == preview
    assert recorded(tmp_path, "run")["env"]["PSO_OPERATION"] == "preview"
    destroyed = runner.destroy(a_request(), on_progress=ProgressLog(), stop=threading.Event())
    assert isinstance(destroyed, Outcome)
    assert destroyed.error is ErrorKind.RUNNER_FAILED  # it reported a preview
    assert "reported a preview, not the destroy" in destroyed.message


def test_a_run_that_ends_without_an_outcome_fails_with_its_status_and_stderr(
    tmp_path: Path,
) -> None:
    """No outcome: RUNNER_FAILED with the exit status and stderr, scrubbed."""
    body = f"print('boom', {PASSPHRASE!r}, file=sys.stderr); sys.exit(3)"
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    outcome = runner.run(a_request(), on_progress=ProgressLog(), stop=threading.Event())
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "run step ended without an outcome (status 3)" in outcome.message
    assert "boom [secret]" in outcome.message
    assert PASSPHRASE not in outcome.message


def test_a_missing_secret_fails_the_run_before_any_step(tmp_path: Path) -> None:
    """A missing Secret fails the run RUNNER_FAILED before anything starts."""
    core = FakeCore({"git-auth": {"password": GIT_PASSWORD}}, {})
    agent = fake_agent(tmp_path, "")
    runner = AgentRunner(core, tmp_path / "root", Cli("/bin/pulumi"), agent=agent)
    outcome = runner.run(a_request(), on_progress=ProgressLog(), stop=threading.Event())
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "Secret ns/pulumi-secrets is missing" in outcome.message
    assert not (tmp_path / "checkout.json").exists()


def test_stop_sends_sigterm_and_the_agent_reports_interrupted(tmp_path: Path) -> None:
    """stop: SIGTERM to the agent, whose INTERRUPTED outcome is the run's."""
    interrupted = an_outcome("up", ErrorKind.INTERRUPTED, message="stopped")
    body = f"""
def term(*_):
    print({outcome_line(interrupted)!r}, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print({progress_line(PROGRESS)!r}, flush=True)
signal.alarm(60)
signal.pause()
"""
    runner = a_runner(tmp_path, fake_agent(tmp_path, body))
    reports, stop = ProgressLog(), threading.Event()
    outcome = runner.run(a_request(), on_progress=_stopping(reports, stop), stop=stop)
    assert outcome == interrupted


def test_an_agent_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """An agent that does not end after SIGTERM is killed after the grace."""
    body = f"""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print({progress_line(PROGRESS)!r}, flush=True)
signal.alarm(60)
signal.pause()
"""
    runner = a_runner(tmp_path, fake_agent(tmp_path, body), interrupt_grace=0.5, kill_margin=0.5)
    reports, stop = ProgressLog(), threading.Event()
    started = time.monotonic()
    outcome = runner.run(a_request(), on_progress=_stopping(reports, stop), stop=stop)
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.INTERRUPTED
    assert "run step ended without an outcome" in outcome.message
    assert 1.0 <= time.monotonic() - started < 10


def test_a_stop_set_before_the_run_starts_nothing(tmp_path: Path) -> None:
    """A run stopped before it started runs no step."""
    runner = a_runner(tmp_path, fake_agent(tmp_path, ""))
    stop = threading.Event()
    stop.set()
    outcome = runner.run(a_request(), on_progress=ProgressLog(), stop=stop)
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.INTERRUPTED
    assert not (tmp_path / "checkout.json").exists()


def test_runs_die_with_the_operator_and_locks_are_the_agents(tmp_path: Path) -> None:
    """Nothing to attach to; locks are the agent's; the runner takes a job."""
    runner = a_runner(tmp_path, fake_agent(tmp_path, ""))
    request = a_request()
    assert runner.attach(request) is None
    assert runner.locks(request) is None
    assert not runner.clear_stale_lock(request)
    assert not runner.cancel(request)
    assert runner.prepare(request) is None
    assert runner.traits.takes_job
    assert not runner.traits.outlives_operator
    assert not runner.traits.in_pods


def _stopping(reports: ProgressLog, stop: threading.Event) -> Callable[[Progress], None]:
    """Record each report and ask the run to stop at the first: the agent is running then."""

    def report(progress: Progress) -> None:
        reports(progress)
        stop.set()

    return report


PROJECT = """\
name: agent-round-trip
runtime: yaml
outputs:
  greeting: hello
"""


def test_the_real_agent_runs_a_rendered_program_on_the_real_cli(
    tmp_path: Path, pulumi_env: PulumiEnv
) -> None:
    """A rendered Program through the real agent and CLI on a file backend."""
    document = JobDocument(
        source=RenderedProject(PROJECT, "r1"),
        stack="dev",
        env={"PULUMI_BACKEND_URL": pulumi_env.backend_url},
        env_refs={"PULUMI_CONFIG_PASSPHRASE": ValueRef(env="PSO_SECRET_0")},
        message="round trip",
    )
    job = RunJob(
        namespace="ns",
        owner=Owner("pulumi.com/v1", "Stack", "app", "uid"),
        generation=1,
        commit="r1",
        service_account="default",
        document=document.encode(),
        secret_env=(SecretEnv("PSO_SECRET_0", "pulumi-secrets", "passphrase"),),
    )
    cli: CliBinary = Cli(str(pulumi_env.bin_dir / "pulumi"))
    runner = AgentRunner(a_core(), tmp_path / "root", cli)
    reports = ProgressLog()
    request = UpdateRequest(Path("/workspace/source"), "dev", {}, job=job)
    outcome = runner.run(request, on_progress=reports, stop=threading.Event())
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.NONE, outcome.message
    assert outcome.outputs == {"greeting": "hello"}
    assert reports.reports  # progress came through the channel
    assert not any((tmp_path / "root").glob("ns.app.*"))


def test_a_checkout_that_crashes_fails_the_run_without_running_it(tmp_path: Path) -> None:
    """A checkout step that exits non-zero fails the run; the run step never starts."""
    runner = a_runner(tmp_path, fake_agent(tmp_path, "print('ran')"))
    template = {"env": [{"name": "FAKE_CHECKOUT_EXIT", "value": "4"}]}
    outcome = runner.run(a_request(template), on_progress=ProgressLog(), stop=threading.Event())
    assert isinstance(outcome, Outcome)
    assert outcome.error is ErrorKind.RUNNER_FAILED
    assert "checkout step ended without an outcome (status 4)" in outcome.message
    assert not (tmp_path / "run.json").exists()
