"""``controller.objectsapi.ObjectsApi`` against a real kube-apiserver with the Stack CRD.

Every call the operator makes through ``ObjectsApi`` is made here as the operator makes it
(discovery, list pages, a watch through ``kubernetes.watch.Watch``, a read, a metadata and
a status merge patch as a field manager): the answers are the server's JSON, the refusals
the generated client's typed ``ApiException``. The Stacks are made with the generated
``CustomObjectsApi`` (the tests may load it; the operator does not).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException, NotFoundException

from controller.objectsapi import ObjectsApi, list_query

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
MANAGER = "objectsapi-test"


def test_a_list_query_has_the_apis_names_and_refuses_a_keyword_it_does_not_know() -> None:
    """The generated keywords become query parameters; None is left out; a typo is an error."""
    query = list_query({"limit": 100, "_continue": "t", "watch": True, "label_selector": None})
    assert query == [("limit", "100"), ("continue", "t"), ("watch", "true")]
    with pytest.raises(TypeError, match="labelselector"):
        list_query({"labelselector": "a=b"})


def stack(name: str, **labels: str) -> dict[str, Any]:
    """A Stack manifest."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": {"name": name, "labels": labels},
        "spec": {"stack": "dev", "projectRepo": "git://127.0.0.1/x.git", "branch": "main"},
    }


@pytest.fixture
def stacks(api_client: client.ApiClient, stack_crd: Path, namespace: str) -> list[str]:
    """Three Stacks in the namespace, made by the generated client; their names."""
    del stack_crd
    generated = client.CustomObjectsApi(api_client)
    names = ["a", "b", "c"]
    for name in names:
        body = stack(name, team="web" if name != "c" else "data")
        generated.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    return names


@pytest.mark.integration
def test_discovery_reads_and_lists_answer_the_servers_json(
    api_client: client.ApiClient, namespace: str, stacks: list[str]
) -> None:
    """APIResourceList, one object, pages with a continue token, a selector, cluster scope."""
    api = ObjectsApi(api_client)
    served = api.get_api_resources(GROUP, VERSION, _request_timeout=10)
    assert "stacks" in [resource["name"] for resource in served["resources"]]
    with pytest.raises(NotFoundException):
        api.get_api_resources("nothing.example.com", "v1")
    one = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "a")
    assert one["spec"]["stack"] == "dev"
    with pytest.raises(ApiException) as missing:
        api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "absent")
    assert missing.value.status == 404
    first = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, limit=2)
    token = first["metadata"]["continue"]
    rest = api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, limit=2, _continue=token
    )
    listed = [o["metadata"]["name"] for o in (*first["items"], *rest["items"])]
    assert listed == stacks
    web = api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, label_selector="team=web"
    )
    assert [o["metadata"]["name"] for o in web["items"]] == ["a", "b"]
    everywhere = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert {(namespace, name) for name in stacks} <= {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere["items"]
    }


@pytest.mark.integration
@pytest.mark.usefixtures("stacks")
def test_a_watch_through_watch_stream_yields_the_servers_events(
    api_client: client.ApiClient, namespace: str
) -> None:
    """``kubernetes.watch.Watch`` drives the list as a watch; events carry the raw objects."""
    api = ObjectsApi(api_client)
    listed = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    version = listed["metadata"]["resourceVersion"]
    api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "b", {"metadata": {"labels": {"seen": "yes"}}}
    )
    stream = watch.Watch()
    events = stream.stream(
        api.list_namespaced_custom_object,
        GROUP, VERSION, namespace, PLURAL,
        resource_version=version,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _request_timeout=(10, 30),
    )  # fmt: skip
    first = next(events)
    stream.stop()
    assert first["type"] == "MODIFIED"
    assert first["raw_object"]["metadata"]["labels"] == {"team": "web", "seen": "yes"}


@pytest.mark.integration
@pytest.mark.usefixtures("stacks")
def test_merge_patches_of_metadata_and_status_are_written_as_the_field_manager(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A stale resourceVersion is a 409; the status patch goes to the status subresource."""
    api = ObjectsApi(api_client)
    current = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "a")
    version = current["metadata"]["resourceVersion"]
    body = {"metadata": {"finalizers": ["x/y"], "resourceVersion": version}}
    patched = api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "a", body, field_manager=MANAGER
    )
    assert patched["metadata"]["finalizers"] == ["x/y"]
    with pytest.raises(ApiException) as stale:
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "a", body)
    assert stale.value.status == 409
    status = {"status": {"observedGeneration": 1, "conditions": []}, "spec": {"stack": "x"}}
    written = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "a", status, field_manager=MANAGER
    )
    assert written["status"]["observedGeneration"] == 1
    assert written["spec"]["stack"] == "dev", "a status patch leaves the spec alone"
    entries = written["metadata"]["managedFields"]
    managers = {(e["manager"], e.get("subresource", "")) for e in entries}
    assert {(MANAGER, ""), (MANAGER, "status")} <= managers
    assert json.loads(json.dumps(written)) == written
