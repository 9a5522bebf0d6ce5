"""The production collaborators that are not exercised on fakes: the finalizer patch."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from controller.cache import ObjectKey
from controller.reconciler import TransientError
from reconcile.collaborators import StackPatcher

KEY = ObjectKey("ns", "app")


MANAGER = "pulumi-stack-operator:shard=a"


def patcher(answer: client.ApiException | None, calls: list[tuple[Any, ...]]) -> StackPatcher:
    """A ``StackPatcher`` whose API call records its arguments and raises ``answer``."""
    patch = StackPatcher(client.ApiClient(), MANAGER)

    def call(*args: Any, **kwargs: Any) -> object:
        calls.append((*args, kwargs))
        if answer is not None:
            raise answer
        return {}

    patch._objects.patch_namespaced_custom_object = call  # type: ignore[method-assign,assignment]  # noqa: SLF001
    return patch


def test_the_patch_sets_the_finalizers_at_the_version_read() -> None:
    """A merge patch of metadata.finalizers with the resourceVersion as a precondition.

    Written as the operator's field manager.
    """
    calls: list[tuple[Any, ...]] = []
    patcher(None, calls).set_finalizers(KEY, "42", ["a", "b"])
    body = {"metadata": {"finalizers": ["a", "b"], "resourceVersion": "42"}}
    manager = {"field_manager": MANAGER}
    assert calls == [("pulumi.com", "v1", "ns", "stacks", "app", body, manager)]


def test_a_conflict_is_transient_and_a_missing_stack_is_done() -> None:
    """409: the watch brings the new version, retry; 404: nothing left to release."""
    calls: list[tuple[Any, ...]] = []
    with pytest.raises(TransientError, match="changed while its finalizer was updated"):
        patcher(client.ApiException(status=409), calls).set_finalizers(KEY, "1", [])
    patcher(client.ApiException(status=404), calls).set_finalizers(KEY, "1", [])
    with pytest.raises(client.ApiException):
        patcher(client.ApiException(status=422), calls).set_finalizers(KEY, "1", [])
    assert len(calls) == 3
