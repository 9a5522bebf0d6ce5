"""The run pod's report lines: what the agent prints is what the operator reads, nothing else."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from workspace.runner import ErrorKind, InstallRecord, Outcome, Progress, ProjectInfo, SourceFault
from workspace.runner.channel import PREFIX, fitted, outcome_line, parse_line, progress_line
from workspace.source import SourceFailure

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 10, 5, tzinfo=UTC)


def outcome(**fields: object) -> Outcome:
    """A successful ``up`` with outputs, changed by ``fields``."""
    base: dict[str, object] = {
        "operation": "up",
        "succeeded": True,
        "error": ErrorKind.NONE,
        "message": "",
        "outputs": {"url": "http://x", "token": "[secret]", "nested": {"a": [1, 2]}},
        "resource_changes": {"create": 2, "same": 1},
        "permalink": None,
        "started": T0,
        "ended": T1,
    }
    return Outcome(**{**base, **fields})  # type: ignore[arg-type]


def test_progress_and_outcome_round_trip() -> None:
    """Each report comes back equal from its own line."""
    progress = Progress("update", 3, 7, 1, "create urn:pulumi:dev::p::x")
    assert parse_line(progress_line(progress)) == progress
    for sent in (outcome(), outcome(succeeded=False, error=ErrorKind.UPDATE_FAILED, message="x")):
        assert parse_line(outcome_line(sent)) == sent


def test_installs_and_their_cache_come_back_from_the_pod() -> None:
    """The install step's progress (with its start) and the outcome's installs and bytes."""
    installing = Progress("install", 0, 0, 0, "installing dependencies (npm ci)", T0)
    assert parse_line(progress_line(installing)) == installing
    installs = (
        InstallRecord("nodejs", "npm ci", hit=False, seconds=41.5),
        InstallRecord("plugins", "pulumi install", hit=True, seconds=0.002, succeeded=True),
    )
    failed = InstallRecord("python", "pip", hit=False, seconds=3.0, succeeded=False)
    for sent in (
        outcome(installs=installs, cache_bytes={"environments": 10, "plugins": 7}),
        outcome(succeeded=False, error=ErrorKind.DEPENDENCIES_INVALID, installs=(failed,)),
    ):
        assert parse_line(outcome_line(sent)) == sent


def test_the_project_comes_back_and_a_line_without_one_names_none() -> None:
    """With a project (success or failure) it round-trips; an older agent's line has none."""
    project = ProjectInfo(name="app", runtime="nodejs")
    for sent in (
        outcome(project=project),
        outcome(succeeded=False, error=ErrorKind.SETUP_FAILED, message="x", project=project),
        outcome(),
    ):
        assert parse_line(outcome_line(sent)) == sent
    body = json.loads(outcome_line(outcome(project=project))[len(PREFIX) :])
    assert body["outcome"]["project"] == {"name": "app", "runtime": "nodejs"}
    del body["outcome"]["project"]
    older = parse_line(PREFIX + json.dumps(body))
    assert isinstance(older, Outcome)
    assert older.project is None
    assert "project" not in json.loads(outcome_line(outcome())[len(PREFIX) :])["outcome"]


@pytest.mark.parametrize("project", ["app", {"name": "app"}, {"name": 1, "runtime": "go"}])
def test_a_malformed_project_is_a_malformed_report(project: object) -> None:
    """A project that is not ``{"name": str, "runtime": str}`` drops the line, as other fields."""
    body = json.loads(outcome_line(outcome())[len(PREFIX) :])
    body["outcome"]["project"] = project
    assert parse_line(PREFIX + json.dumps(body)) is None


@pytest.mark.parametrize(
    "line",
    [
        "an ordinary log line",
        '{"outcome": {}}',  # no prefix
        PREFIX + "not json",
        PREFIX + '{"progress": {"step": "update"}}',  # fields missing
        PREFIX + '{"progress": {"step": "dance", "done": 1, "total": 1, "failed": 0}}',
        PREFIX + '{"progress": {"step": "update", "done": -1, "total": 1, "failed": 0}}',
        PREFIX + '{"progress": {"step": "update", "done": true, "total": 1, "failed": 0}}',
        PREFIX + '{"progress": {}, "outcome": {}}',  # two reports in one line
        PREFIX + "[1, 2]",
    ],
)
def test_anything_else_is_not_a_report(line: str) -> None:
    """Other lines and malformed reports are dropped."""
    assert parse_line(line) is None


def test_a_report_cannot_name_a_stack_or_claim_a_detached_run() -> None:
    """Extra keys are ignored (nothing names a Stack or generation); "Detached" is refused."""
    body = json.loads(outcome_line(outcome())[len(PREFIX) :])
    body["outcome"] |= {"namespace": "other", "name": "victim", "generation": 99}
    parsed = parse_line(PREFIX + json.dumps(body))
    assert parsed == outcome()
    body["outcome"]["error"] = "Detached"
    assert parse_line(PREFIX + json.dumps(body)) is None


def test_success_needs_no_error_and_times_need_a_zone() -> None:
    """``succeeded`` with an error kind is a failure; a naive time is refused."""
    body = json.loads(outcome_line(outcome())[len(PREFIX) :])
    body["outcome"]["error"] = "UpdateFailed"
    parsed = parse_line(PREFIX + json.dumps(body))
    assert isinstance(parsed, Outcome)
    assert not parsed.succeeded
    body["outcome"]["started"] = "2026-12-01T10:00:00"
    assert parse_line(PREFIX + json.dumps(body)) is None


def test_an_outcome_too_large_for_a_line_is_fitted_not_lost() -> None:
    """The largest outputs are cut first; the line then parses (the outcome is kept)."""
    big = outcome(outputs={"blob": "x" * 5000, "small": "ok"})
    fit = fitted(big, limit=1000)
    assert fit.outputs == {"blob": "[truncated: 5002 bytes]", "small": "ok"}
    assert len(outcome_line(fit)) <= 1000
    assert parse_line(outcome_line(fit)) == fit
    assert fitted(outcome()) == outcome()


def test_the_phase_seconds_come_back_and_an_older_line_has_none() -> None:
    """``seconds`` round-trips; a line without it (an older agent) reads as empty."""
    sent = outcome(seconds={"checkout": 1.25, "install": 0.5, "cli": 3.0})
    assert parse_line(outcome_line(sent)) == sent
    body = json.loads(outcome_line(outcome())[len(PREFIX) :])
    assert "seconds" not in body["outcome"]
    older = parse_line(outcome_line(outcome()))
    assert isinstance(older, Outcome)
    assert older.seconds == {}
    body["outcome"]["seconds"] = ["not", "an", "object"]
    assert parse_line(PREFIX + json.dumps(body)) is None


@pytest.mark.parametrize(
    "fault",
    [SourceFault(failure, transient) for failure in SourceFailure for transient in (False, True)]
    + [SourceFault(None)],
    ids=str,
)
def test_a_source_fault_comes_back_typed(fault: SourceFault) -> None:
    """Each source failure (and a missing program directory) crosses the line as it was."""
    sent = outcome(succeeded=False, error=ErrorKind.SOURCE_FAILED, message="x", source=fault)
    assert parse_line(outcome_line(sent)) == sent
    assert "source" not in json.loads(outcome_line(outcome())[len(PREFIX) :])["outcome"]


@pytest.mark.parametrize(
    "source", ["ArtifactUnsafe", {"failure": "Unheard"}, {"failure": None}, {"transient": 1}]
)
def test_a_malformed_source_fault_is_a_malformed_report(source: object) -> None:
    """A fault that is not ``{"failure": known or null, "transient": bool}`` drops the line."""
    body = json.loads(outcome_line(outcome())[len(PREFIX) :])
    body["outcome"]["source"] = source
    assert parse_line(PREFIX + json.dumps(body)) is None
