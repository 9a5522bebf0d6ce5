"""The bench's own watch of every run pod on the cluster, each version timestamped.

``RunPods`` is a ``bench.watch.ObjectWatch`` over pods of every namespace carrying the
operator's run-pod label (``app.kubernetes.io/component=pulumi-run``): the API server
filters, and each ADDED, MODIFIED and DELETED version is recorded with the
``time.monotonic()`` of its arrival. ``PodListWatcher`` is the list-watcher it uses
(``controller.informer.ListWatcher``'s shape, raw JSON objects).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client, watch

from bench.watch import ObjectWatch
from controller.informer import WatchEvent
from workspace.runner.pod import spec as podspec

RUN_PODS = f"{podspec.LABEL_COMPONENT}={podspec.COMPONENT}"


class PodListWatcher:
    """Lists and watches the pods of every namespace matching a label selector."""

    namespace: str | None = None  # every namespace

    def __init__(self, api: client.ApiClient, label_selector: str) -> None:
        """Through ``api``; ``label_selector`` in ``kubectl -l`` syntax."""
        self._api, self._core = api, client.CoreV1Api(api)
        self._selector = label_selector
        self._watch: watch.Watch | None = None

    def list(self, limit: int, continue_token: str | None) -> Mapping[str, Any]:
        """One page of the list, as the API's JSON."""
        page = self._core.list_pod_for_all_namespaces(
            label_selector=self._selector, limit=limit, _continue=continue_token
        )
        found: Mapping[str, Any] = self._api.sanitize_for_serialization(page)
        return found

    def watch(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Watch from ``resource_version``; yields raw events."""
        stream = self._watch = watch.Watch()
        try:
            for event in stream.stream(
                self._core.list_pod_for_all_namespaces,
                label_selector=self._selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _request_timeout=(10, timeout_seconds + 60),
            ):
                yield {"type": event["type"], "object": event["raw_object"]}
        finally:
            self._watch = None

    def stop(self) -> None:
        """Close the running watch's connection, if any."""
        stream = self._watch
        if stream is not None:
            stream.stop()


class RunPods(ObjectWatch):
    """Every version of every run pod on the cluster; see the module docstring."""

    def __init__(self, api: client.ApiClient) -> None:
        """Prepare (not start) the watch."""
        super().__init__(PodListWatcher(api, RUN_PODS), "run pod")
