"""Config: the stack settings file the runner writes, and what the program then sees."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.pulumi_env import PulumiEnv
from tests.workspace.runner.support import (
    SECRET_VALUE,
    STACK,
    ArgvSpy,
    run,
    subcommands,
    succeeded,
)
from workspace.runner import ErrorKind, LocalRunner, UpdateRequest
from workspace.runner.failures import StepFailedError
from workspace.runner.project import update_stack_file
from workspace.runner.types import MASK


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


def digest(value: str) -> str:
    """How ``echo`` reports a value longer than 1000 characters."""
    return f"sha256:{hashlib.sha256(value.encode()).hexdigest()} len:{len(value)}"


@pytest.mark.pulumi
def test_secret_config_is_encrypted_and_never_on_argv(
    runner: LocalRunner,
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


@pytest.mark.pulumi
def test_config_removed_from_the_request_is_removed_from_the_stack(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], program: Path
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


@pytest.mark.pulumi
def test_a_200_kb_config_value_is_set_without_a_command_line(
    runner: LocalRunner, pulumi_env: PulumiEnv, echo: Path, argv_spy: ArgvSpy
) -> None:
    """Plain config goes into the stack's settings file: no size limit, never in ``ps``.

    (As an argument, 200 kB fails: "argument list too long".) The CLI reads it back whole.
    It cannot reach a program, though: the language host passes all config in one
    environment variable, and Linux limits one to 128 KiB (see the next tests).
    """
    big = f"{SECRET_VALUE}-big-" + "x" * 200_000

    assert runner.prepare(echo_request(pulumi_env, echo, {"big": big})) is None

    read = subprocess.run(
        [str(pulumi_env.bin_dir / "pulumi"), "--non-interactive", "config", "get", "big"],
        cwd=echo,
        env={**os.environ, **pulumi_env.env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert read.stdout.rstrip("\n") == big
    assert not [argv for argv in argv_spy.argvs if any(SECRET_VALUE in a for a in argv)]
    assert argv_spy.proc_hits == []


@pytest.mark.pulumi
def test_config_values_reach_the_program_and_never_a_command_line(
    runner: LocalRunner, pulumi_env: PulumiEnv, echo: Path, argv_spy: ArgvSpy
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
    assert subcommands(argv_spy.argvs) == [("stack", "select"), ("up",)]  # select --create
    assert not [argv for argv in argv_spy.argvs if any(SECRET_VALUE in a for a in argv)]
    assert argv_spy.proc_hits == []  # no process's cmdline held one, CLI children included


@pytest.mark.pulumi
def test_config_over_the_environment_limit_fails_the_program_not_the_setup(
    runner: LocalRunner, pulumi_env: PulumiEnv, echo: Path
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


@pytest.mark.pulumi
def test_plain_config_values_stay_strings_through_the_cli_rewriting_the_file(
    runner: LocalRunner, pulumi_env: PulumiEnv, echo: Path
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


@pytest.mark.pulumi
def test_config_goes_where_the_cli_reads_it_for_qualified_names_and_stack_config_dir(
    runner: LocalRunner, pulumi_env: PulumiEnv, echo: Path
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

    update_stack_file(path, {"files:managed": "new", "files:n": "0"}, {"files:gone"})

    text = path.read_text()
    for line in SOURCE_STACK_FILE.splitlines():
        if "managed" not in line and "gone" not in line:
            assert line in text.splitlines()
    assert "files:gone" not in text
    config = yaml.safe_load(text)["config"]
    assert (config["files:managed"], config["files:n"]) == ("new", "0")
    assert config["files:token"] == {"secure": "v1:AAAA:BBBB"}
    assert [p.name for p in tmp_path.iterdir()] == ["Pulumi.dev.yaml"]


def test_a_json_settings_file_is_merged_as_json(tmp_path: Path) -> None:
    """``Pulumi.<stack>.json`` keeps its other keys; managed ones change."""
    path = tmp_path / "Pulumi.dev.json"
    path.write_text('{"secretsprovider": "passphrase", "config": {"p:a": "1", "p:b": "2"}}')

    update_stack_file(path, {"p:c": "3"}, {"p:b"})

    assert yaml.safe_load(path.read_text()) == {
        "secretsprovider": "passphrase",
        "config": {"p:a": "1", "p:c": "3"},
    }


@pytest.mark.parametrize("content", ["config: [1, 2]\n", "config: {a: b\n", "- a list\n"])
def test_a_settings_file_that_is_not_one_is_program_invalid(tmp_path: Path, content: str) -> None:
    """A stack settings file from the source that cannot be read needs a source change."""
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(content)

    with pytest.raises(StepFailedError) as failed:
        update_stack_file(path, {"files:a": "b"}, set())

    assert failed.value.kind is ErrorKind.PROGRAM_INVALID
    assert "Pulumi.dev.yaml" in failed.value.detail
    assert path.read_text() == content
