"""Changing the pods benchmark's Stacks and waiting for their runs on the bench's own watches.

Every change (a create, a new ``value`` config, any spec PATCH) is timed from just before
its request (``Change.sent``, ``time.monotonic()``; ``sent_wall``, ``time.time()``) and
carries the generation it made; ``applied`` waits until the Stack watch has seen that
generation's run end, and fails naming Ready's message if the run failed. ``pod_gone``
waits until the pod watch has seen the run's pod deleted and returns its last version
(the fullest status: both containers' times). A Stack with ``workspaceReclaimPolicy:
Retain`` keeps its last run pod: ``retained`` reads it and its log, ``delete_retained``
deletes it and waits until it is gone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from bench.fleet import GROUP, PLURAL, VERSION, manifest
from bench.pods.podwatch import RunPods
from bench.pods.timeline import of_run
from bench.programs import settled
from bench.watch import Seen, StackWatch, condition, is_true
from workspace.runner.pod import spec as podspec

POD_GONE_TIMEOUT = 120.0  # seconds from a run's end until its pod is deleted


@dataclasses.dataclass(frozen=True)
class Change:
    """A change sent to Stack ``namespace/name``: the generation it made, when it was sent."""

    namespace: str
    name: str
    generation: int
    sent: float  # time.monotonic() just before the request
    sent_wall: float  # time.time() then


class Stacks:
    """Creates and changes Stacks through the API; waits on the bench's watches."""

    def __init__(self, api: client.ApiClient, watch: StackWatch) -> None:
        """Write through ``api``; ``watch`` sees every namespace's Stacks."""
        self._api, self._watch = client.CustomObjectsApi(api), watch

    def create(self, namespace: str, name: str, spec: dict[str, Any]) -> Change:
        """Create Stack ``name`` with ``spec``."""
        sent, sent_wall = time.monotonic(), time.time()
        self._api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest(name, spec)
        )
        return Change(namespace, name, 1, sent, sent_wall)

    def set_value(self, namespace: str, name: str, value: str) -> Change:
        """Set the Stack's ``value`` config (one PATCH)."""
        return self.patch(namespace, name, {"config": {"value": value}})

    def patch(self, namespace: str, name: str, spec: dict[str, Any]) -> Change:
        """Merge ``spec`` into the Stack's spec (one PATCH)."""
        sent, sent_wall = time.monotonic(), time.time()
        obj = cast(
            "dict[str, Any]",
            self._api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": spec}
            ),
        )
        return Change(namespace, name, int(obj["metadata"]["generation"]), sent, sent_wall)

    def applied(self, change: Change, timeout: float) -> Seen:
        """The Stack's version Ready for the change's generation, as the watch saw it.

        Raises:
            RuntimeError: the run failed (with Ready's message).
            bench.watch.WatchError: nothing within ``timeout`` seconds.
        """
        seen = self._watch.wait_for(settled(change.name, change.generation), timeout)
        if not is_true(seen.obj, "Ready"):
            ready = condition(seen.obj, "Ready") or {}
            msg = f"{change.name} generation {change.generation} failed: {ready.get('message')}"
            raise RuntimeError(msg)
        return seen


def pod_gone(pods: RunPods, change: Change) -> Seen:
    """The run pod of ``change`` as it was deleted (waits up to ``POD_GONE_TIMEOUT`` s)."""

    def gone(seen: Seen) -> bool:
        return seen.type == "DELETED" and of_run(
            seen, change.namespace, change.name, change.generation
        )

    return pods.wait_for(gone, POD_GONE_TIMEOUT)


def retained(api: client.ApiClient, change: Change) -> tuple[Mapping[str, Any], str]:
    """The kept run pod of ``change`` (``workspaceReclaimPolicy: Retain``) and its log.

    The log is the run container's, each line led by the kubelet's timestamp.
    """
    core, name = client.CoreV1Api(api), podspec.pod_name(change.name)
    pod: Mapping[str, Any] = api.sanitize_for_serialization(
        core.read_namespaced_pod(name, change.namespace)
    )
    log = core.read_namespaced_pod_log(
        name, change.namespace, container=podspec.CONTAINER, timestamps=True
    )
    return pod, str(log)


def delete_retained(api: client.ApiClient, pods: RunPods, change: Change) -> None:
    """Delete the kept run pod of ``change``; returns once the pod watch has seen it go."""
    name = podspec.pod_name(change.name)
    client.CoreV1Api(api).delete_namespaced_pod(name, change.namespace)
    pod_gone(pods, change)
