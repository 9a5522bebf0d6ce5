"""Kubernetes Events about Stacks: one recorder, edge-triggered by its callers.

``EventRecorder.post(obj, type_, reason, message)`` creates a core/v1 Event regarding the
object, or — when an identical event (same object, type, reason and message) was posted
recently — raises that Event's ``count`` and ``lastTimestamp`` instead of creating another
object, as client-go's recorder does. Messages are cut to 1024 characters. Posting is
best effort: a failure is logged and never fails a reconcile. Callers post only on
transitions and on update start/finish, never on every pass.
"""

from __future__ import annotations

import collections
import datetime
import socket
import threading
from collections.abc import Mapping
from typing import Any

import structlog
from kubernetes import client

log = structlog.get_logger(__name__)

COMPONENT = "pulumi-stack-operator"
MAX_MESSAGE = 1024
_CACHE_SIZE = 4096

NORMAL, WARNING = "Normal", "Warning"


def _now() -> datetime.datetime:
    now = datetime.datetime.now(datetime.UTC)
    return now.replace(microsecond=now.microsecond or 1)


def _truncate(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


class EventRecorder:
    """Posts and de-duplicates Events; see the module docstring."""

    def __init__(self, api_client: client.ApiClient, instance: str | None = None) -> None:
        """Post through ``api_client`` as ``pulumi-stack-operator`` on ``instance``."""
        self._api = client.CoreV1Api(api_client)
        self._instance = instance or socket.gethostname()
        self._lock = threading.Lock()
        self._recent: collections.OrderedDict[tuple[str, ...], tuple[str, int]] = (
            collections.OrderedDict()
        )

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an event about ``obj``; never raises."""
        meta = obj["metadata"]
        message = _truncate(message)
        key = (str(meta.get("uid")), type_, reason, message)
        with self._lock:
            seen = self._recent.pop(key, None)
        try:
            if seen is None:
                name = self._create(obj, type_, reason, message)
                count = 1
            else:
                name, count = seen[0], seen[1] + 1
                self._bump(meta["namespace"], name, count)
        except (client.ApiException, OSError) as err:
            log.warning("Posting an event failed", reason=reason, error=str(err))
            return
        with self._lock:
            self._recent[key] = (name, count)
            while len(self._recent) > _CACHE_SIZE:
                self._recent.popitem(last=False)

    def _create(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> str:
        meta = obj["metadata"]
        now = _now()
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=obj.get("apiVersion"),
                kind=obj.get("kind"),
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            reason=reason,
            message=message,
            type=type_,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self._instance,
            action=reason,
        )
        created = self._api.create_namespaced_event(meta["namespace"], body)
        return str(created.metadata.name) if created.metadata else ""

    def _bump(self, namespace: str, name: str, count: int) -> None:
        stamp = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
        self._api.patch_namespaced_event(name, namespace, {"count": count, "lastTimestamp": stamp})
