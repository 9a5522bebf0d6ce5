"""The status writer against a real apiserver: minimal patches, no-op skips, conflicts."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.cache import ObjectKey, Store
from status import conditions as cond
from status.writer import StatusWriter

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


@pytest.fixture
def stack(
    api_client: client.ApiClient, stack_crd: Path, namespace: str
) -> tuple[ObjectKey, Store, client.CustomObjectsApi]:
    """A Stack in the namespace, cached in a Store like the informer would."""
    del stack_crd
    api = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": {"name": "s"},
        "spec": {"stack": "dev", "projectRepo": "git://127.0.0.1/x.git", "branch": "main"},
    }
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    store = Store()
    store.upsert(get(api, namespace))
    return ObjectKey(namespace, "s"), store, api


def get(api: client.CustomObjectsApi, namespace: str) -> dict[str, Any]:
    """Read the Stack."""
    obj: dict[str, Any] = api.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, "s"
    )
    return obj


def written(registry: CollectorRegistry, result: str) -> float | None:
    """The writer's patch counter."""
    return registry.get_sample_value("pulumi_stack_status_patches_total", {"result": result})


def test_unchanged_status_is_not_written_again(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """Writing the same conditions twice costs one PATCH; resourceVersion stays put."""
    key, store, api = stack
    registry = CollectorRegistry()
    writer = StatusWriter(api_client, store, GROUP, VERSION, PLURAL, registry)
    assert writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
    after_first = get(api, key.namespace)
    assert not writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
    assert (
        get(api, key.namespace)["metadata"]["resourceVersion"]
        == after_first["metadata"]["resourceVersion"]
    )
    assert written(registry, "written") == 1
    assert after_first["metadata"]["generation"] == 1  # status writes never bump generation
    assert after_first["status"]["conditions"][0]["type"] == "Ready"


def test_a_stale_cache_never_resurrects_or_keeps_removed_fields(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """A field written then removed is gone, even though the cache never saw it."""
    key, store, api = stack
    writer = StatusWriter(api_client, store, GROUP, VERSION, PLURAL, CollectorRegistry())
    writer.update(
        key, lambda s: {**cond.progressing(s, 1, "go", NOW), "currentUpdate": {"generation": 1}}
    )

    def finish(status: Any) -> dict[str, Any]:
        new = cond.succeeded(status, 1, "ok", NOW)
        new.pop("currentUpdate", None)
        return new

    writer.update(key, finish)
    status = get(api, key.namespace)["status"]
    assert "currentUpdate" not in status
    assert [c["type"] for c in status["conditions"]] == ["Ready"]


def test_a_conflicting_write_is_retried_on_fresh_data(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """Someone else changed the object: 409, re-read, apply again, keep their field."""
    key, store, api = stack
    registry = CollectorRegistry()
    writer = StatusWriter(api_client, store, GROUP, VERSION, PLURAL, registry)
    api.patch_namespaced_custom_object_status(
        GROUP, VERSION, key.namespace, PLURAL, key.name, {"status": {"outputs": {"theirs": 1}}}
    )
    assert writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
    status = get(api, key.namespace)["status"]
    assert status["outputs"] == {"theirs": 1}
    assert status["conditions"][0]["status"] == "True"
    assert written(registry, "conflict") == 1


def test_a_deleted_object_is_not_written(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """If the Stack is gone the writer reports no write instead of failing."""
    key, store, api = stack
    writer = StatusWriter(api_client, store, GROUP, VERSION, PLURAL, CollectorRegistry())
    api.delete_namespaced_custom_object(GROUP, VERSION, key.namespace, PLURAL, key.name)
    assert not writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
