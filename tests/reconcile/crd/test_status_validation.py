"""Status validation: the CRD's default status, metav1.Condition limits, the subresource."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from testbed.control_plane import ControlPlane
from tests.reconcile.crd.helpers import (
    DEFAULTED_STATUS,
    MINIMAL_SPEC,
    SHA,
    TIME,
    condition,
    get_stack,
    patch_status,
)

pytestmark = pytest.mark.integration

# -- status validation ---------------------------------------------------------------------


def test_a_new_stack_has_a_defaulted_status(
    plane: ControlPlane, tmp_path: Path, namespace: str, api_client: client.ApiClient
) -> None:
    """Before anyone writes status, create, GET, LIST and watch all show observedGeneration 0.

    kstatus reads observedGeneration < generation as InProgress: a Stack is never "Current"
    before the operator has seen it.
    """
    manifest = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": "fresh", "namespace": namespace},
        "spec": MINIMAL_SPEC,
    }
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(manifest))
    created = json.loads(plane.kubectl("create", "-f", str(path), "-o", "json").stdout)
    assert created["status"] == DEFAULTED_STATUS
    assert created["metadata"]["generation"] == 1
    assert get_stack(plane, namespace, "fresh")["status"] == DEFAULTED_STATUS
    listed = json.loads(plane.kubectl("get", "stacks", "-n", namespace, "-o", "json").stdout)
    assert [item["status"] for item in listed["items"]] == [DEFAULTED_STATUS]
    api = client.CustomObjectsApi(api_client)
    events = watch.Watch().stream(
        api.list_namespaced_custom_object,
        "pulumi.com",
        "v1",
        namespace,
        "stacks",
        timeout_seconds=30,
    )
    first = next(events)
    events.close()
    assert (first["type"], first["object"]["status"]) == ("ADDED", DEFAULTED_STATUS)


def test_status_writes_replace_the_default(plane: ControlPlane, namespace: str, stack: str) -> None:
    """A status patch lands on top of the default; the written observedGeneration wins."""
    patch_status(plane, namespace, stack, {"conditions": [condition()]}).check_returncode()
    assert get_stack(plane, namespace)["status"] == {
        "observedGeneration": 0,
        "conditions": [condition()],
    }
    patch_status(plane, namespace, stack, {"observedGeneration": 1}).check_returncode()
    assert get_stack(plane, namespace)["status"]["observedGeneration"] == 1


def test_valid_status_is_accepted(plane: ControlPlane, namespace: str, stack: str) -> None:
    """A status with every field the operator writes is accepted and stored as sent."""
    status = {
        "observedGeneration": 1,
        "conditions": [
            condition("Ready", "False", reason="UpdateFailed", message="boom"),
            condition("Reconciling", "True", reason="ProgressingWithRetry", message="retry"),
        ],
        "outputs": {"url": "https://example.com", "port": 80, "password": "[secret]"},
        "lastUpdate": {
            "state": "failed",
            "type": "up",
            "generation": 1,
            "lastAttemptedCommit": SHA,
            "lastSuccessfulCommit": SHA,
            "shortCommit": SHA[:7],
            "permalink": "https://app.pulumi.com/org/proj/dev/updates/3",
            "lastResyncTime": TIME,
            "message": "boom",
            "failures": 2,
            "reconcileRequest": "r1",
        },
        "currentUpdate": {
            "generation": 1,
            "commit": SHA,
            "type": "up",
            "startTime": TIME,
            "reconcileRequest": "r1",
        },
        "progress": {
            "step": "up",
            "resourcesDone": 3,
            "resourcesTotal": 5,
            "resourcesFailed": 0,
            "current": "urn:pulumi:dev::proj::aws:s3/bucket:Bucket::logs",
            "updatedAt": TIME,
        },
        "history": [
            {
                "type": "up",
                "result": "failed",
                "generation": 1,
                "commit": SHA,
                "startTime": TIME,
                "durationSeconds": 12.5,
                "resourceChanges": {"create": 2, "same": 1},
            }
        ],
        "observedReconcileRequest": "r1",
        "lastHandledReconcileAt": "2026-01-02T03:04:05.000000000Z",
    }
    result = patch_status(plane, namespace, stack, status)
    assert result.returncode == 0, result.stderr
    assert get_stack(plane, namespace)["status"] == status


@pytest.mark.parametrize(
    ("status", "path", "message"),
    [
        pytest.param(
            {"conditions": [condition(reason="not a reason")]},
            "status.conditions[0].reason",
            "should match",
            id="reason-pattern",
        ),
        pytest.param(
            {"conditions": [condition(reason="")]},
            "status.conditions[0].reason",
            "should be at least 1 chars long",
            id="reason-empty",
        ),
        pytest.param(
            {"conditions": [condition(status="Maybe")]},
            "status.conditions[0].status",
            'Unsupported value: "Maybe"',
            id="status-enum",
        ),
        pytest.param(
            {"conditions": [condition(message="x" * 40000)]},
            "status.conditions[0].message",
            "Too long",
            id="message-too-long",
        ),
        pytest.param(
            {"conditions": [condition(), condition(status="False")]},
            "status.conditions[1]",
            "Duplicate value",
            id="duplicate-type",
        ),
        pytest.param(
            {"conditions": [condition(type_="Not Ready")]},
            "status.conditions[0].type",
            "should match",
            id="type-pattern",
        ),
        pytest.param(
            {"conditions": [condition(lastTransitionTime="yesterday")]},
            "status.conditions[0].lastTransitionTime",
            "date-time",
            id="time-format",
        ),
        pytest.param(
            {"conditions": [{k: v for k, v in condition().items() if k != "message"}]},
            "status.conditions[0].message",
            "Required value",
            id="message-required",
        ),
        pytest.param(
            {"conditions": [condition(observedGeneration=-1)]},
            "status.conditions[0].observedGeneration",
            "should be greater than or equal to 0",
            id="observed-generation-negative",
        ),
        pytest.param(
            {"lastUpdate": {"state": "unknown"}},
            "status.lastUpdate.state",
            'Unsupported value: "unknown"',
            id="last-update-state",
        ),
        pytest.param(
            {"history": [{"type": "up", "result": "succeeded"}] * 11},
            "status.history",
            "must have at most 10 items",
            id="history-max-items",
        ),
    ],
)
def test_apiserver_rejects_invalid_status(
    plane: ControlPlane,
    namespace: str,
    stack: str,
    status: dict[str, Any],
    path: str,
    message: str,
) -> None:
    """A status patch that breaks the condition or status schema is refused and changes nothing."""
    result = patch_status(plane, namespace, stack, status)
    assert result.returncode != 0
    assert path in result.stderr
    assert message in result.stderr
    assert get_stack(plane, namespace)["status"] == DEFAULTED_STATUS


def test_status_writes_never_bump_generation(
    plane: ControlPlane, namespace: str, stack: str
) -> None:
    """Status patches leave metadata.generation alone; a spec change bumps it."""
    assert get_stack(plane, namespace)["metadata"]["generation"] == 1
    for n in range(3):
        status = {"observedGeneration": 1, "conditions": [condition(message=f"write {n}")]}
        patch_status(plane, namespace, stack, status).check_returncode()
    assert get_stack(plane, namespace)["metadata"]["generation"] == 1
    plane.kubectl(
        "patch", "stack", stack, "-n", namespace, "--type=merge", "-p", '{"spec":{"refresh":true}}'
    )
    assert get_stack(plane, namespace)["metadata"]["generation"] == 2


def test_main_resource_ignores_status(plane: ControlPlane, namespace: str, stack: str) -> None:
    """Status sent to the main resource is dropped: only /status can write it."""
    body = json.dumps({"status": {"observedGeneration": 7}})
    plane.kubectl("patch", "stack", stack, "-n", namespace, "--type=merge", "-p", body)
    assert get_stack(plane, namespace)["status"] == DEFAULTED_STATUS
