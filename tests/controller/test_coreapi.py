"""``controller.coreapi.CoreApi`` against a real kube-apiserver.

Every call the operator makes through ``CoreApi`` is made here as the operator makes it:
the answers are the server's JSON, the refusals the generated client's typed
``ApiException`` with the status a caller branches on. The objects are made with the
generated ``CoreV1Api`` (the tests may load it; the operator does not).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException, NotFoundException

from controller.coreapi import CoreApi


@pytest.mark.integration
def test_reads_return_the_servers_json_and_a_missing_object_is_a_404(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Secret, ConfigMap, ServiceAccount: dicts in the API's own field names."""
    core = client.CoreV1Api(api_client)
    meta = client.V1ObjectMeta(name="x", labels={"team": "a"})
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=meta, data={"k": "dg=="}))
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta, data={"k": "v"}))
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=meta))
    api = CoreApi(api_client)
    assert api.read_namespaced_secret("x", namespace, _request_timeout=10)["data"] == {"k": "dg=="}
    assert api.read_namespaced_config_map("x", namespace)["data"] == {"k": "v"}
    account = api.read_namespaced_service_account("x", namespace)
    assert account["metadata"]["labels"] == {"team": "a"}
    with pytest.raises(NotFoundException) as missing:
        api.read_namespaced_secret("absent", namespace)
    assert missing.value.status == 404
    assert json.loads(str(missing.value.body))["reason"] == "NotFound"
    with pytest.raises(ApiException) as claim:
        api.read_namespaced_persistent_volume_claim("absent", namespace)
    assert claim.value.status == 404


def pod_manifest(name: str) -> dict[str, object]:
    """A pod no node will run (the control plane has none)."""
    container = {"name": "c", "image": "example.invalid/none:1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container]}}  # fmt: skip


@pytest.mark.integration
def test_a_pod_is_created_patched_watched_and_deleted_only_while_it_is_the_same_one(
    api_client: client.ApiClient, namespace: str
) -> None:
    """JSON patch with a uid test (422 for another uid), delete preconditions (409), watch."""
    api = CoreApi(api_client)
    created = api.create_namespaced_pod(namespace, pod_manifest("run"), _request_timeout=10)
    uid = created["metadata"]["uid"]
    assert api.read_namespaced_pod("run", namespace)["metadata"]["uid"] == uid
    patch = [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "add", "path": "/metadata/annotations", "value": {"done": "yes"}},
    ]
    kind = "application/json-patch+json"
    patched = api.patch_namespaced_pod("run", namespace, patch, _content_type=kind)
    assert patched["metadata"]["annotations"] == {"done": "yes"}
    stale = [{**patch[0], "value": "another-uid"}, patch[1]]
    with pytest.raises(ApiException) as refused:
        api.patch_namespaced_pod("run", namespace, stale, _content_type=kind)
    assert refused.value.status == 422
    stream = api.list_namespaced_pod(
        namespace,
        field_selector="metadata.name=run",
        watch=True,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        resource_version=None,
        _preload_content=False,
        _request_timeout=(10, 30),
    )
    try:
        first = json.loads(next(stream.stream(1 << 16)).splitlines()[0])
    finally:
        stream.release_conn()
    assert (first["type"], first["object"]["metadata"]["uid"]) == ("ADDED", uid)
    with pytest.raises(ApiException) as conflict:
        api.delete_namespaced_pod("run", namespace, body={"preconditions": {"uid": "other"}})
    assert conflict.value.status == 409
    api.delete_namespaced_pod("run", namespace, body={"preconditions": {"uid": uid}})
    with pytest.raises(NotFoundException):
        api.read_namespaced_pod("run", namespace)


@pytest.mark.integration
def test_an_event_is_created_and_patched(api_client: client.ApiClient, namespace: str) -> None:
    """A generated model or a dict as the body; a strategic merge patch of the count."""
    api = CoreApi(api_client)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="e.1"),
        involved_object=client.V1ObjectReference(kind="Pod", name="run", namespace=namespace),
        reason="Tested",
        message="once",
        count=1,
    )
    assert api.create_namespaced_event(namespace, event)["reason"] == "Tested"
    patched = api.patch_namespaced_event(
        "e.1",
        namespace,
        {"count": 2, "message": "twice"},
        _content_type="application/strategic-merge-patch+json",
    )
    assert (patched["count"], patched["message"]) == (2, "twice")


def managers(obj: dict[str, Any]) -> set[str]:
    """The managers ``obj``'s ``managedFields`` name."""
    return {entry["manager"] for entry in obj["metadata"].get("managedFields") or ()}


@pytest.mark.integration
def test_every_write_is_recorded_under_the_field_manager_given(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A pod's and an Event's create and patch name the writer in ``managedFields``."""
    api, manager = CoreApi(api_client), "pulumi-stack-operator:shard!=a"
    api.create_namespaced_pod(namespace, pod_manifest("owned"), field_manager=manager)
    add = [{"op": "add", "path": "/metadata/annotations", "value": {"done": "yes"}}]
    kind = "application/json-patch+json"
    api.patch_namespaced_pod("owned", namespace, add, field_manager=manager, _content_type=kind)
    assert managers(api.read_namespaced_pod("owned", namespace)) == {manager}
    about = {"kind": "Pod", "name": "owned", "namespace": namespace}
    event = {"metadata": {"name": "e.2"}, "reason": "Tested", "involvedObject": about}
    api.create_namespaced_event(namespace, event, field_manager=manager)
    merge = "application/strategic-merge-patch+json"
    patched = api.patch_namespaced_event(
        "e.2", namespace, {"count": 2}, field_manager=manager, _content_type=merge
    )
    assert managers(patched) == {manager}
    anonymous = api.create_namespaced_pod(namespace, pod_manifest("anonymous"))
    assert manager not in managers(anonymous)  # the API server's default: the user agent
