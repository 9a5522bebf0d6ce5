"""The handover of a run to a warm run pod: one line of JSON, refused when malformed."""

from __future__ import annotations

import pytest

from tests.pulumi_stack_operator.test_agent import JOB, environment
from workspace.handover import Delivery

TRACE = {"PSO_TRACEPARENT": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "PSO_OTEL_TRACES": "h:1"}


def test_a_delivery_round_trips_and_bad_ones_are_refused() -> None:
    """One line of JSON; a mark of letters and digits, a known operation, string values."""
    given = Delivery("abc123", "preview", JOB.encode(), TRACE)
    assert Delivery.decode(given.encode()) == given
    assert "\n" not in given.encode()
    for bad in (
        "",
        "[]",
        '{"mark": "a b", "operation": "up", "job": "{}"}',
        '{"mark": "a", "operation": "refresh", "job": "{}"}',
        '{"mark": "a", "operation": "up", "job": 1}',
        '{"mark": "a", "operation": "up", "job": "{}", "trace": {"x": 1}}',
    ):
        with pytest.raises(ValueError, match="delivery"):
            Delivery.decode(bad)


def test_a_deliverys_environment_replaces_the_first_jobs() -> None:
    """PSO_JOB, PSO_OPERATION and the trace variables are the delivery's; the rest stays."""
    environ = environment(**TRACE)
    plain = Delivery("t", "destroy", "{}", {}).environment(environ, tuple(TRACE))
    assert (plain["PSO_JOB"], plain["PSO_OPERATION"]) == ("{}", "destroy")
    assert not set(TRACE) & set(plain)
    assert plain["PSO_SECRET_0"] == "tok"  # noqa: S105 - a test value
    traced = Delivery("t", "up", "{}", TRACE).environment(environment(), tuple(TRACE))
    assert {k: traced[k] for k in TRACE} == TRACE
