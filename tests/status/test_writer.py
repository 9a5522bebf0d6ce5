"""The status writer against a real apiserver: minimal patches, no-op skips, conflicts."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller.cache import ObjectKey, Store
from controller.view import ReadYourWritesView
from status import conditions as cond
from status.writer import StatusTooLargeError, StatusWriter
from testbed import waits

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def create_stack(
    api_client: client.ApiClient, namespace: str, name: str = "s"
) -> tuple[ObjectKey, Store, client.CustomObjectsApi]:
    """Create a Stack ``name``; its key, a Store caching it like the informer would, the API."""
    api = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": {"name": name},
        "spec": {"stack": "dev", "projectRepo": "git://127.0.0.1/x.git", "branch": "main"},
    }
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    store = Store()
    store.upsert(get(api, namespace, name))
    return ObjectKey(namespace, name), store, api


@pytest.fixture
def stack(
    api_client: client.ApiClient, stack_crd: Path, namespace: str
) -> tuple[ObjectKey, Store, client.CustomObjectsApi]:
    """A Stack in the namespace, cached in a Store like the informer would."""
    del stack_crd
    return create_stack(api_client, namespace)


def get(api: client.CustomObjectsApi, namespace: str, name: str = "s") -> dict[str, Any]:
    """Read the Stack."""
    obj: dict[str, Any] = api.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, name
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
    writer = StatusWriter(api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, registry)
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


def test_the_status_is_recorded_under_the_writers_field_manager(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """``managedFields`` say who wrote the status: the writer's manager, on the subresource."""
    key, store, api = stack
    manager = "pulumi-stack-operator:shard=a"
    writer = StatusWriter(
        api_client,
        ReadYourWritesView(store),
        GROUP,
        VERSION,
        PLURAL,
        CollectorRegistry(),
        field_manager=manager,
    )
    assert writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
    entries = get(api, key.namespace)["metadata"]["managedFields"]
    status = [e for e in entries if e.get("subresource") == "status"]
    assert [(e["manager"], e["operation"]) for e in status] == [(manager, "Update")]
    assert "f:conditions" in status[0]["fieldsV1"]["f:status"]


def test_a_stale_cache_never_resurrects_or_keeps_removed_fields(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """A field written then removed is gone, even though the cache never saw it."""
    key, store, api = stack
    writer = StatusWriter(
        api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, CollectorRegistry()
    )
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


def test_a_write_is_read_back_through_the_shared_view(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """The view answers with the written object until the cache catches up; forget drops it."""
    key, store, api = stack
    view = ReadYourWritesView(store)
    writer = StatusWriter(api_client, view, GROUP, VERSION, PLURAL, CollectorRegistry())
    cached_version = store.get(key)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))
    seen = view.get(key)
    assert seen is not None
    assert seen["metadata"]["resourceVersion"] != cached_version
    assert seen["status"]["conditions"][0]["type"] == "Ready"
    assert writer.current(key) is seen
    writer.forget(key)
    assert view.get(key) is store.get(key)  # the stale cached copy again
    store.upsert(get(api, key.namespace))  # the informer catches up
    assert view.get(key) is store.get(key)


def test_a_conflicting_write_is_retried_on_fresh_data(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """Someone else changed the object: 409, re-read, apply again, keep their field."""
    key, store, api = stack
    registry = CollectorRegistry()
    writer = StatusWriter(api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, registry)
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
    writer = StatusWriter(
        api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, CollectorRegistry()
    )
    api.delete_namespaced_custom_object(GROUP, VERSION, key.namespace, PLURAL, key.name)
    assert not writer.update(key, lambda s: cond.succeeded(s, 1, "ok", NOW))


def step(message: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A progress intent whose Reconciling message is ``message``."""
    return lambda s: cond.progressing(s, 1, message, NOW)


def reconciling_message(
    api: client.CustomObjectsApi, namespace: str, name: str = "s"
) -> str | None:
    """The Reconciling condition's message as the API has it."""
    for condition in get(api, namespace, name).get("status", {}).get("conditions", []):
        if condition["type"] == "Reconciling":
            return str(condition["message"])
    return None


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll ``check`` every 0.05 s for up to ``timeout`` seconds (``testbed.waits.wait_for``).

    The writer's tests (here and in ``test_writer_outage``) wait at this pace.
    """
    waits.wait_for(check, what, timeout, interval=0.05)


def publishing(
    api_client: client.ApiClient, key: ObjectKey, store: Store, min_interval: float
) -> tuple[StatusWriter, CollectorRegistry]:
    """A writer whose first progress intent ("running") has been written."""
    registry = CollectorRegistry()
    writer = StatusWriter(
        api_client,
        ReadYourWritesView(store),
        GROUP,
        VERSION,
        PLURAL,
        registry,
        min_interval=min_interval,
    )
    writer.publish(key, step("running"))
    wait_for(lambda: written(registry, "written") == 1, "the first progress write")
    return writer, registry


def test_progress_intents_are_coalesced_to_the_newest_per_stack(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """The first intent is written at once; forty more within the interval make one write."""
    key, store, api = stack
    writer, registry = publishing(api_client, key, store, min_interval=3.0)
    try:
        for n in range(1, 41):
            writer.publish(key, step(f"step {n}"))
        wait_for(lambda: writer.pending() == 0, "the coalesced write")
        assert reconciling_message(api, key.namespace) == "step 40"
        assert written(registry, "written") == 2  # the first and the coalesced one
    finally:
        assert writer.close()


def test_a_conclusion_supersedes_pending_progress(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """update() drops the Stack's pending progress: no late write undoes the conclusion."""
    key, store, api = stack
    writer, registry = publishing(api_client, key, store, min_interval=60)
    try:
        writer.publish(key, step("still running"))  # waits out the 60 s interval
        assert writer.pending() == 1
        assert writer.update(key, lambda s: cond.succeeded(s, 1, "done", NOW))
        assert writer.pending() == 0
    finally:
        assert writer.close()
    status = get(api, key.namespace)["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Ready", "True")]
    assert written(registry, "written") == 2  # progress and conclusion


def test_close_drops_pending_progress_and_ignores_later_intents(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """After close nothing more is written, and the writer's thread has ended."""
    key, store, api = stack
    writer, registry = publishing(api_client, key, store, min_interval=60)
    writer.publish(key, step("pending"))
    assert writer.close()
    writer.publish(key, step("after close"))
    assert writer.pending() == 0
    assert reconciling_message(api, key.namespace) == "running"
    assert written(registry, "written") == 1


@pytest.mark.parametrize(
    "mebibytes",
    [
        pytest.param(1.7, id="etcd-request-limit"),
        pytest.param(2.5, id="etcd-grpc-limit"),
        pytest.param(3.5, id="apiserver-body-limit"),
    ],
)
def test_a_status_too_large_to_store_raises_status_too_large_error(
    api_client: client.ApiClient,
    stack: tuple[ObjectKey, Store, client.CustomObjectsApi],
    mebibytes: float,
) -> None:
    """Each size limit on the way to etcd refuses at once: a dedicated error, no retries."""
    key, store, api = stack
    registry = CollectorRegistry()
    writer = StatusWriter(api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, registry)
    huge = "x" * int(mebibytes * 1024 * 1024)
    outcome: list[bool | BaseException] = []

    def write_huge() -> None:
        try:
            outcome.append(writer.update(key, lambda s: {**s, "outputs": {"huge": huge}}))
        except Exception as err:  # noqa: BLE001 - the test inspects it
            outcome.append(err)

    thread = threading.Thread(target=write_huge, daemon=True)
    thread.start()
    thread.join(30)
    writer.close()  # if it was still retrying as if transient, this ends it
    thread.join(30)
    assert len(outcome) == 1
    assert isinstance(outcome[0], StatusTooLargeError), outcome[0]
    assert outcome[0].status in {413, 500}
    assert written(registry, "error") == 1  # one PATCH call, not retried
    assert "outputs" not in get(api, key.namespace).get("status", {})


def test_a_stall_for_a_superseded_generation_lands_as_reconciling(
    api_client: client.ApiClient, stack: tuple[ObjectKey, Store, client.CustomObjectsApi]
) -> None:
    """A verdict for generation 1 written after a spec edit: never Stalled on generation 2."""
    key, store, api = stack
    writer = StatusWriter(
        api_client, ReadYourWritesView(store), GROUP, VERSION, PLURAL, CollectorRegistry()
    )
    edit = {"spec": {"branch": "other"}}  # the cached copy still says generation 1
    api.patch_namespaced_custom_object(GROUP, VERSION, key.namespace, PLURAL, key.name, edit)
    reason = cond.Reason.RETRIES_EXHAUSTED
    assert writer.update(key, lambda s: cond.stalled(s, 1, reason, "gave up", NOW))
    obj = get(api, key.namespace)
    assert obj["metadata"]["generation"] == 2
    types = {c["type"]: c for c in obj["status"]["conditions"]}
    assert "Stalled" not in types
    assert (types["Reconciling"]["status"], types["Reconciling"]["reason"]) == ("True", reason)
    assert "generation 2 awaits reconciling" in types["Reconciling"]["message"]
    assert (types["Ready"]["status"], obj["status"]["observedGeneration"]) == ("False", 1)
