"""The store keeps frozen objects, a namespace index, and reports a relist's difference."""

from __future__ import annotations

from typing import Any

import pytest

from controller.cache import ObjectKey, Store, freeze, thaw


def obj(namespace: str, name: str, rv: str = "1", **spec: Any) -> dict[str, Any]:
    """A minimal Kubernetes object."""
    meta = {"namespace": namespace, "name": name, "resourceVersion": rv}
    return {"metadata": meta, "spec": dict(spec)}


def test_cached_objects_cannot_be_mutated() -> None:
    """Neither the top level nor nested dicts and lists of a cached object accept writes."""
    store = Store()
    store.upsert(obj("ns", "a", items=[{"x": 1}]))
    cached = store.get(ObjectKey("ns", "a"))
    assert cached is not None
    with pytest.raises(TypeError):
        cached["spec"]["items"][0]["x"] = 2
    with pytest.raises(TypeError):
        cached["metadata"]["name"] = "b"
    with pytest.raises(AttributeError):
        cached["spec"]["items"].append(1)


def test_upsert_copies_its_input() -> None:
    """Changing the dict handed to upsert afterwards does not change the cache."""
    store = Store()
    original = obj("ns", "a", size=1)
    store.upsert(original)
    original["spec"]["size"] = 2
    cached = store.get(ObjectKey("ns", "a"))
    assert cached is not None
    assert cached["spec"]["size"] == 1


def test_thaw_gives_a_mutable_deep_copy() -> None:
    """thaw(freeze(x)) equals x and can be changed freely."""
    original = obj("ns", "a", items=[{"x": 1}])
    thawed = thaw(freeze(original))
    assert thawed == original
    thawed["spec"]["items"][0]["x"] = 2
    assert original["spec"]["items"][0]["x"] == 1


def test_namespace_index_tracks_upserts_and_deletes() -> None:
    """keys(namespace) lists exactly that namespace's objects, in order."""
    store = Store()
    for ns, name in [("b", "2"), ("a", "1"), ("b", "1")]:
        store.upsert(obj(ns, name))
    assert store.keys("b") == [ObjectKey("b", "1"), ObjectKey("b", "2")]
    store.delete(ObjectKey("b", "1"))
    store.delete(ObjectKey("b", "2"))
    assert store.keys("b") == []
    assert store.keys() == [ObjectKey("a", "1")]
    assert len(store) == 1


def test_replace_reports_upserts_and_vanished_objects_within_its_scope() -> None:
    """A namespaced relist deletes only that namespace's missing objects."""
    store = Store()
    for ns, name in [("a", "keep"), ("a", "gone"), ("b", "other")]:
        store.upsert(obj(ns, name))
    upserts, deleted = store.replace([obj("a", "keep", rv="2"), obj("a", "new")], "a")
    assert [(old is not None, ObjectKey.of(new)) for old, new in upserts] == [
        (True, ObjectKey("a", "keep")),
        (False, ObjectKey("a", "new")),
    ]
    assert [ObjectKey.of(o) for o in deleted] == [ObjectKey("a", "gone")]
    assert store.keys() == [ObjectKey("a", "keep"), ObjectKey("a", "new"), ObjectKey("b", "other")]


def test_object_key_renders_like_client_go() -> None:
    """str(key) is namespace/name."""
    assert str(ObjectKey("ns", "name")) == "ns/name"
