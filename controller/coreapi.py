"""The core/v1 calls the operator makes, as plain JSON, without the generated ``CoreV1Api``.

The generated ``kubernetes.client.CoreV1Api`` imports about 250 model classes and builds a
pydantic validator for each method it calls: about 20 MiB of resident memory for a
process that reads a few Secrets, posts Events and follows its run pods. ``CoreApi``
makes the same requests through the same ``ApiClient`` (its configuration, credentials,
connection pool and TLS settings) and hands back the API server's JSON as dicts, which is
what the callers keep anyway.

Each method has the name, the positional arguments and the keyword arguments of the
``CoreV1Api`` method it stands for (the subset the operator passes), so a caller or a test
double written against one fits the other; with ``_preload_content=False`` a method hands
back the streaming response, unread. The requests and their guarantees (answers, errors,
bodies, ``fieldManager``) are ``controller.jsonapi.JsonApi``'s.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from urllib3.response import BaseHTTPResponse

from controller.jsonapi import JsonApi, Timeout

__all__ = ["CoreApi", "Timeout"]


class CoreApi(JsonApi):
    """The operator's core/v1 requests through ``api_client`` (see the module docstring)."""

    # -- reads ----------------------------------------------------------------------------

    def read_namespaced_secret(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the Secret ``namespace/name``."""
        return self._json("GET", _path(namespace, "secrets", name), timeout=_request_timeout)

    def read_namespaced_config_map(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the ConfigMap ``namespace/name``."""
        return self._json("GET", _path(namespace, "configmaps", name), timeout=_request_timeout)

    def read_namespaced_service_account(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the ServiceAccount ``namespace/name``."""
        path = _path(namespace, "serviceaccounts", name)
        return self._json("GET", path, timeout=_request_timeout)

    def read_namespaced_persistent_volume_claim(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the PersistentVolumeClaim ``namespace/name``."""
        path = _path(namespace, "persistentvolumeclaims", name)
        return self._json("GET", path, timeout=_request_timeout)

    def read_namespaced_pod(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the Pod ``namespace/name``."""
        return self._json("GET", _path(namespace, "pods", name), timeout=_request_timeout)

    def read_namespaced_pod_log(
        self,
        name: str,
        namespace: str,
        *,
        container: str,
        follow: bool,
        _preload_content: Literal[False],
        _request_timeout: Timeout = None,
    ) -> BaseHTTPResponse:
        """GET the log of ``container``, as the open stream (followed when ``follow``)."""
        del _preload_content  # always streamed
        query = [("container", container), *([("follow", "true")] if follow else [])]
        path = _path(namespace, "pods", name) + "/log"
        return self._send("GET", path, query=query, timeout=_request_timeout)

    def list_namespaced_pod(  # noqa: PLR0913 - the generated method's keywords
        self,
        namespace: str,
        *,
        field_selector: str,
        watch: Literal[True],
        allow_watch_bookmarks: bool,
        timeout_seconds: int,
        resource_version: str | None,
        _preload_content: Literal[False],
        _request_timeout: Timeout = None,
    ) -> BaseHTTPResponse:
        """WATCH the pods of ``namespace`` ``field_selector`` picks: the open stream of lines."""
        del watch, _preload_content  # only ever a watch, always streamed
        query = [
            ("fieldSelector", field_selector),
            ("watch", "true"),
            ("allowWatchBookmarks", "true" if allow_watch_bookmarks else "false"),
            ("timeoutSeconds", str(timeout_seconds)),
            *([("resourceVersion", resource_version)] if resource_version else []),
        ]
        return self._send("GET", _path(namespace, "pods"), query=query, timeout=_request_timeout)

    # -- writes ---------------------------------------------------------------------------

    def create_namespaced_pod(
        self,
        namespace: str,
        body: object,
        *,
        field_manager: str | None = None,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """POST the Pod ``body`` into ``namespace``."""
        path = _path(namespace, "pods")
        return self._write("POST", path, body, field_manager, timeout=_request_timeout)

    def delete_namespaced_pod(
        self, name: str, namespace: str, *, body: object = None, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """DELETE the Pod ``namespace/name`` with the DeleteOptions ``body``."""
        path = _path(namespace, "pods", name)
        return self._json("DELETE", path, body, timeout=_request_timeout)

    def patch_namespaced_pod(
        self,
        name: str,
        namespace: str,
        body: object,
        *,
        field_manager: str | None = None,
        _content_type: str,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """PATCH the Pod ``namespace/name`` (``_content_type`` names the patch's kind)."""
        path = _path(namespace, "pods", name)
        return self._write(
            "PATCH", path, body, field_manager, _content_type, timeout=_request_timeout
        )

    def create_namespaced_event(
        self,
        namespace: str,
        body: object,
        *,
        field_manager: str | None = None,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """POST the Event ``body`` into ``namespace``."""
        path = _path(namespace, "events")
        return self._write("POST", path, body, field_manager, timeout=_request_timeout)

    def patch_namespaced_event(
        self,
        name: str,
        namespace: str,
        body: object,
        *,
        field_manager: str | None = None,
        _content_type: str,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """PATCH the Event ``namespace/name``."""
        path = _path(namespace, "events", name)
        return self._write(
            "PATCH", path, body, field_manager, _content_type, timeout=_request_timeout
        )


def _path(namespace: str, resource: str, name: str | None = None) -> str:
    """``/api/v1/namespaces/<namespace>/<resource>[/<name>]``, each part quoted."""
    parts = ["namespaces", namespace, resource, *([name] if name is not None else [])]
    return "/api/v1/" + "/".join(quote(part, safe="") for part in parts)
