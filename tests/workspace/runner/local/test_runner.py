"""``LocalRunner``'s operations against the real Pulumi CLI, a file backend and real files.

Where a test needs drift, it patches a ``read`` method into its copy of the ``files``
program: the stock provider has none, so its refresh never sees out-of-band edits.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.support import (
    STACK,
    ArgvSpy,
    ProgressLog,
    run,
    subcommands,
    succeeded,
)
from workspace.runner import ErrorKind, LocalRunner, Progress, Runner, UpdateRequest
from workspace.runner.types import MASK

pytestmark = pytest.mark.pulumi

READ_METHOD = """
    def read(self, id_, props):
        from pulumi.dynamic import ReadResult

        with open(props["path"], encoding="utf-8") as handle:
            return ReadResult(id_, {**props, "content": handle.read()})
"""


def add_read_method(program: Path) -> None:
    """Give the program's provider a ``read`` that reports the file's real content."""
    main = program / "__main__.py"
    source = main.read_text()
    anchor = "    def update(self, _id, _olds, news):"
    assert anchor in source
    main.write_text(source.replace(anchor, READ_METHOD.lstrip("\n") + "\n" + anchor))


def test_local_runner_is_a_runner(runner: LocalRunner) -> None:
    """``LocalRunner`` implements the whole ``Runner`` interface (mypy checks the types)."""
    as_runner: Runner = runner
    assert as_runner is runner


# --- up, preview, refresh -----------------------------------------------------------------


def test_up_creates_the_file_and_reports_outputs(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """``up`` creates the file and reports changes and outputs, masking secret ones."""
    outcome = run(runner, make_request({"content": "hello world"}))

    assert succeeded(outcome)
    assert outcome.operation == "up"
    assert target.read_text() == "hello world"
    assert outcome.resource_changes == {"create": 2}  # the stack and the file
    assert outcome.outputs == {
        "path": str(target),
        "content": "hello world",
        "secretContent": MASK,
    }
    assert outcome.message == ""
    assert outcome.permalink is None  # file backends have no web page
    assert outcome.started.tzinfo is UTC
    assert outcome.started <= outcome.ended <= datetime.now(UTC)
    took = (outcome.ended - outcome.started).total_seconds()
    assert 0 < outcome.seconds["cli"] <= took  # every pulumi command together
    assert set(outcome.seconds) <= {"cli", "install"}


def test_second_up_with_same_inputs_changes_nothing(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest]
) -> None:
    """An ``up`` with unchanged inputs reports only unchanged resources."""
    request = make_request({"content": "same"})
    assert succeeded(run(runner, request))

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert outcome.resource_changes == {"same": 2}


def test_preview_reports_changes_without_making_them(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """A preview reports the update it would make and leaves the file alone."""
    assert succeeded(run(runner, make_request({"content": "before"})))
    reports = ProgressLog()

    outcome = runner.run(
        make_request({"content": "after"}, preview=True),
        on_progress=reports,
        stop=threading.Event(),
    )

    assert succeeded(outcome)
    assert outcome.operation == "preview"
    assert outcome.resource_changes == {"same": 1, "update": 1}
    assert outcome.outputs == {}
    assert target.read_text() == "before"
    assert {p.step for p in reports.reports} == {"preview"}


def test_targets_limit_the_update(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """With ``targets`` naming only the stack resource, the file is left as it was."""
    assert succeeded(run(runner, make_request({"content": "before"})))
    stack_urn = f"urn:pulumi:{STACK}::files::pulumi:pulumi:Stack::files-{STACK}"

    outcome = run(runner, make_request({"content": "after"}, targets=(stack_urn,)))

    assert succeeded(outcome)
    assert "update" not in outcome.resource_changes
    assert target.read_text() == "before"


def test_refresh_without_drift_succeeds(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """Refresh with expect_no_refresh_changes passes when nothing drifted, then ``up`` runs.

    (The stock program's provider has no ``read``, so it could not see drift anyway.)
    """
    assert succeeded(run(runner, make_request({"content": "v1"})))
    reports = ProgressLog()

    outcome = runner.run(
        make_request({"content": "v2"}, refresh=True, expect_no_refresh_changes=True),
        on_progress=reports,
        stop=threading.Event(),
    )

    assert succeeded(outcome)
    assert outcome.resource_changes == {"same": 1, "update": 1}
    assert target.read_text() == "v2"
    steps = [p.step for p in reports.reports]
    assert steps[0] == "refresh"
    assert steps[-1] == "update"


def test_refresh_drift_fails_with_refresh_changes(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    program: Path,
    target: Path,
) -> None:
    """A file edited out of band is drift: REFRESH_CHANGES, and ``up`` does not run."""
    add_read_method(program)
    assert succeeded(run(runner, make_request({"content": "v1"})))
    target.write_text("edited by hand")

    outcome = run(
        runner,
        make_request({"content": "v2"}, refresh=True, expect_no_refresh_changes=True),
    )

    assert not outcome.succeeded
    assert outcome.error is ErrorKind.REFRESH_CHANGES
    assert "no changes were expected" in outcome.message
    assert target.read_text() == "edited by hand"  # up never ran


def test_preview_drift_check_writes_no_state(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    target: Path,
) -> None:
    """A preview with a drift check reports REFRESH_CHANGES without touching the state."""
    add_read_method(program)
    assert succeeded(run(runner, make_request({"content": "v1"})))
    target.write_text("edited by hand")
    state = pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / f"{STACK}.json"
    before = state.read_bytes()

    outcome = run(
        runner,
        make_request({"content": "v1"}, preview=True, refresh=True, expect_no_refresh_changes=True),
    )

    assert outcome.error is ErrorKind.REFRESH_CHANGES
    assert outcome.operation == "preview"
    assert state.read_bytes() == before
    assert target.read_text() == "edited by hand"


# --- progress -------------------------------------------------------------------------------


def test_progress_reports_sensible_counts(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest]
) -> None:
    """Progress reports during an update count up to the final 2 of 2 resources."""
    reports = ProgressLog()

    outcome = runner.run(make_request({"delay": "2"}), on_progress=reports, stop=threading.Event())

    assert succeeded(outcome)
    assert reports.reports, "no progress reported"
    assert {p.step for p in reports.reports} == {"update"}
    assert all(p.resources_done <= p.resources_total for p in reports.reports)
    done = [p.resources_done for p in reports.reports]
    assert done == sorted(done)
    final = reports.reports[-1]
    assert (final.resources_done, final.resources_total, final.resources_failed) == (2, 2, 0)
    assert final.current is not None
    assert final.current.startswith("create urn:pulumi:dev::files::")


def test_a_failing_progress_callback_does_not_break_the_update(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """An exception in the caller's progress callback is logged, not raised anywhere."""
    calls: list[Progress] = []

    def explode(progress: Progress) -> None:
        calls.append(progress)
        raise ValueError("callback bug")

    outcome = runner.run(make_request(), on_progress=explode, stop=threading.Event())

    assert succeeded(outcome)
    assert calls, "the callback was never called"
    assert target.read_text() == "hello"


# --- destroy --------------------------------------------------------------------------------


def test_destroy_removes_the_file_and_the_stack(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    target: Path,
) -> None:
    """``destroy`` deletes the resources, then the stack and its config file."""
    assert succeeded(run(runner, make_request({"content": "doomed"})))
    reports = ProgressLog()

    outcome = runner.destroy(make_request(), on_progress=reports, stop=threading.Event())

    assert succeeded(outcome)
    assert outcome.operation == "destroy"
    assert outcome.resource_changes == {"delete": 2}
    assert not target.exists()
    assert not (pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / f"{STACK}.json").exists()
    assert not (program / f"Pulumi.{STACK}.yaml").exists()
    assert [p.name for p in program.iterdir() if p.name.startswith(".")] == []
    assert reports.reports[-1].step == "destroy"
    assert run(runner, make_request(use_local_stack_only=True)).error is ErrorKind.STACK_NOT_FOUND


def test_destroy_of_a_missing_stack_succeeds(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest]
) -> None:
    """A stack that does not exist counts as destroyed."""
    outcome = runner.destroy(make_request(), on_progress=ProgressLog(), stop=threading.Event())

    assert succeeded(outcome)
    assert outcome.resource_changes == {}
    assert "does not exist" in outcome.message


# --- skipping `stack select` -----------------------------------------------------------------


def remove_stack(pulumi_env: PulumiEnv, program: Path) -> None:
    """``pulumi stack rm`` behind the runner's back, as a user would."""
    argv = ["pulumi", "stack", "rm", "--yes", "--force", "--stack", STACK, "--non-interactive"]
    env = {**os.environ, **pulumi_env.env}
    subprocess.run(argv, cwd=program, env=env, check=True, capture_output=True)


def test_a_stack_removed_behind_the_runners_back_is_created_again(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    target: Path,
    argv_spy: ArgvSpy,
) -> None:
    """The unselected run finds the stack gone, selects (so creates) it, and succeeds."""
    assert succeeded(run(runner, make_request({"content": "one"})))
    remove_stack(pulumi_env, program)
    argv_spy.argvs.clear()

    outcome = run(runner, make_request({"content": "two"}))

    assert succeeded(outcome), outcome.message
    assert subcommands(argv_spy.argvs) == [
        ("up",),  # assumed the stack existed: "no stack named 'dev' found"
        ("stack", "select"),  # --create
        ("up",),
    ]
    assert target.read_text() == "two"


def test_a_stack_selected_once_is_not_selected_again_from_a_new_home(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    tmp_path: Path,
    argv_spy: ArgvSpy,
) -> None:
    """A run pod's own home is new each run: the runner's shared home keeps what it knows."""
    first = make_request({"content": "one"}, pulumi_home=tmp_path / "home-1")
    assert succeeded(run(runner, first))
    argv_spy.argvs.clear()

    outcome = run(runner, make_request({"content": "two"}, pulumi_home=tmp_path / "home-2"))

    assert succeeded(outcome), outcome.message
    assert subcommands(argv_spy.argvs) == [("up",)]


def test_a_local_only_stack_removed_behind_the_runners_back_is_not_found(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
) -> None:
    """With ``useLocalStackOnly`` the gone stack is not created: ``STACK_NOT_FOUND``."""
    assert succeeded(run(runner, make_request()))
    remove_stack(pulumi_env, program)

    outcome = run(runner, make_request(use_local_stack_only=True))

    assert outcome.error is ErrorKind.STACK_NOT_FOUND
    assert "no stack named" in outcome.message


def test_destroy_of_a_stack_removed_behind_the_runners_back_succeeds(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
) -> None:
    """A known stack that has gone since counts as destroyed, as a missing one does."""
    assert succeeded(run(runner, make_request()))
    remove_stack(pulumi_env, program)

    outcome = runner.destroy(make_request(), on_progress=ProgressLog(), stop=threading.Event())

    assert succeeded(outcome), outcome.message
    assert "does not exist" in outcome.message


def test_another_backend_is_selected_not_assumed(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    tmp_path: Path,
    argv_spy: ArgvSpy,
) -> None:
    """The marker is per backend: the same stack name elsewhere is selected (and created)."""
    assert succeeded(run(runner, make_request()))
    other = tmp_path / "other-backend"
    other.mkdir()
    argv_spy.argvs.clear()

    outcome = run(runner, make_request(env={"PULUMI_BACKEND_URL": f"file://{other}"}))

    assert succeeded(outcome), outcome.message
    assert subcommands(argv_spy.argvs)[:2] == [("stack", "select"), ("up",)]
    assert "--create" in argv_spy.argvs[0]
    assert (other / ".pulumi" / "stacks" / "files" / f"{STACK}.json").exists()


def test_a_new_stack_with_a_secrets_provider_is_initialised_with_it(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    argv_spy: ArgvSpy,
    pulumi_env: PulumiEnv,
) -> None:
    """``stack select`` finds none, ``stack init --secrets-provider`` makes it; then ``up``."""
    outcome = run(runner, make_request(secrets_provider="passphrase"))

    assert succeeded(outcome), outcome.message
    assert subcommands(argv_spy.argvs)[:3] == [("stack", "select"), ("stack", "init"), ("up",)]
    select, init = argv_spy.argvs[:2]
    assert "--create" not in select
    assert init[init.index("--secrets-provider") + 1] == "passphrase"
    assert (pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / f"{STACK}.json").exists()


def state_salt(pulumi_env: PulumiEnv) -> str:
    """The passphrase salt the ``dev`` stack's state is encrypted with."""
    path = pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / f"{STACK}.json"
    providers = json.loads(path.read_text())["checkpoint"]["latest"]["secrets_providers"]
    assert providers["type"] == "passphrase"
    salt: str = providers["state"]["salt"]
    return salt


def test_a_work_dir_without_its_settings_file_keeps_the_stacks_salt(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
) -> None:
    """A fresh checkout has no ``Pulumi.<stack>.yaml``: the run takes the state's salt.

    Left to itself the CLI mints a new salt for a settings file without one, so it derives
    the passphrase's key twice per command (the state's and the new one: about 0.17 s of
    CPU each) and re-encrypts the stack with a new salt on every run.
    """
    assert succeeded(run(runner, make_request({"content": "one"})))
    salt = state_salt(pulumi_env)
    settings = program / f"Pulumi.{STACK}.yaml"
    settings.unlink()  # as the operator's checkout has it: git clean removes it

    assert succeeded(run(runner, make_request({"content": "two"})))

    assert state_salt(pulumi_env) == salt
    assert yaml.safe_load(settings.read_text())["encryptionsalt"] == salt


# --- prepare, attach ------------------------------------------------------------------------


def test_prepare_creates_and_configures_the_stack_without_an_update(
    runner: LocalRunner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    target: Path,
) -> None:
    """``prepare`` leaves a selected stack with its config, and runs no engine operation."""
    assert runner.prepare(make_request({"content": "prepared"})) is None

    assert "files:content: prepared" in (program / f"Pulumi.{STACK}.yaml").read_text()
    assert (pulumi_env.backend_dir / ".pulumi" / "stacks" / "files" / f"{STACK}.json").exists()
    assert not target.exists()


def test_prepare_reports_the_failure_run_would_report(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], program: Path
) -> None:
    """A workspace that cannot be prepared gives the outcome ``run`` gives for it."""
    (program / "Pulumi.yaml").unlink()

    failed = runner.prepare(make_request())

    assert failed is not None
    ran = run(runner, make_request())
    assert (failed.operation, failed.error, failed.message) == (
        ran.operation,
        ran.error,
        ran.message,
    )
    assert failed.error is ErrorKind.PROGRAM_INVALID
