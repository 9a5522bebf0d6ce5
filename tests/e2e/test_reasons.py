"""Six reasons a Stack can fail with, each reached end to end and each mended as users would.

Real operator, control plane, Pulumi CLI and git servers, as in the lifecycle tests. For
each reason the user sees, through the API: Ready=False with that reason and a message
naming the cause, for the current generation; Stalled=True exactly when nothing but a
change can help (``ProgramInvalid``, ``StackNotFound``, ``AuthenticationFailed``), else
Reconciling=True (``ProgressingWithRetry`` while a failed run is retried, the reason itself
while deletion is blocked); and a Warning Event with the reason. Then the cause is fixed
and the Stack recovers (or, being deleted, goes).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.beds import OFF_NODE, Bed
from tests.e2e.conftest import (
    Operator,
    Program,
    Sentinels,
    Stacks,
    basic_auth,
    files_program,
    find,
    is_ready,
    private_repo,
)
from tests.e2e.waits import checkpoint

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
# What the run itself finds (its program, its stack, a refresh, a preview, a destroy) is
# proven under both pod-less runners; git refusing the operator's own ls-remote is not a
# run's: local only.
off_node = pytest.mark.parametrize("runner", OFF_NODE)

FINALIZER = "finalizer.stack.pulumi.com"
RETRYING = "ProgressingWithRetry"

# Inserted into the files program before its resources: a provider ``read`` that reports
# the file's real content, so that a refresh sees a file edited by hand (drift).
READ_METHOD = """
def _read(self, id_, props):
    from pulumi.dynamic import ReadResult

    with open(props["path"], encoding="utf-8") as handle:
        return ReadResult(id_, {**props, "content": handle.read()})


FileProvider.read = _read

"""
READ_ANCHOR = "config = pulumi.Config()\n"

# The files program's project as YAML, with the deprecated `configuration:` block (the
# language host warns about it in colour) and a type error (its errors, in colour, then it
# bails: the engine reports nothing).
YAML = """\
name: files
runtime: yaml
configuration:
  path:
    type: String
  content:
    type: String
outputs:
  where: ${path.directory}
"""


def assert_shown(
    stacks: Stacks, obj: Mapping[str, Any], reason: str, cause: str, reconciling: str | None
) -> None:
    """What a user reads about a failing Stack.

    Ready=False with ``reason`` and ``cause`` in its message, for the current generation;
    ``reconciling`` None: Stalled=True with ``reason`` and no Reconciling, else no Stalled
    and Reconciling=True with that reason. A Warning Event with ``reason`` exists.
    """
    name, status = obj["metadata"]["name"], obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"], status
    ready = find(obj, "Ready")
    assert ready is not None, status
    assert (ready["status"], ready["reason"]) == ("False", reason), ready
    assert cause.lower() in ready["message"].lower(), ready
    stalled, progressing = find(obj, "Stalled"), find(obj, "Reconciling")
    if reconciling is None:
        assert stalled is not None, status
        assert (stalled["status"], stalled["reason"]) == ("True", reason), stalled
        assert progressing is None, status
    else:
        assert stalled is None, status
        assert progressing is not None, status
        assert (progressing["status"], progressing["reason"]) == ("True", reconciling)
    events = stacks.wait_events(name, reason)
    assert {e.type for e in events if e.reason == reason} == {"Warning"}


def last_attempt(obj: Mapping[str, Any]) -> str | None:
    """The commit of the Stack's last attempted run."""
    return (obj.get("status", {}).get("lastUpdate") or {}).get("lastAttemptedCommit")


def ready_reason(obj: Mapping[str, Any]) -> str | None:
    """The reason of the Stack's Ready condition, if it is about the current generation."""
    ready = find(obj, "Ready")
    current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
    return str(ready["reason"]) if ready is not None and current else None


# -- ProgramInvalid ------------------------------------------------------------------------


@off_node
def test_a_program_that_cannot_run_stalls_until_a_commit_fixes_it(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path
) -> None:
    """No runtime, a syntax error, YAML that does not type-check: ProgramInvalid; then a fix.

    The YAML language host reports its warning and errors in colour and bails: the message
    is its errors, first, as plain text (no terminal code, no warning, no progress line).
    """
    del operator
    program = Program(bed.git, tmp_path / "checkouts", "python")  # its code is broken
    source = files_program("python")
    no_runtime = program.commit("no runtime", **{"app/Pulumi.yaml": "name: files\n"})
    stacks.create(stacks.manifest("invalid", program))
    obj = stacks.wait_reason("invalid", "Ready", "ProgramInvalid")
    assert_shown(stacks, obj, "ProgramInvalid", "Pulumi.yaml", reconciling=None)
    assert last_attempt(obj) == no_runtime

    broken = {**source, "app/__main__.py": "def broken(:\n" + source["app/__main__.py"]}
    syntax_error = program.commit("syntax error", **broken)
    obj = stacks.wait(
        "invalid",
        lambda o: ready_reason(o) == "ProgramInvalid" and last_attempt(o) == syntax_error,
        "ProgramInvalid for the commit with a syntax error",
    )
    assert_shown(stacks, obj, "ProgramInvalid", "SyntaxError", reconciling=None)

    yaml_errors = program.commit("YAML that does not type-check", **{"app/Pulumi.yaml": YAML})
    obj = stacks.wait(
        "invalid",
        lambda o: ready_reason(o) == "ProgramInvalid" and last_attempt(o) == yaml_errors,
        "ProgramInvalid for the commit with YAML type errors",
    )
    assert_shown(stacks, obj, "ProgramInvalid", "cannot access a property", reconciling=None)
    message = find(obj, "Ready")["message"]  # type: ignore[index]
    assert message.startswith("Error: cannot access a property on 'path' (type string)\n")
    assert not [part for part in ("\x1b", "Warning", "Updating (") if part in message], message
    events = stacks.wait_events("invalid", "ProgramInvalid")
    assert not [e.message for e in events if "\x1b" in str(e.message)]

    fixed = program.commit("fix", **source)
    obj = stacks.wait(
        "invalid",
        lambda o: is_ready(o) and o["status"]["lastUpdate"].get("lastSuccessfulCommit") == fixed,
        "Ready at the fixing commit",
    )
    assert stacks.target("invalid").read_text() == "one"


# -- StackNotFound -------------------------------------------------------------------------


@off_node
def test_use_local_stack_only_without_the_stack_stalls_until_it_is_dropped(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """``useLocalStackOnly`` and no such stack: StackNotFound; dropping the field creates it."""
    del operator
    stacks.create(stacks.manifest("local", program, useLocalStackOnly=True))
    obj = stacks.wait_reason("local", "Ready", "StackNotFound")
    assert_shown(stacks, obj, "StackNotFound", "no stack named", reconciling=None)
    assert not stacks.target("local").exists()

    stacks.patch("local", {"spec": {"useLocalStackOnly": None}})  # null deletes the field
    stacks.wait_ready("local")
    assert stacks.target("local").read_text() == "one"


# -- AuthenticationFailed ------------------------------------------------------------------


def test_credentials_git_refuses_stall_until_the_secret_is_fixed(
    stacks: Stacks, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """A wrong password in the gitAuth Secret: AuthenticationFailed; the right one recovers.

    The repository is served over HTTP behind basic authentication; the server saw the
    requests and refused every one. Both passwords are sentinels: neither may show up in
    status, Events, logs or metrics (the operator fixture scans them).
    """
    del operator
    with private_repo(stacks, sentinels, tmp_path, right=False) as repo:
        auth = basic_auth("git-credentials")
        stacks.create(stacks.manifest("private", repo.program, gitAuth=auth))
        obj = stacks.wait_reason("private", "Ready", "AuthenticationFailed")
        assert_shown(stacks, obj, "AuthenticationFailed", "Authentication failed", reconciling=None)
        refused = [request.user for request in repo.server.requests]
        assert refused, "git never asked the server"
        assert set(refused) == {None}, f"the server accepted a request: {repo.server.requests}"

        stacks.update_secret("git-credentials", {"password": sentinels.git_password})
        stacks.wait_ready("private")
        assert stacks.target("private").read_text() == "one"


# -- RefreshDriftDetected ------------------------------------------------------------------


@off_node
def test_drift_found_by_the_refresh_fails_the_run_until_it_is_undone(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path
) -> None:
    """``expectNoRefreshChanges`` and a file edited by hand: RefreshDriftDetected, retried.

    The run is requested with a reconcile request; ``up`` does not run after the drift.
    Once the file has its deployed content again, the next retry succeeds by itself.
    """
    del operator
    program = Program(bed.git, tmp_path / "checkouts", "python")  # its provider reads
    source = files_program("python")["app/__main__.py"]
    assert READ_ANCHOR in source, "the files program changed: update READ_ANCHOR"
    program.commit(
        "readable", **{"app/__main__.py": source.replace(READ_ANCHOR, READ_METHOD + READ_ANCHOR)}
    )
    stacks.create(stacks.manifest("drift", program, refresh=True, expectNoRefreshChanges=True))
    stacks.wait_ready("drift")
    target = stacks.target("drift")
    target.write_text("edited by hand")

    stacks.request_reconcile("drift", "check-drift")
    obj = stacks.wait_reason("drift", "Ready", "RefreshDriftDetected")
    assert_shown(
        stacks, obj, "RefreshDriftDetected", "no changes were expected", reconciling=RETRYING
    )
    assert target.read_text() == "edited by hand", "pulumi up ran after the drift"

    target.write_text("one")  # the deployed content: nothing drifted any more
    obj = stacks.wait_ready("drift")
    assert obj["status"]["lastUpdate"]["failures"] == 0


# -- PreviewFailed -------------------------------------------------------------------------


@off_node
def test_a_failing_preview_is_retried_until_the_spec_fixes_it(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """``preview: true`` and required config missing: PreviewFailed, retried; the fix previews.

    The message names the missing key as the program's language host does.
    """
    del operator
    stacks.create(stacks.manifest("look", program, preview=True, config={"content": "one"}))
    obj = stacks.wait_reason("look", "Ready", "PreviewFailed")
    missing = "missing configuration value 'path'"  # the YAML language host's words
    assert_shown(stacks, obj, "PreviewFailed", missing, reconciling=RETRYING)

    target = stacks.target("look")
    stacks.patch("look", {"spec": {"config": {"path": str(target)}}})  # merged into config
    obj = stacks.wait_ready("look")
    assert obj["status"]["lastUpdate"]["type"] == "preview"
    assert not target.exists()


# -- DeletionBlocked -----------------------------------------------------------------------


@off_node
def test_a_failing_destroy_blocks_deletion_until_fixed_or_abandoned(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """``destroyOnFinalize`` and a resource whose delete fails: DeletionBlocked, finalizer kept.

    Each Stack's file is replaced by a directory, which the provider's delete cannot
    remove. Removing the directory lets the retried destroy finish; setting
    ``destroyOnFinalize: false`` releases the other Stack and leaves its resource alone.
    """
    del operator
    names = ("fixed", "abandoned")
    for name in names:
        stacks.create(stacks.manifest(name, program, destroyOnFinalize=True))
    for name in names:
        stacks.wait_ready(name)
        stacks.target(name).unlink()
        stacks.target(name).mkdir()
        stacks.delete(name)
    for name in names:
        obj = stacks.wait_reason(name, "Ready", "DeletionBlocked")
        assert_shown(
            stacks, obj, "DeletionBlocked", "destroy failed", reconciling="DeletionBlocked"
        )
        assert "Is a directory" in find(obj, "Ready")["message"]  # type: ignore[index]
        assert obj["metadata"]["deletionTimestamp"]
        assert obj["metadata"]["finalizers"] == [FINALIZER]

    stacks.target("fixed").rmdir()
    stacks.wait_gone("fixed")
    stacks.wait_events("fixed", "Destroyed")
    assert not stacks.target("fixed").exists()

    stacks.patch("abandoned", {"spec": {"destroyOnFinalize": False}})
    stacks.wait_gone("abandoned")
    assert stacks.target("abandoned").is_dir(), "an abandoned Stack's resources stay"
    assert checkpoint(stacks.backend, "abandoned").get("resources"), "and so does its stack"
