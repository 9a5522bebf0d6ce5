"""``reconcile.automation.Runner`` against the real Pulumi CLI, a file backend and real files.

Every test copies the ``files`` test program (a dynamic provider managing one file) into
its own directory and runs it on the ``pulumi_env`` backend. Where a test needs drift, it
patches a ``read`` method into its copy: the stock provider has none, so its refresh never
sees out-of-band edits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import pytest
import yaml
from pulumi import automation as auto

from reconcile.automation import (
    MASK,
    ErrorKind,
    Outcome,
    Progress,
    Runner,
    UpdateRequest,
    _Attempt,
    _EventLog,
    _kill_tree,
    _output,
    _StepFailedError,
    _StepObserver,
    _update_stack_file,
)
from tests.conftest import PROGRAMS
from tests.testbed.pulumi_env import PulumiEnv

pytestmark = pytest.mark.pulumi

STACK = "dev"
NO_STOP = (threading.Event(), lambda _progress: None)  # stop, on_progress of an _Attempt
# Random per run, so that finding one anywhere means it leaked.
SECRET_VALUE = f"s3cret-{uuid.uuid4().hex}"
TOKEN_VALUE = f"tok-{uuid.uuid4().hex}"
READ_METHOD = """
    def read(self, id_, props):
        from pulumi.dynamic import ReadResult

        with open(props["path"], encoding="utf-8") as handle:
            return ReadResult(id_, {**props, "content": handle.read()})
"""


@pytest.fixture
def runner(pulumi_env: PulumiEnv) -> Runner:
    """A runner on the test bed's CLI and PULUMI_HOME."""
    return Runner(pulumi_env.command(), pulumi_env.home)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A private copy of the ``files`` program."""
    work_dir = tmp_path / "program"
    shutil.copytree(PROGRAMS / "files", work_dir)
    return work_dir


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The file the program manages."""
    return tmp_path / "managed.txt"


@pytest.fixture
def make_request(
    pulumi_env: PulumiEnv, program: Path, target: Path
) -> Callable[..., UpdateRequest]:
    """Build a request for the program's ``dev`` stack; ``config`` adds to ``path``."""

    def make(config: dict[str, str] | None = None, **fields: Any) -> UpdateRequest:
        return UpdateRequest(
            work_dir=fields.pop("work_dir", program),
            stack=STACK,
            env={**pulumi_env.env, **fields.pop("env", {})},
            config={"path": str(target), **(config or {})},
            message="pulumi-stack-operator: test/dev generation 1",
            **fields,
        )

    return make


class ProgressLog:
    """Collects progress reports (from SDK threads)."""

    def __init__(self) -> None:
        """Start empty."""
        self.reports: list[Progress] = []

    def __call__(self, progress: Progress) -> None:
        """Record one report."""
        self.reports.append(progress)


def run(runner: Runner, request: UpdateRequest, stop: threading.Event | None = None) -> Outcome:
    """Run one operation with a fresh stop event (or the given one)."""
    return runner.run(request, on_progress=ProgressLog(), stop=stop or threading.Event())


def lock_files(pulumi_env: PulumiEnv) -> list[Path]:
    """The ``dev`` stack's lock files in the backend."""
    locks = pulumi_env.backend_dir / ".pulumi" / "locks" / "organization" / "files" / STACK
    return sorted(locks.glob("*.json"))


def wait_for(condition: Callable[[], bool], timeout: float = 60) -> None:
    """Poll until ``condition`` holds, failing the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def proc_stat(pid: str | int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ...; [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cmdline(pid: int) -> bytes:
    """The command line of ``pid`` (empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (zombies, which nobody reaps here, are dead)."""
    stat = proc_stat(pid)
    return bool(stat) and stat[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root``."""
    parents = {
        int(p.parent.name): int(st[1])
        for p in Path("/proc").glob("[0-9]*/stat")
        if (st := proc_stat(p.parent.name))
    }
    found, pending = [], [root]
    while pending:
        parent = pending.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        pending += children
    return found


def wait_for_slow_step(pulumi_env: PulumiEnv) -> None:
    """Wait until an update of ``dev`` runs its dynamic provider (whose writes take ``delay``)."""

    def provider_running() -> bool:
        # Every lock, read afresh: a short-lived command before ``up`` may hold one first.
        for lock in lock_files(pulumi_env):
            try:
                cli: int = json.loads(lock.read_text())["pid"]
            except (OSError, ValueError):
                continue  # released, or still being written
            if any(b"pulumi.dynamic" in cmdline(pid) for pid in descendants(cli)):
                return True
        return False

    wait_for(provider_running)
    time.sleep(1)  # from provider start to the step's sleep is milliseconds


def add_read_method(program: Path) -> None:
    """Give the program's provider a ``read`` that reports the file's real content."""
    main = program / "__main__.py"
    source = main.read_text()
    anchor = "    def update(self, _id, _olds, news):"
    assert anchor in source
    main.write_text(source.replace(anchor, READ_METHOD.lstrip("\n") + "\n" + anchor))


def succeeded(outcome: Outcome) -> bool:
    """Whether an outcome succeeded; shows the message in the assertion when not."""
    assert outcome.error is ErrorKind.NONE, outcome.message
    return outcome.succeeded


# --- up, preview, refresh -----------------------------------------------------------------


def test_up_creates_the_file_and_reports_outputs(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
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
    assert outcome.lock is None
    assert outcome.permalink is None  # file backends have no web page
    assert outcome.started.tzinfo is UTC
    assert outcome.started <= outcome.ended <= datetime.now(UTC)


def test_second_up_with_same_inputs_changes_nothing(
    runner: Runner, make_request: Callable[..., UpdateRequest]
) -> None:
    """An ``up`` with unchanged inputs reports only unchanged resources."""
    request = make_request({"content": "same"})
    assert succeeded(run(runner, request))

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert outcome.resource_changes == {"same": 2}


def test_preview_reports_changes_without_making_them(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """A preview reports the update it would make and leaves the file alone."""
    assert succeeded(run(runner, make_request({"content": "before"})))

    outcome = run(runner, make_request({"content": "after"}, preview=True))

    assert succeeded(outcome)
    assert outcome.operation == "preview"
    assert outcome.resource_changes == {"same": 1, "update": 1}
    assert outcome.outputs == {}
    assert target.read_text() == "before"


def test_targets_limit_the_update(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """With ``targets`` naming only the stack resource, the file is left as it was."""
    assert succeeded(run(runner, make_request({"content": "before"})))
    stack_urn = f"urn:pulumi:{STACK}::files::pulumi:pulumi:Stack::files-{STACK}"

    outcome = run(runner, make_request({"content": "after"}, targets=(stack_urn,)))

    assert succeeded(outcome)
    assert "update" not in outcome.resource_changes
    assert target.read_text() == "before"


def test_refresh_without_drift_succeeds(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """Refresh with expect_no_refresh_changes passes when nothing drifted, then ``up`` runs.

    (The stock program's provider has no ``read``, so it could not see drift anyway.)
    """
    assert succeeded(run(runner, make_request({"content": "v1"})))

    outcome = run(
        runner,
        make_request({"content": "v2"}, refresh=True, expect_no_refresh_changes=True),
    )

    assert succeeded(outcome)
    assert outcome.resource_changes == {"same": 1, "update": 1}
    assert target.read_text() == "v2"


def test_refresh_drift_fails_with_refresh_changes(
    runner: Runner, make_request: Callable[..., UpdateRequest], program: Path, target: Path
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
    runner: Runner,
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


# --- failures and secrets -------------------------------------------------------------------


def test_failing_resource_is_update_failed_with_the_programs_message(
    runner: Runner, make_request: Callable[..., UpdateRequest]
) -> None:
    """A resource that raises gives UPDATE_FAILED with its error; env secrets are scrubbed."""
    outcome = run(
        runner,
        make_request(
            {"fail": f"boom: resource exploded with {TOKEN_VALUE}"},
            env={"API_TOKEN": TOKEN_VALUE},
        ),
    )

    assert not outcome.succeeded
    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert f"boom: resource exploded with {MASK}" in outcome.message
    assert TOKEN_VALUE not in outcome.message
    assert len(outcome.message) <= 4096
    assert outcome.outputs == {}


class ArgvSpy:
    """Records the argv of every Popen, and scans /proc for a value while armed."""

    def __init__(self, value: str) -> None:
        """Look for ``value``."""
        self.value = value
        self.argvs: list[list[str]] = []
        self.proc_hits: list[str] = []
        self._real = subprocess.Popen
        self._stop = threading.Event()
        self._scanner = threading.Thread(target=self._scan, daemon=True)

    def popen(self, args: Any, *rest: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        """Stand-in for ``subprocess.Popen``."""
        self.argvs.append([str(arg) for arg in args])
        return self._real(args, *rest, **kwargs)

    def __enter__(self) -> Self:
        """Start scanning /proc."""
        self._scanner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop scanning."""
        self._stop.set()
        self._scanner.join()

    def _scan(self) -> None:
        needle = self.value.encode()
        while not self._stop.wait(0.01):
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    if needle in cmdline.read_bytes():
                        self.proc_hits.append(str(cmdline))
                except OSError:
                    continue  # the process exited


@pytest.fixture
def argv_spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ArgvSpy]:
    """Spy on every Popen and every process's cmdline for ``SECRET_VALUE``."""
    with ArgvSpy(SECRET_VALUE) as spy:
        monkeypatch.setattr(subprocess, "Popen", spy.popen)
        yield spy


def test_secret_config_is_encrypted_and_never_on_argv(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    program: Path,
    target: Path,
    argv_spy: ArgvSpy,
) -> None:
    """A secret config value is encrypted at rest, reaches the program intact, and no argv."""
    outcome = run(runner, make_request(secret_config={"content": SECRET_VALUE}))

    assert succeeded(outcome)
    assert target.read_text() == SECRET_VALUE  # exact: stdin's newline was dropped once
    assert outcome.outputs["content"] == MASK  # derived from a secret, so secret
    stack_config = (program / f"Pulumi.{STACK}.yaml").read_text()
    assert "files:content:\n    secure: " in stack_config
    assert SECRET_VALUE not in stack_config
    assert any("--secret" in argv for argv in argv_spy.argvs)
    assert not [argv for argv in argv_spy.argvs if any(SECRET_VALUE in a for a in argv)]
    assert argv_spy.proc_hits == []


def test_secret_printed_by_a_failing_program_is_scrubbed(
    runner: Runner, make_request: Callable[..., UpdateRequest], argv_spy: ArgvSpy
) -> None:
    """A program failing with a secret in its error never puts the secret in the outcome."""
    outcome = run(runner, make_request(secret_config={"fail": SECRET_VALUE}))

    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert MASK in outcome.message  # the error did carry the secret
    assert SECRET_VALUE not in outcome.message
    assert SECRET_VALUE not in repr(outcome)
    assert argv_spy.proc_hits == []


def test_request_repr_hides_secret_values(make_request: Callable[..., UpdateRequest]) -> None:
    """``repr`` of a request names env vars and secret keys but shows no values."""
    request = make_request(env={"API_TOKEN": TOKEN_VALUE}, secret_config={"pw": SECRET_VALUE})

    text = repr(request)

    assert "API_TOKEN" in text
    assert "pw" in text
    assert TOKEN_VALUE not in text
    assert SECRET_VALUE not in text
    assert str(request) == text


def test_config_removed_from_the_request_is_removed_from_the_stack(
    runner: Runner, make_request: Callable[..., UpdateRequest], program: Path
) -> None:
    """Keys the runner set and the request dropped go; keys that came with the source stay."""
    stack_config = program / f"Pulumi.{STACK}.yaml"
    stack_config.write_text("config:\n  files:fromsource: kept\n")
    assert succeeded(run(runner, make_request({"content": "a", "delay": "0"})))
    assert "files:delay" in stack_config.read_text()

    assert succeeded(run(runner, make_request({"content": "a"})))

    text = stack_config.read_text()
    assert "files:delay" not in text
    assert "files:content: a" in text
    assert "files:fromsource: kept" in text


def echo_request(
    pulumi_env: PulumiEnv, work_dir: Path, config: dict[str, str], **fields: Any
) -> UpdateRequest:
    """A request for the ``echo`` program in ``work_dir`` reporting every key of ``config``."""
    keys = ",".join(k for k in config if k != "keys")
    return UpdateRequest(
        work_dir=work_dir,
        stack=fields.pop("stack", STACK),
        env={**pulumi_env.env, **fields.pop("env", {})},
        config={**config, "keys": keys},
        **fields,
    )


@pytest.fixture
def echo(tmp_path: Path) -> Path:
    """A private copy of the ``echo`` program (it reports the config it sees)."""
    work_dir = tmp_path / "echo"
    shutil.copytree(PROGRAMS / "echo", work_dir)
    return work_dir


def digest(value: str) -> str:
    """How ``echo`` reports a value longer than 1000 characters."""
    return f"sha256:{hashlib.sha256(value.encode()).hexdigest()} len:{len(value)}"


def test_a_200_kb_config_value_is_set_without_a_command_line(
    runner: Runner, pulumi_env: PulumiEnv, echo: Path, argv_spy: ArgvSpy
) -> None:
    """Plain config goes into the stack's settings file: no size limit, never in ``ps``.

    (As an argument, 200 kB fails: "argument list too long".) The CLI reads it back whole.
    It cannot reach a program, though: the language host passes all config in one
    environment variable, and Linux limits one to 128 KiB (see the next test).
    """
    big = f"{SECRET_VALUE}-big-" + "x" * 200_000
    attempt = _Attempt(runner, echo_request(pulumi_env, echo, {"big": big}), "up", *NO_STOP)

    stack = attempt.open_stack(create=True)
    attempt.configure(stack)

    assert stack.get_config("big").value == big  # `pulumi config get`, on stdout
    assert not [argv for argv in argv_spy.argvs if any(SECRET_VALUE in a for a in argv)]
    assert argv_spy.proc_hits == []


def test_config_values_reach_the_program_and_never_a_command_line(
    runner: Runner, pulumi_env: PulumiEnv, echo: Path, argv_spy: ArgvSpy
) -> None:
    """Three plain values (one of 100 kB) reach the program; no process's argv held one."""
    big = f"{SECRET_VALUE}-big-" + "x" * 100_000
    config = {"big": big, "region": f"{SECRET_VALUE}-region", "size": f"{SECRET_VALUE}-size"}

    outcome = run(runner, echo_request(pulumi_env, echo, config))

    assert succeeded(outcome)
    assert outcome.outputs["config"] == {
        "big": digest(big),
        "region": config["region"],
        "size": config["size"],
    }
    assert subcommands(argv_spy.argvs) == [("stack", "select"), ("stack", "init"), ("up",)]
    assert not [argv for argv in argv_spy.argvs if any(SECRET_VALUE in a for a in argv)]
    assert argv_spy.proc_hits == []  # no process's cmdline held one, CLI children included


def test_config_over_the_environment_limit_fails_the_program_not_the_setup(
    runner: Runner, pulumi_env: PulumiEnv, echo: Path
) -> None:
    """Python programs get all config in ``PULUMI_CONFIG``, at most 128 KiB on Linux.

    Beyond that the language host cannot start the program; the outcome says why.
    """
    outcome = run(runner, echo_request(pulumi_env, echo, {"big": "x" * 200_000}))

    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert "argument list too long" in outcome.message


TRICKY_VALUES = {
    "zero": "0",
    "octal": "0777",
    "octal12": "0o17",
    "exp": "1e3",
    "negative": "-1",
    "inf": ".inf",
    "on": "on",
    "true": "true",
    "null": "null",
    "tilde": "~",
    "empty": "",
    "colon": "a: b",
    "comment": "#not a comment",
    "quotes": 'it\'s "quoted"',
    "lines": "line 1\n  line 2\n",
    "padded": "  padded  ",
    "unicode": "üñï ☃",
    "json": '{"a": [1, 2]}',
}


def test_plain_config_values_stay_strings_through_the_cli_rewriting_the_file(
    runner: Runner, pulumi_env: PulumiEnv, echo: Path
) -> None:
    """Values YAML would read as numbers, booleans or null reach the program as written.

    The second run sets a secret too: ``config set --secret`` rewrites the settings file
    with the CLI's own YAML writer, which must read back what the runner wrote.
    """
    first = run(runner, echo_request(pulumi_env, echo, TRICKY_VALUES))
    secret = {"pw": SECRET_VALUE}
    second = run(runner, echo_request(pulumi_env, echo, TRICKY_VALUES, secret_config=secret))

    assert succeeded(first)
    assert first.outputs["config"] == TRICKY_VALUES
    assert succeeded(second)
    assert second.outputs["config"] == TRICKY_VALUES
    assert "secure:" in (echo / f"Pulumi.{STACK}.yaml").read_text()  # the CLI wrote it last


def test_config_goes_where_the_cli_reads_it_for_qualified_names_and_stack_config_dir(
    runner: Runner, pulumi_env: PulumiEnv, echo: Path
) -> None:
    """``org/project/stack`` uses ``Pulumi.<stack>.yaml``, in ``stackConfigDir`` if set."""
    project = echo / "Pulumi.yaml"
    project.write_text(project.read_text() + "stackConfigDir: stacks\n")

    outcome = run(
        runner, echo_request(pulumi_env, echo, {"color": "blue"}, stack="organization/echo/dev")
    )

    assert succeeded(outcome)
    assert outcome.outputs["config"] == {"color": "blue"}
    assert "echo:color: blue" in (echo / "stacks" / "Pulumi.dev.yaml").read_text()
    assert not (echo / "Pulumi.dev.yaml").exists()


SOURCE_STACK_FILE = """\
secretsprovider: passphrase
encryptionsalt: v1:c2FsdA==:v1:abc
config:
  files:fromsource: on
  files:mode: 0777
  files:token:
    secure: v1:AAAA:BBBB
  files:managed: old
  files:gone: away
"""


def test_the_settings_file_keeps_what_the_runner_does_not_manage(tmp_path: Path) -> None:
    """Only managed keys change; other keys, ``secure:`` values and settings keep their text."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(SOURCE_STACK_FILE)

    _update_stack_file(path, {"files:managed": "new", "files:n": "0"}, {"files:gone"})

    text = path.read_text()
    for line in SOURCE_STACK_FILE.splitlines():
        if "managed" not in line and "gone" not in line:
            assert line in text.splitlines()
    assert "files:gone" not in text
    config = yaml.safe_load(text)["config"]
    assert (config["files:managed"], config["files:n"]) == ("new", "0")
    assert config["files:token"] == {"secure": "v1:AAAA:BBBB"}
    assert [p.name for p in tmp_path.iterdir()] == ["Pulumi.dev.yaml"]


@pytest.mark.parametrize("content", ["config: [1, 2]\n", "config: {a: b\n", "- a list\n"])
def test_a_settings_file_that_is_not_one_is_program_invalid(tmp_path: Path, content: str) -> None:
    """A stack settings file from the source that cannot be read needs a source change."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(content)

    with pytest.raises(_StepFailedError) as failed:
        _update_stack_file(path, {"files:a": "b"}, set())

    assert failed.value.kind is ErrorKind.PROGRAM_INVALID
    assert "Pulumi.dev.yaml" in failed.value.detail
    assert path.read_text() == content


def subcommands(argvs: list[list[str]]) -> list[tuple[str, ...]]:
    """The pulumi subcommand of each recorded argv: ``("up",)``, ``("config", "set-all")``."""
    found: list[tuple[str, ...]] = []
    for argv in argvs:
        if Path(argv[0]).name != "pulumi":
            continue
        words = [arg for arg in argv[1:] if not arg.startswith("-")]
        found.append(tuple(words[:2]) if words[0] in ("stack", "config") else (words[0],))
    return found


def test_up_reads_outputs_and_changes_from_its_events_not_more_cli_calls(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    target: Path,
    argv_spy: ArgvSpy,
) -> None:
    """``up`` needs no ``stack output``/``stack history``; outputs and changes stay right."""
    request = make_request({"content": "same"}, secret_config={"pw": SECRET_VALUE})
    first = run(runner, request)
    assert succeeded(first)
    assert subcommands(argv_spy.argvs) == [
        ("stack", "select"),
        ("stack", "init"),
        ("config", "set"),  # the secret; plain config is written into Pulumi.dev.yaml
        ("up",),
    ]
    argv_spy.argvs.clear()

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert subcommands(argv_spy.argvs) == [
        ("stack", "select"),
        ("config", "set"),
        ("up",),
    ]
    assert first.resource_changes == {"create": 2}
    assert outcome.resource_changes == {"same": 2}
    expected = {"path": str(target), "content": "same", "secretContent": MASK}
    assert first.outputs == outcome.outputs == expected
    assert SECRET_VALUE not in repr(outcome)
    assert argv_spy.proc_hits == []


def test_outputs_are_read_with_one_masked_stack_output_if_no_event_carried_them(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    target: Path,
    argv_spy: ArgvSpy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback: ``stack output --json`` without ``--show-secrets``, secrets masked."""
    monkeypatch.setattr(_StepObserver, "_note_stack_outputs", lambda *_: None)
    request = make_request({"content": "read"}, secret_config={"pw": SECRET_VALUE})

    outcome = run(runner, request)

    assert succeeded(outcome)
    assert subcommands(argv_spy.argvs)[-2:] == [("up",), ("stack", "output")]
    assert not [argv for argv in argv_spy.argvs if "--show-secrets" in argv]
    assert outcome.outputs == {"path": str(target), "content": "read", "secretContent": MASK}
    assert SECRET_VALUE not in repr(outcome)


def test_wrong_passphrase_is_setup_failed(
    runner: Runner, make_request: Callable[..., UpdateRequest]
) -> None:
    """Config that cannot be encrypted (wrong passphrase) fails setup, without the passphrase."""
    assert succeeded(run(runner, make_request()))
    wrong = f"wrong-{TOKEN_VALUE}"

    outcome = run(
        runner,
        make_request(env={"PULUMI_CONFIG_PASSPHRASE": wrong}, secret_config={"pw": "x" * 8}),
    )

    assert outcome.error is ErrorKind.SETUP_FAILED
    assert "incorrect passphrase" in outcome.message
    assert wrong not in outcome.message


def test_use_local_stack_only_without_the_stack_is_stack_not_found(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """``use_local_stack_only`` never creates a stack: a missing one is STACK_NOT_FOUND."""
    outcome = run(runner, make_request(use_local_stack_only=True))

    assert not outcome.succeeded
    assert outcome.error is ErrorKind.STACK_NOT_FOUND
    assert "no stack named" in outcome.message
    assert not target.exists()


def test_missing_project_file_is_program_invalid_without_running_the_cli(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    program: Path,
    argv_spy: ArgvSpy,
) -> None:
    """Without Pulumi.yaml the outcome is PROGRAM_INVALID and no CLI was started."""
    (program / "Pulumi.yaml").unlink()

    outcome = run(runner, make_request())

    assert outcome.error is ErrorKind.PROGRAM_INVALID
    assert "Pulumi.yaml" in outcome.message
    assert argv_spy.argvs == []


def test_python_syntax_error_is_program_invalid(
    runner: Runner, make_request: Callable[..., UpdateRequest], program: Path
) -> None:
    """A program that does not compile needs a source change: PROGRAM_INVALID."""
    (program / "__main__.py").write_text("def broken(:\n")

    outcome = run(runner, make_request())

    assert outcome.error is ErrorKind.PROGRAM_INVALID, outcome.message
    assert "SyntaxError" in outcome.message


# --- progress -------------------------------------------------------------------------------


def test_progress_reports_sensible_counts(
    runner: Runner, make_request: Callable[..., UpdateRequest]
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


def step_event(*, started: bool, urn: str) -> auto.EngineEvent:
    """An engine event for a create step of ``urn`` that started, or finished."""
    meta = auto.StepEventMetadata(op=auto.OpType.CREATE, urn=urn, type="t:m:R", provider="")
    if started:
        return auto.EngineEvent(0, 0, resource_pre_event=auto.ResourcePreEvent(meta))
    return auto.EngineEvent(0, 0, res_outputs_event=auto.ResOutputsEvent(meta))


def test_progress_is_reported_at_most_once_per_interval_then_flushed() -> None:
    """Events within one interval make one report; the step's end flushes the last state."""
    now = [0.0]
    reports = ProgressLog()
    observer = _StepObserver("update", reports, interval=1.0, clock=lambda: now[0])

    observer.on_event(step_event(started=True, urn="urn:a"))
    observer.on_event(step_event(started=True, urn="urn:b"))
    now[0] = 0.5
    observer.on_event(step_event(started=False, urn="urn:a"))
    now[0] = 1.0
    observer.on_event(step_event(started=False, urn="urn:b"))
    observer.flush()
    observer.flush()

    assert [(p.resources_done, p.resources_total, p.current) for p in reports.reports] == [
        (0, 1, "create urn:a"),
        (2, 2, "create urn:b"),
    ]


def test_event_log_delivers_every_event_in_order_and_skips_bad_lines() -> None:
    """Lines written in pieces, a bad line, and a last line without newline: all handled."""
    seen: list[auto.EngineEvent] = []
    lines = [json.dumps({"sequence": n, "timestamp": 0, "cancelEvent": {}}) for n in range(3)]

    with _EventLog(seen.append) as path, path.open("a", encoding="utf-8") as log:
        log.write(lines[0][:10])
        log.flush()
        time.sleep(0.3)  # the reader sees half a line and waits for the rest
        log.write(lines[0][10:] + "\nnot json\n" + lines[1] + "\n" + lines[2])
        log.flush()

    assert [event.sequence for event in seen] == [0, 1, 2]
    assert not path.exists()


def test_an_output_holding_a_secret_anywhere_is_secret() -> None:
    """The engine marks secrets with the SDK's signature; nested ones mask the whole output."""
    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
    assert _output({**secret, "ciphertext": "[secret]"}).secret
    assert _output({"nested": [1, {"deep": secret}]}).secret
    assert not _output({"plain": [1, {"deep": "x"}]}).secret
    plain = _output("text")
    assert (plain.value, plain.secret) == ("text", False)


def test_observer_keeps_the_root_stacks_outputs_only() -> None:
    """Outputs come from the root ``pulumi:pulumi:Stack``, not from other resources."""
    observer = _StepObserver("update", ProgressLog())

    def outputs_event(type_: str, parent: str, outputs: dict[str, Any]) -> auto.EngineEvent:
        urn = f"urn:{type_}"
        new = auto.StepEventStateMetadata(
            type=type_, urn=urn, id="", parent=parent, provider="", outputs=outputs
        )
        meta = auto.StepEventMetadata(
            op=auto.OpType.SAME, urn=urn, type=type_, provider="", new=new
        )
        return auto.EngineEvent(0, 0, res_outputs_event=auto.ResOutputsEvent(meta))

    assert observer.stack_outputs is None
    observer.on_event(outputs_event("pulumi:pulumi:Stack", "", {"a": 1}))
    observer.on_event(outputs_event("pulumi:pulumi:Stack", "urn:other", {"b": 2}))
    observer.on_event(outputs_event("t:m:R", "", {"c": 3}))

    assert observer.stack_outputs == {"a": 1}


def test_a_failing_progress_callback_does_not_break_the_update(
    runner: Runner, make_request: Callable[..., UpdateRequest], target: Path
) -> None:
    """An exception in the caller's progress callback is logged, not raised into the SDK."""

    def explode(_progress: Progress) -> None:
        raise ValueError("callback bug")

    outcome = runner.run(make_request(), on_progress=explode, stop=threading.Event())

    assert succeeded(outcome)
    assert target.read_text() == "hello"


# --- interruption ---------------------------------------------------------------------------


def run_in_thread(
    runner: Runner, request: UpdateRequest, stop: threading.Event
) -> tuple[threading.Thread, list[Outcome]]:
    """Start ``runner.run`` in a thread; the outcome lands in the returned list."""
    result: list[Outcome] = []
    thread = threading.Thread(target=lambda: result.append(run(runner, request, stop)))
    thread.start()
    return thread, result


def test_stop_interrupts_a_slow_update_cleanly(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
) -> None:
    """Stop during an update: INTERRUPTED, the lock released, and the next update works."""
    stop = threading.Event()
    thread, result = run_in_thread(runner, make_request({"delay": "10"}), stop)
    wait_for_slow_step(pulumi_env)
    stopped_at = time.monotonic()

    stop.set()
    thread.join(timeout=90)

    assert not thread.is_alive()
    assert time.monotonic() - stopped_at < 60
    (outcome,) = result
    assert outcome.error is ErrorKind.INTERRUPTED
    assert "interrupted" in outcome.message
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request()))


def test_stop_before_start_runs_nothing(
    runner: Runner, make_request: Callable[..., UpdateRequest], argv_spy: ArgvSpy
) -> None:
    """With stop already set, the outcome is INTERRUPTED and no CLI was started."""
    stop = threading.Event()
    stop.set()

    outcome = run(runner, make_request(), stop)

    assert outcome.error is ErrorKind.INTERRUPTED
    assert argv_spy.argvs == []


def test_interrupt_grace_kills_the_cli_and_its_stale_lock_can_be_cleared(
    pulumi_env: PulumiEnv,
    make_request: Callable[..., UpdateRequest],
    target: Path,
) -> None:
    """After the grace the CLI's group is killed; its lock is stale, cleared, and up works."""
    runner = Runner(pulumi_env.command(), pulumi_env.home, interrupt_grace=0.5)
    stop = threading.Event()
    thread, result = run_in_thread(runner, make_request({"delay": "10"}), stop)
    wait_for_slow_step(pulumi_env)  # in flight, SIGINT alone cannot end the CLI in 0.5 s
    cli: int = json.loads(lock_files(pulumi_env)[0].read_text())["pid"]
    plugins = descendants(cli)

    stop.set()
    thread.join(timeout=60)

    (outcome,) = result
    assert outcome.error is ErrorKind.INTERRUPTED
    (lock,) = lock_files(pulumi_env)
    assert json.loads(lock.read_text())["pid"] == cli
    assert plugins, "the update's plugins were not found"
    assert [pid for pid in [cli, *plugins] if alive(pid)] == []  # no orphaned plugin
    assert runner.clear_stale_lock(make_request())
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request({"content": "after the kill"})))
    assert target.read_text() == "after the kill"


# --- locks ----------------------------------------------------------------------------------


def start_holder(pulumi_env: PulumiEnv, program: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """Start a slow ``pulumi up`` of the same stack from a second copy of the program."""
    holder_dir = tmp_path / "holder"
    shutil.copytree(program, holder_dir)  # includes Pulumi.dev.yaml with the encryption salt
    env = {**os.environ, **pulumi_env.env}
    pulumi = str(pulumi_env.bin_dir / "pulumi")
    subprocess.run(
        [pulumi, "--non-interactive", "config", "set", "--stack", STACK, "delay", "20"],
        cwd=holder_dir,
        env=env,
        check=True,
        capture_output=True,
    )
    return subprocess.Popen(
        [pulumi, "--non-interactive", "up", "--yes", "--skip-preview", "--stack", STACK],
        cwd=holder_dir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )


def test_live_lock_is_a_conflict_and_never_cleared_until_its_holder_dies(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    program: Path,
    tmp_path: Path,
) -> None:
    """A live update's lock gives CONFLICT with its holder and stays; once killed, it clears."""
    assert succeeded(run(runner, make_request({"content": "v1"})))
    holder = start_holder(pulumi_env, program, tmp_path)
    try:
        wait_for(lambda: bool(lock_files(pulumi_env)))

        outcome = run(runner, make_request({"content": "v2"}))

        assert outcome.error is ErrorKind.CONFLICT
        assert "locked" in outcome.message
        assert outcome.lock is not None
        assert outcome.lock.pid == holder.pid
        assert outcome.lock.hostname == socket.gethostname()
        assert outcome.lock.timestamp is not None
        assert not runner.clear_stale_lock(make_request())
        assert len(lock_files(pulumi_env)) == 1
    finally:
        _kill_tree(holder)  # like kill -9, without orphaning its plugins
        holder.wait()

    assert runner.clear_stale_lock(make_request())
    assert succeeded(run(runner, make_request({"content": "v2"})))


def write_lock(pulumi_env: PulumiEnv, *, pid: int, hostname: str) -> Path:
    """Write a lock file the way the file backend does."""
    directory = pulumi_env.backend_dir / ".pulumi" / "locks" / "organization" / "files" / STACK
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{uuid.uuid4()}.json"
    content = {
        "pid": pid,
        "username": "someone",
        "hostname": hostname,
        "timestamp": "2026-01-02T03:04:05.123456789Z",
    }
    path.write_text(json.dumps(content))
    return path


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_handwritten_stale_lock_blocks_up_until_cleared(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    target: Path,
) -> None:
    """A lock naming this host and a dead pid gives CONFLICT; clearing it lets ``up`` run."""
    pid = dead_pid()
    write_lock(pulumi_env, pid=pid, hostname=socket.gethostname())

    blocked = run(runner, make_request())

    assert blocked.error is ErrorKind.CONFLICT
    assert blocked.lock is not None
    assert (blocked.lock.pid, blocked.lock.hostname, blocked.lock.username) == (
        pid,
        socket.gethostname(),
        "someone",
    )
    assert blocked.lock.timestamp == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert runner.clear_stale_lock(make_request())
    assert lock_files(pulumi_env) == []
    assert succeeded(run(runner, make_request()))
    assert target.exists()


@pytest.mark.parametrize(
    ("owner", "cleared"),
    [
        pytest.param("this-host-live-non-pulumi", True, id="pid-reused-by-non-pulumi"),
        pytest.param("other-host-dead", False, id="other-host"),
        pytest.param("this-host-no-pid", False, id="unknown-pid"),
    ],
)
def test_clear_stale_lock_rules(
    runner: Runner,
    make_request: Callable[..., UpdateRequest],
    pulumi_env: PulumiEnv,
    owner: str,
    cleared: bool,  # noqa: FBT001 - a test parameter
) -> None:
    """Only locks of this host whose pid is gone or is not pulumi are cleared."""
    pid, host = {
        "this-host-live-non-pulumi": (os.getpid(), socket.gethostname()),
        "other-host-dead": (dead_pid(), "some-other-pod"),
        "this-host-no-pid": (0, socket.gethostname()),
    }[owner]
    lock = write_lock(pulumi_env, pid=pid, hostname=host)

    assert runner.clear_stale_lock(make_request()) is cleared
    assert lock.exists() is not cleared


def test_clear_stale_lock_ignores_other_backends_and_unlocked_stacks(
    runner: Runner, make_request: Callable[..., UpdateRequest], pulumi_env: PulumiEnv
) -> None:
    """No lock, or a backend that is not ``file://``: nothing to clear."""
    assert not runner.clear_stale_lock(make_request())
    lock = write_lock(pulumi_env, pid=dead_pid(), hostname=socket.gethostname())

    assert not runner.clear_stale_lock(make_request(env={"PULUMI_BACKEND_URL": "s3://bucket"}))
    assert lock.exists()


# --- destroy --------------------------------------------------------------------------------


def test_destroy_removes_the_file_and_the_stack(
    runner: Runner,
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
    runner: Runner, make_request: Callable[..., UpdateRequest]
) -> None:
    """A stack that does not exist counts as destroyed."""
    outcome = runner.destroy(make_request(), on_progress=ProgressLog(), stop=threading.Event())

    assert succeeded(outcome)
    assert outcome.resource_changes == {}
    assert "does not exist" in outcome.message
