"""One verdict per source failure, whichever runner laid the source out.

The local runner's source is laid out by the operator before the run (the preparer raises);
a job-taking runner's (a run pod, the agent) by the agent, which reports the failure typed
across the seam (``ErrorKind.SOURCE_FAILED`` with a ``SourceFault``, through the report
channel's line). For every cause in ``CAUSES`` both runners must leave the same status,
``lastUpdate``, Events and requeue — on the first failure and on the retry after it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller.reconciler import Result
from pulumi_stack_operator import agent
from pulumi_stack_operator.agent import AgentJob
from tests.reconcile.stack_harness import Harness
from workspace.runner import ErrorKind, Outcome, PodRunner, outcome_line, parse_line
from workspace.runner.document import GitCheckout, JobDocument
from workspace.source import ProgramDirError, SourceError, SourceFailure


def _source(reason: SourceFailure, message: str, *, transient: bool = False) -> SourceError:
    return SourceError(message, reason=reason, transient=transient)


CAUSES: dict[str, tuple[SourceError | ProgramDirError, tuple[str, str, str]]] = {
    # cause: (the failure, (Ready's reason, Stalled's status, Reconciling's status))
    "a Flux artifact whose digest differs": (
        _source(SourceFailure.ARTIFACT_DIGEST_MISMATCH, "digest sha256:aa… differs: sha256:bb…"),
        ("ArtifactDigestMismatch", "True", "-"),
    ),
    "an unsafe Flux artifact": (
        _source(SourceFailure.ARTIFACT_UNSAFE, "entry '../x' leaves the archive"),
        ("ArtifactUnsafe", "True", "-"),
    ),
    "git credentials the server refuses": (
        _source(SourceFailure.AUTHENTICATION_FAILED, "Authentication failed for 'https://…'"),
        ("AuthenticationFailed", "True", "-"),
    ),
    "a commit the remote does not have": (
        _source(SourceFailure.REVISION_NOT_FOUND, "commit a1a1… not found"),
        ("SourceUnavailable", "True", "-"),
    ),
    "a source that does not answer": (
        _source(SourceFailure.SOURCE_UNAVAILABLE, "connection refused", transient=True),
        ("SourceUnavailable", "-", "True"),
    ),
    "a URL git refuses": (
        _source(SourceFailure.SOURCE_UNAVAILABLE, "transport 'file' not allowed"),
        ("SourceUnavailable", "True", "-"),
    ),
    "a program directory not in the source": (
        ProgramDirError("spec.repoDir 'app' does not exist in the source at this revision"),
        ("InvalidSpec", "True", "-"),
    ),
}
"""Every failure of laying a source out that a run can meet, and the verdict it earns."""


def local(tmp_path: Path, err: SourceError | ProgramDirError) -> Harness:
    """The local runner's world: the operator's own checkout fails with ``err``."""
    h = Harness(tmp_path / "local")
    if isinstance(err, SourceError):
        h.source.checkout_error = err
    else:
        h.source.program_dir = _raises(err)  # type: ignore[method-assign]
    return h


def job_taking(tmp_path: Path, err: SourceError | ProgramDirError) -> Harness:
    """A job-taking runner's world: the agent's checkout fails with ``err``, reported."""
    h = Harness(tmp_path / "job", runner_traits=PodRunner.traits)
    h.runner.then(lambda *_args: reported(err), lambda *_args: reported(err))
    return h


def reported(err: SourceError | ProgramDirError) -> Outcome:
    """The outcome the agent prints for ``err``, as the operator reads it off its line."""
    job = AgentJob(JobDocument(GitCheckout("https://git.example/r.git", "c" * 40), "dev"), "up", {})
    line = outcome_line(agent.source_failed(job, datetime(2026, 1, 1, tzinfo=UTC), err))
    read = parse_line(line)
    assert isinstance(read, Outcome)
    return read


def _raises(err: Exception) -> Callable[..., Path]:
    def program_dir(*_args: object) -> Path:
        raise err

    return program_dir


def seen(h: Harness, result: Result) -> dict[str, Any]:
    """What users and tools see of the pass: status (no times), Events, requeue."""
    status = h.status
    conditions = [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]]
    last = {k: v for k, v in status.get("lastUpdate", {}).items() if "Time" not in k}
    events = [(e.type_, e.reason, e.message) for e in h.events.posted]
    return {
        "conditions": conditions,
        "lastUpdate": last,
        "events": events,
        "requeue": result.requeue_after,
        "updates": list(h.metrics.updates),
    }


@pytest.mark.parametrize("cause", CAUSES)
def test_both_runners_reach_the_same_verdict(tmp_path: Path, cause: str) -> None:
    """Same status, ``lastUpdate``, Events and requeue; then the same again on the retry."""
    err, (reason, stalled, reconciling) = CAUSES[cause]
    hosts = local(tmp_path, err), job_taking(tmp_path, err)
    for h in hosts:
        h.create()
    first = [seen(h, h.reconcile()) for h in hosts]
    assert first[0] == first[1]
    kstatus = hosts[0].kstatus()
    assert kstatus["Ready"] == ("False", reason)
    assert kstatus.get("Stalled", ("-",))[0] == stalled
    assert kstatus.get("Reconciling", ("-",))[0] == reconciling
    assert str(err) in hosts[0].message()
    for h in hosts:
        h.annotate("pulumi.com/reconciliation-request", "again")
        h.clock.step(3600)
    again = [seen(h, h.reconcile()) for h in hosts]
    assert again[0] == again[1]
    assert len(hosts[1].runner.calls) == 2, "the retry ran"
    assert len(again[0]["events"]) > len(first[0]["events"]), "the retry said so"


def test_every_source_failure_is_a_cause() -> None:
    """A new ``SourceFailure`` must be added to ``CAUSES`` (and so proven under both)."""
    met = {err.reason for err, _ in CAUSES.values() if isinstance(err, SourceError)}
    assert met == set(SourceFailure)


def test_the_agent_reports_a_source_failure_typed() -> None:
    """Kind ``SOURCE_FAILED``, the source layer's failure and transience, its own words."""
    for err, _ in CAUSES.values():
        outcome = reported(err)
        assert outcome.error is ErrorKind.SOURCE_FAILED
        assert outcome.source is not None
        assert outcome.message == str(err)
        if isinstance(err, SourceError):
            assert (outcome.source.failure, outcome.source.transient) == (err.reason, err.transient)
        else:
            assert outcome.source.failure is None


@pytest.mark.parametrize("cause", CAUSES)
def test_a_destroy_whose_source_fails_is_blocked_alike(tmp_path: Path, cause: str) -> None:
    """``destroyOnFinalize``: the same ``DeletionBlocked`` under both runners."""
    err, _ = CAUSES[cause]
    hosts = Harness(tmp_path / "local"), Harness(tmp_path / "job", runner_traits=PodRunner.traits)
    for h in hosts:
        h.create(destroyOnFinalize=True)
        h.runner.then(h.succeed())
        h.reconcile()
        h.delete()
    hosts[0].source.checkout_error = err if isinstance(err, SourceError) else None
    if not isinstance(err, SourceError):
        hosts[0].source.program_dir = _raises(err)  # type: ignore[method-assign]
    hosts[1].runner.then(lambda *_args: reported(err))
    after = [seen(h, h.reconcile()) for h in hosts]
    assert after[0] == after[1]
    assert hosts[0].kstatus()["Ready"] == ("False", "DeletionBlocked")
    assert str(err) in hosts[0].message()
