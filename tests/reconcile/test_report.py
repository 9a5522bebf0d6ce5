"""The status fields of a run in flight: live progress, the install step included."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from reconcile import report
from status.conditions import get_condition
from workspace.runner import Progress

T0 = datetime.datetime(2026, 12, 2, 10, 0, tzinfo=datetime.UTC)


def test_the_install_step_says_what_is_installed_and_for_how_long() -> None:
    """Reconciling's message and status.progress name the tool, its start and the elapsed time."""
    step = Progress("install", 0, 0, 0, "installing dependencies (npm ci)", T0)
    now = T0 + datetime.timedelta(seconds=12.4)
    status = report.progress(step, "up", 3, now)({})
    reconciling = get_condition(status, "Reconciling")
    assert reconciling is not None
    assert reconciling["message"] == "Running pulumi up: installing dependencies (npm ci), 12s"
    assert status["progress"] == {
        "step": "install",
        "resourcesDone": 0,
        "resourcesTotal": 0,
        "resourcesFailed": 0,
        "current": "installing dependencies (npm ci)",
        "startedAt": "2026-12-02T10:00:00Z",
        "updatedAt": "2026-12-02T10:00:12Z",
    }


def test_engine_steps_count_resources_and_have_no_start() -> None:
    """The engine's steps say how many resources are done, as before."""
    step = Progress("update", 2, 5, 1, "create urn:pulumi:dev::p::x")
    status = report.progress(step, "up", 3, T0)({})
    reconciling = get_condition(status, "Reconciling")
    assert reconciling is not None
    assert reconciling["message"] == "Running pulumi up: update, 2/5 resources done, 1 failed"
    assert "startedAt" not in status["progress"]


def test_a_traced_run_names_its_trace_in_the_field_it_writes() -> None:
    """``traced`` adds ``traceId`` to the field the mutation wrote; without a trace, nothing."""

    def concluded(status: Mapping[str, Any]) -> dict[str, Any]:
        return {**status, "lastUpdate": {"state": "succeeded"}}

    assert report.traced(concluded, "lastUpdate", None) is concluded
    status = report.traced(concluded, "lastUpdate", "ab" * 16)({"observedGeneration": 1})
    assert status["lastUpdate"] == {"state": "succeeded", "traceId": "ab" * 16}
    assert status["observedGeneration"] == 1
