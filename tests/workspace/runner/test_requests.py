"""What a request's fields become on the CLI's command lines, and the project on the outcome.

A fake ``pulumi`` (a script recording its argv, keeping a stack's ESC environment list in a
file as ``pulumi config env`` does, and succeeding at everything else) stands in for the
CLI, so this runs without the real one; the real CLI's side of these flags is Pulumi's.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from workspace.runner import ErrorKind, LocalRunner, Outcome, ProjectInfo, UpdateRequest

STACK = "dev"
FAKE = textwrap.dedent(
    """\
    import json, pathlib, sys

    here = pathlib.Path(__file__).parent
    args = [arg for arg in sys.argv[1:] if arg != "--non-interactive"]
    with (here / "argv.jsonl").open("a") as calls:
        calls.write(json.dumps(args) + "\\n")
    state_file = here / "state.json"
    state = json.loads(state_file.read_text())
    envs = state["environments"]
    names = args[args.index("--") + 1 :] if "--" in args else []
    if args[:3] == ["config", "env", "ls"]:
        print(json.dumps(envs) if state["listing"] is None else state["listing"])
    elif args[:3] == ["config", "env", "add"]:
        for name in names:
            if name in state["missing"]:
                print(f"error: environment {name!r} not found", file=sys.stderr)
                sys.exit(255)
        envs.extend(names)
    elif args[:3] == ["config", "env", "rm"]:
        del envs[len(envs) - 1 - envs[::-1].index(names[0])]  # the last import of it
    elif args[:2] == ["stack", "output"]:
        print("{}")
    state_file.write_text(json.dumps(state))
    """
)


@dataclass(frozen=True)
class FakeCli:
    """A fake ``pulumi`` in ``root``: what it was asked to run, and its stack's state."""

    root: Path

    @property
    def command(self) -> str:
        """The script's path (a ``CliBinary``)."""
        return str(self.root / "fake-pulumi")

    def calls(self) -> list[list[str]]:
        """Every command line it ran, without ``--non-interactive``, in order."""
        path = self.root / "argv.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def forget(self) -> None:
        """Forget the command lines run so far."""
        (self.root / "argv.jsonl").unlink(missing_ok=True)

    def environments(self) -> list[str]:
        """The stack's environment list as it stands."""
        state: list[str] = self._state()["environments"]
        return state

    def set(self, **fields: Any) -> None:
        """Change its state: ``environments``, ``missing`` (ones add refuses), ``listing``."""
        self._write({**self._state(), **fields})

    def _state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((self.root / "state.json").read_text())
        return state

    def _write(self, state: dict[str, Any]) -> None:
        (self.root / "state.json").write_text(json.dumps(state))


@pytest.fixture
def cli(tmp_path: Path) -> FakeCli:
    """A fake CLI whose stack has no environments."""
    root = tmp_path / "cli"
    root.mkdir()
    script = root / "fake-pulumi"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(0o755)
    fake = FakeCli(root)
    fake._write({"environments": [], "missing": [], "listing": None})  # noqa: SLF001
    return fake


@pytest.fixture
def runner(cli: FakeCli, tmp_path: Path) -> LocalRunner:
    """A runner on the fake CLI."""
    return LocalRunner(cli, tmp_path / "pulumi-home", cache=tmp_path / "cache")


def program(root: Path, project: str) -> Path:
    """A program directory whose project file is ``project``."""
    work_dir = root / "program"
    work_dir.mkdir(exist_ok=True)
    (work_dir / "Pulumi.yaml").write_text(project)
    return work_dir


YAML_PROGRAM = "name: app\nruntime: yaml\nresources: {}\n"


def request(tmp_path: Path, project: str = YAML_PROGRAM, **fields: Any) -> UpdateRequest:
    """A request for ``dev`` of a program with ``project`` as its Pulumi.yaml."""
    return UpdateRequest(
        work_dir=program(tmp_path, project),
        stack=STACK,
        env={"PULUMI_BACKEND_URL": "https://api.pulumi.example"},
        pulumi_home=tmp_path / "home",
        **fields,
    )


def run(runner: LocalRunner, request: UpdateRequest) -> Outcome:
    """``up`` (or ``preview``) with a fresh stop event."""
    return runner.run(request, on_progress=lambda _p: None, stop=threading.Event())


def destroy(runner: LocalRunner, request: UpdateRequest) -> Outcome:
    """``destroy`` with a fresh stop event."""
    return runner.destroy(request, on_progress=lambda _p: None, stop=threading.Event())


def ran(cli: FakeCli, command: str) -> list[str]:
    """The one command line whose first word is ``command``."""
    (found,) = [call for call in cli.calls() if call[0] == command]
    return found


def position(cli: FakeCli, *words: str) -> int:
    """Where the first command line starting with ``words`` is among those run."""
    calls = cli.calls()
    return next(i for i, call in enumerate(calls) if call[: len(words)] == list(words))


def env_calls(cli: FakeCli) -> list[list[str]]:
    """The ``config env`` command lines, each from ``ls``/``add``/``rm`` on."""
    return [call[2:] for call in cli.calls() if call[:2] == ["config", "env"]]


@pytest.mark.parametrize("preview", [False, True])
def test_target_dependents_goes_with_the_targets(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path, *, preview: bool
) -> None:
    """``--target-dependents`` follows the ``--target`` flags of ``up`` and ``preview``."""
    outcome = run(
        runner,
        request(tmp_path, targets=("urn:a", "urn:b"), target_dependents=True, preview=preview),
    )
    assert outcome.succeeded, outcome.message
    argv = ran(cli, "preview" if preview else "up")
    at = argv.index("--target")
    assert argv[at : at + 5] == ["--target", "urn:a", "--target", "urn:b", "--target-dependents"]


def test_target_dependents_without_targets_is_ignored(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """No targets: neither flag (the whole stack is the target anyway)."""
    assert run(runner, request(tmp_path, target_dependents=True)).succeeded
    assert not {"--target", "--target-dependents"} & set(ran(cli, "up"))
    cli.forget()
    assert run(runner, request(tmp_path, targets=("urn:a",))).succeeded
    assert "--target-dependents" not in ran(cli, "up")


def test_run_program_makes_destroy_run_the_program(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """``--run-program`` on destroy; the program's plugins are installed first then."""
    assert destroy(runner, request(tmp_path)).succeeded
    assert "--run-program" not in ran(cli, "destroy")
    assert all(call[0] != "install" for call in cli.calls())
    cli.forget()
    outcome = destroy(runner, request(tmp_path, run_program=True))
    assert outcome.succeeded, outcome.message
    assert "--run-program" in ran(cli, "destroy")
    assert position(cli, "install") < position(cli, "destroy")  # a YAML program's plugins


def test_environments_become_exactly_the_requests_in_order(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """Added in order; then the ones after the shared start are replaced, last first."""
    outcome = run(runner, request(tmp_path, environments=("proj/base", "proj/dev")))
    assert outcome.succeeded, outcome.message
    assert cli.environments() == ["proj/base", "proj/dev"]
    assert env_calls(cli) == [
        ["ls", "--json", "--stack", STACK],
        ["add", "--yes", "--stack", STACK, "--", "proj/base", "proj/dev"],
    ]
    assert position(cli, "config", "env", "add") < position(cli, "up")
    cli.set(environments=["proj/base", "source/extra", "proj/dev", "proj/dev"])
    cli.forget()
    assert run(runner, request(tmp_path, environments=("proj/base", "proj/dev", "x/y"))).succeeded
    assert cli.environments() == ["proj/base", "proj/dev", "x/y"]
    assert env_calls(cli) == [
        ["ls", "--json", "--stack", STACK],
        ["rm", "--yes", "--stack", STACK, "--", "proj/dev"],
        ["rm", "--yes", "--stack", STACK, "--", "proj/dev"],
        ["rm", "--yes", "--stack", STACK, "--", "source/extra"],
        ["add", "--yes", "--stack", STACK, "--", "proj/dev", "x/y"],
    ]


def test_environments_already_right_are_only_listed(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """The list matches: nothing is changed."""
    cli.set(environments=["proj/base"])
    assert run(runner, request(tmp_path, environments=("proj/base",))).succeeded
    assert env_calls(cli) == [["ls", "--json", "--stack", STACK]]


def test_no_environments_leave_the_stacks_list_alone(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """Without environments (every non-Cloud backend) no ``config env`` command runs."""
    cli.set(environments=["from/source"])
    assert run(runner, request(tmp_path)).succeeded
    assert destroy(runner, request(tmp_path)).succeeded
    assert env_calls(cli) == []
    assert cli.environments() == ["from/source"]


def test_environments_are_set_before_a_destroy(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """A destroy may need the environments' provider settings: set before it runs."""
    assert destroy(runner, request(tmp_path, environments=("proj/creds",))).succeeded
    assert position(cli, "config", "env", "add") < position(cli, "destroy")
    assert cli.environments() == ["proj/creds"]


def test_an_environment_the_cli_refuses_is_setup_failed_with_its_message(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """``config env add`` fails: SetupFailed, the CLI's own words, and no update runs."""
    cli.set(missing=["proj/nope"])
    outcome = run(runner, request(tmp_path, environments=("proj/nope",)))
    assert outcome.error is ErrorKind.SETUP_FAILED
    assert "environment 'proj/nope' not found" in outcome.message
    assert all(call[0] != "up" for call in cli.calls())
    assert outcome.project == ProjectInfo("app", "yaml")


def test_a_list_that_is_not_one_is_setup_failed(
    runner: LocalRunner, cli: FakeCli, tmp_path: Path
) -> None:
    """A service-backed stack's ``ls --json`` prints an object: SetupFailed saying so."""
    cli.set(listing=json.dumps({"environment": "org/proj/dev"}))
    outcome = run(runner, request(tmp_path, environments=("proj/base",)))
    assert outcome.error is ErrorKind.SETUP_FAILED
    assert "not a list of environments" in outcome.message


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        (YAML_PROGRAM, ProjectInfo("app", "yaml")),
        ("name: web\nruntime: nodejs\n", ProjectInfo("web", "nodejs")),
        (
            "name: svc\nruntime:\n  name: python\n  options:\n    toolchain: pip\n",
            ProjectInfo("svc", "python"),
        ),
        ("name: api\nruntime: {name: nodejs}\n", ProjectInfo("api", "nodejs")),
    ],
    ids=["yaml", "nodejs", "python-mapping", "nodejs-mapping"],
)
def test_the_outcome_names_the_project_and_its_runtime(
    runner: LocalRunner, tmp_path: Path, project: str, expected: ProjectInfo
) -> None:
    """The project file's name and runtime (a mapping's name) on every kind of outcome."""
    outcome = run(runner, request(tmp_path, project))
    assert outcome.succeeded, outcome.message
    assert outcome.project == expected
    assert destroy(runner, request(tmp_path, project)).project == expected


def test_a_project_file_that_cannot_be_read_names_no_project(
    runner: LocalRunner, tmp_path: Path
) -> None:
    """No runtime: ProgramInvalid, and no project on the outcome (of run or destroy)."""
    invalid = run(runner, request(tmp_path, "name: app\n"))
    assert invalid.error is ErrorKind.PROGRAM_INVALID
    assert invalid.project is None
    assert destroy(runner, request(tmp_path, "name: app\n")).project is None
