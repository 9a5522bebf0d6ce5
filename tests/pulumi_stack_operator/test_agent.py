"""The run pod's agent: its job and Secrets from the pod's environment, into a request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pulumi_stack_operator.agent import AgentJob

JOB = {
    "repo": "https://git.example/repo.git",
    "commit": "c" * 40,
    "stack": "dev",
    "gitAuth": {"token": {"env": "PSO_SECRET_0"}},
    "env": {"PULUMI_BACKEND_URL": "file:///state"},
    "envRefs": {"TOKEN": {"env": "PSO_SECRET_0"}, "PLAIN": {"value": "p"}},
    "config": {"content": "one"},
    "secretConfig": {"apiKey": {"env": "PSO_SECRET_1"}},
    "targets": ["urn:x"],
    "refresh": True,
}


def environment(**extra: str) -> dict[str, str]:
    """A run pod's environment for ``JOB``."""
    return {
        "PSO_JOB": json.dumps(JOB),
        "PSO_OPERATION": "up",
        "PSO_SECRET_0": "tok",
        "PSO_SECRET_1": "key",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        **extra,
    }


def test_the_request_has_the_values_the_kubelet_filled_in() -> None:
    """Secret refs resolved from PSO_SECRET_*; the pod's own env kept, PSO_* dropped."""
    environ = environment()
    job = AgentJob.from_environment(environ)
    request = job.request(Path("/w/source/app"), environ)
    assert dict(request.env) == {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "PULUMI_BACKEND_URL": "file:///state",
        "TOKEN": "tok",
        "PLAIN": "p",
    }
    assert dict(request.secret_config) == {"apiKey": "key"}
    assert (request.stack, dict(request.config), request.targets) == (
        "dev",
        {"content": "one"},
        ("urn:x",),
    )
    assert request.refresh
    assert not request.preview
    credentials = job.credentials()
    assert credentials is not None
    assert credentials.token == "tok"  # noqa: S105 - a test value
    assert "tok" not in repr(request)


@pytest.mark.parametrize("operation", ["", "rm -rf", "refresh"])
def test_an_unknown_operation_is_refused(operation: str) -> None:
    """Only up, preview and destroy."""
    with pytest.raises(ValueError, match="PSO_OPERATION"):
        AgentJob.from_environment(environment(PSO_OPERATION=operation))
