"""The store keeps frozen objects, a namespace index, and reports a relist's difference."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.cache import LAST_APPLIED, ObjectKey, Store, freeze, freeze_object, thaw


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
    listed = [freeze_object(obj("a", "keep", rv="2")), freeze_object(obj("a", "new"))]
    upserts, deleted = store.replace(listed, "a")
    assert [(old is not None, ObjectKey.of(new)) for old, new in upserts] == [
        (True, ObjectKey("a", "keep")),
        (False, ObjectKey("a", "new")),
    ]
    assert [ObjectKey.of(o) for o in deleted] == [ObjectKey("a", "gone")]
    assert store.keys() == [ObjectKey("a", "keep"), ObjectKey("a", "new"), ObjectKey("b", "other")]


def test_object_key_renders_like_client_go() -> None:
    """str(key) is namespace/name."""
    assert str(ObjectKey("ns", "name")) == "ns/name"


MANAGED = [
    {
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "pulumi.com/v1",
        "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:stack": {}}},
    },
    {
        "manager": "pulumi-stack-operator",
        "operation": "Update",
        "apiVersion": "pulumi.com/v1",
        "time": "2026-12-01T10:00:05Z",
        "subresource": "status",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"Ready"}': {}}}},
    },
]


def test_managed_fields_are_kept_as_who_wrote_which_top_level_field() -> None:
    """Each entry keeps manager, operation, apiVersion, time, subresource; fields: top level."""
    original = obj("ns", "a", stack="dev")
    original["metadata"]["managedFields"] = MANAGED
    store = Store()
    store.upsert(original)
    cached = store.get(ObjectKey("ns", "a"))
    assert cached is not None
    assert thaw(cached["metadata"]["managedFields"]) == [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "apiVersion": "pulumi.com/v1",
            "time": "2026-12-01T10:00:00Z",
            "fieldsV1": {"f:metadata": {}, "f:spec": {}},
        },
        {
            "manager": "pulumi-stack-operator",
            "operation": "Update",
            "apiVersion": "pulumi.com/v1",
            "time": "2026-12-01T10:00:05Z",
            "subresource": "status",
            "fieldsV1": {"f:status": {}},
        },
    ]
    assert original["metadata"]["managedFields"] is MANAGED  # the input is left alone
    assert thaw(cached["spec"]) == {"stack": "dev"}


def test_an_object_without_managed_fields_freezes_to_its_own_content() -> None:
    """Nothing else is shortened: thawing gives the object back."""
    original = obj("ns", "a", items=[{"x": 1}, {}], empty={}, text="t" * 100)
    assert thaw(freeze_object(original)) == original


def test_kubectls_last_applied_copy_is_not_cached_and_other_annotations_are() -> None:
    """A client-side ``kubectl apply`` copy of the object is dropped; the input left alone."""
    original = obj("ns", "a", stack="dev")
    applied = json.dumps({"spec": {"stack": "dev"}})
    annotations = {LAST_APPLIED: applied, "team": "web"}
    original["metadata"]["annotations"] = annotations
    cached = freeze_object(original)
    assert thaw(cached["metadata"]["annotations"]) == {"team": "web"}
    assert thaw(cached["spec"]) == {"stack": "dev"}
    assert original["metadata"]["annotations"] == {LAST_APPLIED: applied, "team": "web"}
    alone = obj("ns", "b")
    alone["metadata"]["annotations"] = {LAST_APPLIED: applied}
    assert thaw(freeze_object(alone)["metadata"]["annotations"]) == {}


def test_frozen_objects_share_keys_short_strings_and_empty_mappings() -> None:
    """A thousand objects of one kind do not each hold their own copy of the same words."""
    first = freeze_object(obj("ns", "a", state="succeeded", empty={}))
    second = freeze_object(json.loads(json.dumps(obj("ns", "b", state="succeeded", empty={}))))
    key_first = next(k for k in first["spec"] if k == "state")
    key_second = next(k for k in second["spec"] if k == "state")
    assert key_first is key_second
    assert first["spec"]["state"] is second["spec"]["state"]
    assert first["spec"]["empty"] is second["spec"]["empty"]
