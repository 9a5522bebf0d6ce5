"""The source kinds' informers: which Stacks a change enqueues, and kinds not served.

Unit: ``references`` and ``Referrers`` map a changed Program or Flux source to exactly the
Stacks of its namespace that name it. Against the real apiserver: a served kind (the
Program CRD) is watched and read from its cache, and its changes enqueue the Stack naming
it; a kind the apiserver does not serve is reported not served, without stopping anything.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ObjectKey, Store
from controller.clock import FakeClock, RealClock
from controller.informer import DeletedFinalStateUnknown
from pulumi_stack_operator.source_watch import KINDS, Referrers, SourceKind, SourceWatch, references
from reconcile.sources import FLUX_GROUP
from testbed.waits import wait_for
from tests.controller.client_failures import Collection, FakeApi, response


def stack(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """A Stack object with ``spec``."""
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"},
        "spec": spec,
    }


FLUX_REF = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "infra"}


def test_references_match_kind_and_name() -> None:
    """A Stack names a Program by programRef, a Flux source by its kind and name."""
    by_program = stack("ns", "a", programRef={"name": "p"})
    by_flux = stack("ns", "b", fluxSource={"sourceRef": FLUX_REF})
    assert references(by_program, "Program", "p")
    assert not references(by_program, "Program", "q")
    assert references(by_flux, "GitRepository", "infra")
    assert not references(by_flux, "OCIRepository", "infra")
    assert not references(by_flux, "Program", "infra")
    assert not references(stack("ns", "c", projectRepo="https://x"), "Program", "p")


def test_a_change_enqueues_only_the_stacks_of_its_namespace_that_name_it() -> None:
    """Adds, updates and deletes (also final-state-unknown) enqueue the referrers only."""
    stacks = Store()
    for obj in (
        stack("ns", "a", programRef={"name": "p"}),
        stack("ns", "b", programRef={"name": "other"}),
        stack("elsewhere", "c", programRef={"name": "p"}),
        stack("ns", "d", fluxSource={"sourceRef": {**FLUX_REF, "name": "p"}}),
    ):
        stacks.upsert(obj)
    queued: list[ObjectKey] = []
    referrers = Referrers("Program", stacks, queued.append)
    program = {"metadata": {"namespace": "ns", "name": "p", "resourceVersion": "1"}}
    referrers.on_add(program)
    referrers.on_update(program, program)
    referrers.on_delete(DeletedFinalStateUnknown(ObjectKey("ns", "p"), program))
    assert queued == [ObjectKey("ns", "a")] * 3


def test_kinds_cover_programs_and_the_three_flux_sources() -> None:
    """Program (pulumi.com/v1) and GitRepository, OCIRepository, Bucket (v1, then v1beta2)."""
    assert {(k.kind, k.group, k.versions) for k in KINDS} == {
        ("Program", "pulumi.com", ("v1",)),
        ("GitRepository", "source.toolkit.fluxcd.io", ("v1", "v1beta2")),
        ("OCIRepository", "source.toolkit.fluxcd.io", ("v1", "v1beta2")),
        ("Bucket", "source.toolkit.fluxcd.io", ("v1", "v1beta2")),
    }


def test_a_served_kind_is_watched_and_an_unserved_one_is_not(
    stack_crd: Path, api_client: client.ApiClient, namespace: str
) -> None:
    """The Program informer sees a new Program and enqueues its Stack; a made-up kind waits."""
    del stack_crd  # the Program CRD is applied with it
    stacks = Store()
    stacks.upsert(stack(namespace, "app", programRef={"name": "p"}))
    queued: list[ObjectKey] = []
    lock = threading.Lock()

    def enqueue(key: ObjectKey) -> None:
        with lock:
            queued.append(key)

    made_up = SourceKind("Nothing", "nothing.example.com", ("v1",), "nothings")
    program_kind = next(kind for kind in KINDS if kind.kind == "Program")
    watch = SourceWatch(
        api_client, [namespace], stacks, enqueue, RealClock(), (program_kind, made_up)
    )
    watch.run()
    try:
        wait_for(lambda: watch.served("Program"), "the Program informer to sync", 30)
        assert not watch.served("Nothing")
        assert watch.alive()
        body = {"apiVersion": "pulumi.com/v1", "kind": "Program", "metadata": {"name": "p"}}
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "pulumi.com", "v1", namespace, "programs", body
        )
        wait_for(
            lambda: watch.get("Program", ObjectKey(namespace, "p")) is not None, "the Program", 30
        )
        with lock:
            assert ObjectKey(namespace, "app") in queued
    finally:
        watch.stop()


def test_a_kind_served_later_is_watched_one_discovery_period_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not served (404), then served: its informer starts at the next look, ``period`` later."""
    api, clock = FakeApi(), FakeClock()
    Collection(api, f"/apis/{FLUX_GROUP}/v1/namespaces/ns/gitrepositories")
    resources = {
        "groupVersion": f"{FLUX_GROUP}/v1",
        "resources": [
            {"name": "gitrepositories", "singularName": "gitrepository", "namespaced": True,
             "kind": "GitRepository", "verbs": ["list", "watch"]},
        ],
    }  # fmt: skip
    kind = SourceKind("GitRepository", FLUX_GROUP, ("v1",), "gitrepositories")
    watch = SourceWatch(
        api.install(monkeypatch), ["ns"], Store(), lambda _key: None, clock, (kind,), period=7.0
    )
    watch.run()
    try:
        assert clock.wait_for_waiters(1), "discovery waits a period on its clock"
        assert not watch.served("GitRepository")
        api.route("GET", f"/apis/{FLUX_GROUP}/v1", lambda _m, _k: response(200, resources))
        clock.step(6.0)
        assert clock.wait_for_waiters(1)
        assert not watch.served("GitRepository")
        clock.step(1.0)
        wait_for(lambda: watch.served("GitRepository"), "the kind to be watched", 10, 0.01)
        assert watch.alive()
    finally:
        watch.stop(0.0)
        api.close()
