"""A verdict about a run's inputs lasts as long as its cause (status contract rule 29).

Every waiting or stalled verdict the reconciler writes before a run — a Flux source or
Program missing or not Ready, a Program that does not render, git refusing the credentials
or the branch, a Secret or ConfigMap missing, a prerequisite not Ready, a ServiceAccount not
allowed — is tried, for a Stack whose last run succeeded and for one whose last run stalled
it, three ways:

- **still broken**: looking again writes nothing and runs nothing;
- **mended to the same revision**: the Stack returns, in one write, to the status its last
  run earned (the very conditions), with no run and no reconcile request;
- **mended to a new revision**: the new revision runs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.cache import ObjectKey
from controller.reconciler import TransientError
from reconcile.tenancy import RUNNER_LABEL
from status.conditions import Reason
from tests.reconcile.stack_harness import SECRET_REF, Harness
from tests.reconcile.test_stack_sources import FLUX, PASSWORD, PROGRAM, git_repository, program
from workspace.runner import ErrorKind, PodRunner
from workspace.source import SourceError, SourceFailure

OTHER = "9c3f2aa" + "1" * 33
World = Callable[[Harness], None]


def _nothing(h: Harness) -> None:
    del h


@dataclasses.dataclass(frozen=True)
class Cause:
    """One cause of a verdict: how to set the world up, break it, mend it, move it on."""

    name: str
    reason: Reason
    stalled: bool
    break_: World
    mend: World
    advance: World  # mended, at a new revision
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)
    setup: World = _nothing
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


# -- the causes ---------------------------------------------------------------------------


def _flux_setup(h: Harness) -> None:
    git_repository(h)


def _flux_gone(h: Harness) -> None:
    del h.objects.objects[("GitRepository", ObjectKey("ns", "infra"))]


def _flux_failing(h: Harness) -> None:
    git_repository(h, ready="False")


def _flux_unserved(h: Harness) -> None:
    h.objects.unserved.add("GitRepository")


def _flux_served(h: Harness) -> None:
    h.objects.unserved.clear()


def _flux_new(h: Harness) -> None:
    _flux_served(h)
    git_repository(h, revision=f"main@sha1:{OTHER}")


def _program_setup(h: Harness) -> None:
    program(h, {"pw": PASSWORD})


def _program_gone(h: Harness) -> None:
    del h.objects.objects[("Program", ObjectKey("ns", "random-yaml"))]


def _program_broken(h: Harness) -> None:
    program(h, {"pw": {"properties": {"length": 16}}})  # a resource without a type


def _program_new(h: Harness) -> None:
    program(h, {"pw": PASSWORD, "other": PASSWORD})


def _refusing(failure: SourceFailure) -> World:
    def break_(h: Harness) -> None:
        h.source.resolve_error = SourceError("refused", reason=failure, transient=False)

    return break_


def _git_mended(h: Harness) -> None:
    h.source.resolve_error = None


def _git_new(h: Harness) -> None:
    _git_mended(h)
    h.push()


def _creds_setup(h: Harness) -> None:
    h.secrets.data[("ns", "creds")] = {"token": "tok"}


def _creds_gone(h: Harness) -> None:
    del h.secrets.data[("ns", "creds")]


def _creds_new(h: Harness) -> None:
    _creds_setup(h)
    h.push()


def _base_setup(h: Harness) -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded"}
    last = {"lastResyncTime": "2026-01-01T00:00:00Z"}
    status = {"observedGeneration": 1, "conditions": [ready], "lastUpdate": last}
    h.create("base", status=status)


def _base_failing(h: Harness) -> None:
    status = h.cluster.objects[ObjectKey("ns", "base")]["status"]
    status["conditions"] = [{"type": "Ready", "status": "False", "reason": "UpdateFailed"}]
    h.cluster.bump(ObjectKey("ns", "base"))


def _base_ready(h: Harness) -> None:
    status = h.cluster.objects[ObjectKey("ns", "base")]["status"]
    status["conditions"] = [{"type": "Ready", "status": "True", "reason": "Succeeded"}]
    h.cluster.bump(ObjectKey("ns", "base"))


def _base_new(h: Harness) -> None:
    _base_ready(h)
    h.push()


def _secret_gone_with_a_push(h: Harness) -> None:
    """An ``envRefs`` Secret is read only for a due run: a push makes one due."""
    _creds_gone(h)
    h.push()


def _secret_back_at_the_old_commit(h: Harness) -> None:
    """The Secret is back and the branch is where the Stack's last run left it."""
    _creds_setup(h)
    h.source.commits["main"] = h.status["lastUpdate"]["lastAttemptedCommit"]


def _config_map_setup(h: Harness) -> None:
    h.secrets.config_maps[("ns", "settings")] = {"region": "eu"}


def _config_map_gone_with_a_push(h: Harness) -> None:
    del h.secrets.config_maps[("ns", "settings")]
    h.push()


def _config_map_back_at_the_old_commit(h: Harness) -> None:
    _config_map_setup(h)
    h.source.commits["main"] = h.status["lastUpdate"]["lastAttemptedCommit"]


def _config_map_back(h: Harness) -> None:
    _config_map_setup(h)


def _account_refused_with_a_push(h: Harness) -> None:
    h.accounts.accounts[("ns", "deployer")] = {}
    h.push()


def _account_allowed_at_the_old_commit(h: Harness) -> None:
    h.accounts.accounts[("ns", "deployer")] = {RUNNER_LABEL: "true"}
    h.source.commits["main"] = h.status["lastUpdate"]["lastAttemptedCommit"]


def _account_allowed(h: Harness) -> None:
    h.accounts.accounts[("ns", "deployer")] = {RUNNER_LABEL: "true"}


def _asked(break_: World) -> World:
    """``break_``, then a reconcile request: a run is asked for without anything new."""

    def asked(h: Harness) -> None:
        break_(h)
        h.annotate("pulumi.com/reconciliation-request", f"asked-{len(h.writer.writes)}")

    return asked


def _config_map_gone(h: Harness) -> None:
    del h.secrets.config_maps[("ns", "settings")]


def _config_map_new(h: Harness) -> None:
    _config_map_setup(h)
    h.push()


def _account_refused(h: Harness) -> None:
    h.accounts.accounts[("ns", "deployer")] = {}


def _account_new(h: Harness) -> None:
    _account_allowed(h)
    h.push()


NOT_READY = Reason.SOURCE_NOT_READY
STALLS, WAITS = True, False  # the verdict's shape: Stalled, or Reconciling
FLUX_SPEC, PROGRAM_SPEC = dict(FLUX), dict(PROGRAM)
GIT_AUTH = {"gitAuth": {"accessToken": SECRET_REF}}
CAUSES = [
    Cause("flux source deleted", NOT_READY, WAITS, _flux_gone, _flux_setup, _flux_new,
          FLUX_SPEC, _flux_setup),
    Cause("flux source not ready", NOT_READY, WAITS, _flux_failing, _flux_setup, _flux_new,
          FLUX_SPEC, _flux_setup),
    Cause("flux kind not served", NOT_READY, WAITS, _flux_unserved, _flux_served, _flux_new,
          FLUX_SPEC, _flux_setup),
    Cause("program deleted", NOT_READY, WAITS, _program_gone, _program_setup, _program_new,
          PROGRAM_SPEC, _program_setup),
    Cause("program invalid", Reason.INVALID_SPEC, STALLS, _program_broken, _program_setup,
          _program_new, PROGRAM_SPEC, _program_setup),
    Cause("git credentials refused", Reason.AUTHENTICATION_FAILED, STALLS,
          _refusing(SourceFailure.AUTHENTICATION_FAILED), _git_mended, _git_new),
    Cause("git branch refused", Reason.SOURCE_UNAVAILABLE, STALLS,
          _refusing(SourceFailure.REVISION_NOT_FOUND), _git_mended, _git_new),
    Cause("gitAuth secret deleted", Reason.SECRET_NOT_FOUND, STALLS, _creds_gone, _creds_setup,
          _creds_new, GIT_AUTH, _creds_setup),
    Cause("envRefs secret deleted", Reason.SECRET_NOT_FOUND, STALLS, _secret_gone_with_a_push,
          _secret_back_at_the_old_commit, _creds_setup, {"envRefs": {"T": SECRET_REF}},
          _creds_setup),
    Cause("configRef config map deleted", Reason.CONFIG_MAP_NOT_FOUND, STALLS,
          _config_map_gone_with_a_push, _config_map_back_at_the_old_commit, _config_map_back,
          {"configRef": {"region": {"name": "settings", "key": "region"}}}, _config_map_setup),
    Cause("prerequisite not ready", Reason.DEPENDENCY_NOT_READY, WAITS, _base_failing,
          _base_ready, _base_new, {"prerequisites": [{"name": "base"}]}, _base_setup),
    Cause("service account not allowed", Reason.INVALID_SPEC, STALLS,
          _account_refused_with_a_push, _account_allowed_at_the_old_commit, _account_allowed,
          {"serviceAccountName": "deployer"}, settings={"runner_traits": PodRunner.traits}),
    # The same three, found when a reconcile request asks for a run: the verdict handles
    # the request (status contract rule 17), and still lasts until its cause is mended.
    Cause("envRefs secret deleted, run asked for", Reason.SECRET_NOT_FOUND, STALLS,
          _asked(_creds_gone), _creds_setup, _creds_new, {"envRefs": {"T": SECRET_REF}},
          _creds_setup),
    Cause("configRef config map deleted, run asked for", Reason.CONFIG_MAP_NOT_FOUND, STALLS,
          _asked(_config_map_gone), _config_map_setup, _config_map_new,
          {"configRef": {"region": {"name": "settings", "key": "region"}}}, _config_map_setup),
    Cause("service account not allowed, run asked for", Reason.INVALID_SPEC, STALLS,
          _asked(_account_refused), _account_allowed, _account_new,
          {"serviceAccountName": "deployer"}, settings={"runner_traits": PodRunner.traits}),
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LastRun:
    """How the Stack's last run ended, and the conditions that earned it."""

    name: str
    outcomes: Callable[[Harness], list[Any]]
    shows: dict[str, tuple[str, str]]


SUCCEEDED = LastRun("succeeded", lambda h: [h.succeed()], {"Ready": ("True", "Succeeded")})
STALLED = LastRun(
    "stalled",
    lambda h: [h.fail(ErrorKind.STACK_NOT_FOUND, message="no stack")],
    {"Ready": ("False", "StackNotFound"), "Stalled": ("True", "StackNotFound")},
)


def _ran(h: Harness, cause: Cause, last: LastRun) -> dict[str, Any]:
    """Create the Stack of ``cause``, let its run end as ``last``; the status it earned."""
    h.restart(**cause.settings)
    cause.setup(h)
    h.create(**cause.spec)
    h.runner.then(*last.outcomes(h))
    h.reconcile()
    assert h.kstatus() == last.shows
    return copy.deepcopy(h.status)


def _broken(h: Harness, cause: Cause) -> None:
    """Break the cause and reconcile: its verdict is shown."""
    cause.break_(h)
    _look(h)
    assert _headline(h) == (cause.reason, cause.stalled), h.status.get("conditions")


def _look(h: Harness) -> None:
    """One pass; a transient failure the queue would retry is not an error here."""
    with contextlib.suppress(TransientError):
        h.reconcile()


def _headline(h: Harness) -> tuple[str, bool]:
    kstatus = h.kstatus()
    stalled = "Stalled" in kstatus
    return (kstatus["Stalled" if stalled else "Ready"][1], stalled)


def _runs(h: Harness) -> int:
    return sum(name == "run" for name in h.runner.operations)


CASES = [
    pytest.param(c, r, id=f"{c.name}, last run {r.name}")
    for c in CAUSES
    for r in (SUCCEEDED, STALLED)
]


@pytest.mark.parametrize(("cause", "last"), CASES)
def test_still_broken_writes_and_runs_nothing_more(h: Harness, cause: Cause, last: LastRun) -> None:
    """Looking again at an unchanged cause: no write, no run, no Event."""
    _ran(h, cause, last)
    _broken(h, cause)
    writes, runs, events = len(h.writer.writes), _runs(h), len(h.events.posted)
    h.clock.step(60)
    _look(h)
    _look(h)
    assert (len(h.writer.writes), _runs(h), len(h.events.posted)) == (writes, runs, events)


@pytest.mark.parametrize(("cause", "last"), CASES)
def test_mended_to_the_same_revision_returns_what_the_run_earned(
    h: Harness, cause: Cause, last: LastRun
) -> None:
    """One write, back to the very conditions the last run earned; no run, no request."""
    earned = _ran(h, cause, last)
    _broken(h, cause)
    writes, runs = len(h.writer.writes), _runs(h)
    cause.mend(h)
    _look(h)
    assert _runs(h) == runs, "the revision already applied must not run again"
    assert len(h.writer.writes) == writes + 1
    assert h.kstatus() == last.shows
    assert _messages(h.status) == _messages(earned)
    assert h.status["lastUpdate"] == earned["lastUpdate"]
    event = h.events.posted[-1]
    assert event.reason == last.shows.get("Stalled", last.shows["Ready"])[1]
    assert f"{cause.reason} is over" in event.message
    _look(h)
    assert len(h.writer.writes) == writes + 1, "returned once, then nothing to write"


@pytest.mark.parametrize(("cause", "last"), CASES)
def test_mended_to_a_new_revision_runs_it(h: Harness, cause: Cause, last: LastRun) -> None:
    """The cause mended with something new to run: it runs, and the Stack is Ready."""
    _ran(h, cause, last)
    _broken(h, cause)
    runs = _runs(h)
    cause.advance(h)
    h.runner.then(h.succeed())
    _look(h)
    assert _runs(h) == runs + 1
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_every_cause_of_a_verdict_before_a_run_is_in_the_table() -> None:
    """The reasons the reconciler writes about a run's inputs are all tried above."""
    before_a_run = {
        Reason.SOURCE_NOT_READY,
        Reason.INVALID_SPEC,
        Reason.AUTHENTICATION_FAILED,
        Reason.SOURCE_UNAVAILABLE,
        Reason.SECRET_NOT_FOUND,
        Reason.CONFIG_MAP_NOT_FOUND,
        Reason.DEPENDENCY_NOT_READY,
    }
    assert {cause.reason for cause in CAUSES} == before_a_run


def test_a_retry_pending_returns_with_its_own_retry_time(h: Harness) -> None:
    """A failed run waiting for its backoff: back to its retrying conditions, then it retries."""
    cause = CAUSES[0]
    cause.setup(h)
    h.create(**cause.spec)
    h.runner.then(h.fail(message="boom"))
    h.reconcile()
    earned = copy.deepcopy(h.status)
    _broken(h, cause)
    cause.mend(h)
    h.reconcile()
    assert _messages(h.status) == _messages(earned)
    assert h.kstatus() == {
        "Ready": ("False", "UpdateFailed"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    h.clock.step(10)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_retries_exhausted_returns_and_stays_until_a_change(tmp_path: Path) -> None:
    """The failure cap reached, a source broken and mended: RetriesExhausted again, no run."""
    h = Harness(tmp_path)
    cause = CAUSES[0]
    cause.setup(h)
    h.create(**cause.spec)
    for _ in range(3):
        h.runner.then(h.fail(message="boom"))
        h.reconcile()
        h.clock.step(3600)
    assert h.kstatus()["Stalled"] == ("True", "RetriesExhausted")
    earned = copy.deepcopy(h.status)
    _broken(h, cause)
    cause.mend(h)
    h.reconcile()
    assert _messages(h.status) == _messages(earned)
    assert _runs(h) == 3


def _messages(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}
