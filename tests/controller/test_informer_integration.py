"""The informer against a real kube-apiserver: events, 410 relists, apiserver restarts."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from controller.cache import Object, ObjectKey
from controller.informer import (
    CustomObjectsListWatcher,
    DeletedFinalStateUnknown,
    Informer,
    WatchEvent,
)
from testbed.control_plane import ControlPlane
from tests.controller.conftest import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

Call = tuple[str, str]


class QueueHandler:
    """Puts ("add"|"update"|"delete"|"delete-unknown", name) on a queue."""

    def __init__(self) -> None:
        """Start with an empty queue."""
        self.calls: queue.Queue[Call] = queue.Queue()

    def on_add(self, obj: Object) -> None:
        """Record an add."""
        self.calls.put(("add", obj["metadata"]["name"]))

    def on_update(self, old: Object, new: Object) -> None:
        """Record a real update (resyncs are off)."""
        del old
        self.calls.put(("update", new["metadata"]["name"]))

    def on_delete(self, obj: Object | DeletedFinalStateUnknown) -> None:
        """Record a delete, marking those found by a relist."""
        if isinstance(obj, DeletedFinalStateUnknown):
            self.calls.put(("delete-unknown", obj.key.name))
        else:
            self.calls.put(("delete", obj["metadata"]["name"]))

    def expect(self, *wanted: Call, timeout: float = 30) -> None:
        """Wait until every wanted call has been seen (others may come in between)."""
        missing = list(wanted)
        deadline = time.monotonic() + timeout
        while missing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"never saw {missing}")
            try:
                call = self.calls.get(timeout=remaining)
            except queue.Empty:
                continue
            if call in missing:
                missing.remove(call)

    def expect_one_of(self, *choices: Call, timeout: float = 30) -> Call:
        """Wait until any one of ``choices`` has been seen; return it."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                call = self.calls.get(timeout=remaining)
            except queue.Empty:
                break
            if call in choices:
                return call
        pytest.fail(f"never saw any of {list(choices)}")


class GatedListWatcher:
    """Wraps a real ListWatcher; while the gate is closed, a new watch waits before starting."""

    def __init__(self, inner: CustomObjectsListWatcher) -> None:
        """Wrap ``inner`` with the gate open."""
        self.inner = inner
        self.namespace = inner.namespace
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """Pass through."""
        return self.inner.list(limit, continue_token)

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Wait for the gate, then pass through."""
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(120)
        yield from self.inner.watch(resource_version, timeout_seconds)

    def stop(self) -> None:
        """Open the gate and stop the inner watch."""
        self.gate.set()
        self.inner.stop()


@pytest.fixture
def objects(
    control_plane: ControlPlane, widget_crd: str, namespace: str
) -> Iterator[client.CustomObjectsApi]:
    """A CustomObjectsApi for creating widgets in the test namespace."""
    del widget_crd, namespace
    api = control_plane.api_client()
    try:
        yield client.CustomObjectsApi(api)
    finally:
        api.close()


def create(api: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Create a widget."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name}}
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def delete(api: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Delete a widget."""
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def start_informer(
    control_plane: ControlPlane, namespace: str | None, *, min_watch_timeout: int = 300
) -> tuple[Informer, QueueHandler, GatedListWatcher, client.ApiClient]:
    """An informer over widgets with a gated list-watcher, synced."""
    api = control_plane.api_client()
    lw = GatedListWatcher(CustomObjectsListWatcher(api, GROUP, VERSION, PLURAL, namespace))
    handler = QueueHandler()
    informer = Informer([lw], handler, min_watch_timeout=min_watch_timeout)
    informer.run()
    assert informer.wait_for_cache_sync(30)
    return informer, handler, lw, api


def test_add_update_delete_arrive(
    control_plane: ControlPlane, objects: client.CustomObjectsApi, namespace: str
) -> None:
    """Each kind of change made through the API reaches the handler and the store."""
    informer, handler, _, api = start_informer(control_plane, namespace)
    try:
        create(objects, namespace, "w1")
        handler.expect(("add", "w1"))
        patch = {"spec": {"size": 2}}
        objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "w1", patch)
        handler.expect(("update", "w1"))
        cached = informer.store.get(ObjectKey(namespace, "w1"))
        assert cached is not None
        assert cached["spec"]["size"] == 2
        delete(objects, namespace, "w1")
        handler.expect(("delete", "w1"))
        assert informer.store.get(ObjectKey(namespace, "w1")) is None
    finally:
        informer.stop()
        api.close()


def test_expired_resource_version_relists_and_loses_no_delete(
    control_plane: ControlPlane, objects: client.CustomObjectsApi, namespace: str
) -> None:
    """A delete made while unwatched, then compacted away, still reaches the handler.

    The gate holds the informer between two watches; etcd is compacted and the apiserver
    restarted, so resuming from the old resourceVersion gets 410 Gone and must relist.
    """
    informer, handler, lw, api = start_informer(control_plane, namespace, min_watch_timeout=1)
    try:
        create(objects, namespace, "keep")
        create(objects, namespace, "doomed")
        handler.expect(("add", "keep"), ("add", "doomed"))
        lw.gate.clear()
        assert lw.waiting.wait(30), "the watch never came back to the gate"
        stale = informer._reflectors[0].last_sync_resource_version  # noqa: SLF001
        delete(objects, namespace, "doomed")
        create(objects, namespace, "born")
        control_plane.compact_etcd()
        control_plane.restart_apiserver()
        lw.gate.set()
        handler.expect(("delete-unknown", "doomed"), ("add", "born"))
        assert informer.store.keys(namespace) == [
            ObjectKey(namespace, "born"),
            ObjectKey(namespace, "keep"),
        ]
        assert informer._reflectors[0].last_sync_resource_version != stale  # noqa: SLF001
    finally:
        informer.stop()
        api.close()


def test_apiserver_killed_mid_watch_loses_no_event(
    control_plane: ControlPlane, objects: client.CustomObjectsApi, namespace: str
) -> None:
    """Changes right before a SIGKILL of kube-apiserver and right after its restart all arrive.

    "before" is created just before the kill, so its watch event may die with the apiserver;
    it must then arrive through the resumed watch or the relist. It is deleted only once seen:
    an object created and deleted while the informer is disconnected is, by informer
    semantics, never observed, and this test is about losing nothing that still exists.
    """
    informer, handler, _, api = start_informer(control_plane, namespace)
    try:
        create(objects, namespace, "before")
        control_plane.restart_apiserver(down_for=1.0)
        create(objects, namespace, "after")
        handler.expect(("add", "before"), ("add", "after"))
        delete(objects, namespace, "before")
        handler.expect_one_of(("delete", "before"), ("delete-unknown", "before"))
        assert informer.store.keys(namespace) == [ObjectKey(namespace, "after")]
        assert informer.alive()
    finally:
        informer.stop()
        api.close()


def test_one_informer_serves_a_list_of_namespaces(
    control_plane: ControlPlane, objects: client.CustomObjectsApi, namespace: str
) -> None:
    """Given two namespaces, it sees objects in both and none from a third."""
    core = client.CoreV1Api(objects.api_client)
    second, third = f"{namespace}-b", f"{namespace}-c"
    for extra in (second, third):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=extra)))
    api = control_plane.api_client()
    list_watchers = [
        CustomObjectsListWatcher(api, GROUP, VERSION, PLURAL, ns) for ns in (namespace, second)
    ]
    handler = QueueHandler()
    informer = Informer(list_watchers, handler)
    informer.run()
    try:
        assert informer.wait_for_cache_sync(30)
        for ns in (third, namespace, second):
            create(objects, ns, f"in-{ns}")
        handler.expect(("add", f"in-{namespace}"), ("add", f"in-{second}"))
        assert informer.store.keys() == [
            ObjectKey(namespace, f"in-{namespace}"),
            ObjectKey(second, f"in-{second}"),
        ]
    finally:
        informer.stop()
        api.close()
        for extra in (second, third):
            core.delete_namespace(extra)
