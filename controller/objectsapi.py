"""The custom-resource calls the operator makes, as plain JSON, without ``CustomObjectsApi``.

The generated ``kubernetes.client.CustomObjectsApi`` builds a pydantic validator for each
of its methods the process calls and deserializes discovery answers into model classes:
about 2 MiB of resident memory for what the operator does with Stacks, Programs and the
Flux sources (list and watch them, read one, patch its metadata or its status, and ask
which resources a group version serves). ``ObjectsApi`` makes the same requests through
``controller.jsonapi.JsonApi`` and hands back the API server's JSON as dicts.

Each method has the name, the positional arguments and the keyword arguments of the
``CustomObjectsApi`` method it stands for (the subset the operator passes), so a caller,
``kubernetes.watch.Watch`` or a test double written against one fits the other:

- a list given ``watch=True`` and ``_preload_content=False`` (what ``Watch.stream``
  passes) is a watch, handed back as the open stream of event lines;
- a patch whose body is a mapping is a JSON merge patch (as the generated client sends
  it for custom resources, which take no strategic merge).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from urllib3.response import BaseHTTPResponse

from controller.jsonapi import MERGE_PATCH, JsonApi, Timeout

Query = list[tuple[str, str]]


class ObjectsApi(JsonApi):
    """The operator's custom-resource requests (see the module docstring)."""

    def get_api_resources(
        self, group: str, version: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the APIResourceList of ``group/version`` (discovery)."""
        return self._json("GET", _group_path(group, version), timeout=_request_timeout)

    def get_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        *,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """GET one object."""
        path = _path(group, version, namespace, plural, name)
        return self._json("GET", path, timeout=_request_timeout)

    def list_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        *,
        _request_timeout: Timeout = None,
        _preload_content: bool = True,
        **params: Any,  # noqa: ANN401 - the list's query (``list_query``)
    ) -> Any:  # noqa: ANN401 - a list's JSON, or a watch's open stream
        """LIST (or, with ``watch=True``, WATCH) the objects of ``namespace``."""
        path = _path(group, version, namespace, plural)
        return self._list(path, params, _preload_content, _request_timeout)

    def list_cluster_custom_object(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        _request_timeout: Timeout = None,
        _preload_content: bool = True,
        **params: Any,  # noqa: ANN401 - the list's query (``list_query``)
    ) -> Any:  # noqa: ANN401 - a list's JSON, or a watch's open stream
        """LIST (or, with ``watch=True``, WATCH) the objects of every namespace."""
        path = _path(group, version, None, plural)
        return self._list(path, params, _preload_content, _request_timeout)

    def patch_namespaced_custom_object(  # noqa: PLR0913 - the generated method's arguments
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: object,
        *,
        field_manager: str | None = None,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """Merge-PATCH one object (its metadata and spec)."""
        path = _path(group, version, namespace, plural, name)
        timeout = _request_timeout
        return self._write("PATCH", path, body, field_manager, MERGE_PATCH, timeout=timeout)

    def patch_namespaced_custom_object_status(  # noqa: PLR0913 - the generated method's arguments
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: object,
        *,
        field_manager: str | None = None,
        _request_timeout: Timeout = None,
    ) -> dict[str, Any]:
        """Merge-PATCH one object's status subresource."""
        path = _path(group, version, namespace, plural, name) + "/status"
        timeout = _request_timeout
        return self._write("PATCH", path, body, field_manager, MERGE_PATCH, timeout=timeout)

    def _list(
        self,
        path: str,
        params: dict[str, Any],
        preload: bool,  # noqa: FBT001 - the generated keyword, passed on
        timeout: Timeout,
    ) -> Any:  # noqa: ANN401 - a list's JSON, or a watch's open stream
        query = list_query(params)
        if preload:
            return self._json("GET", path, query=query, timeout=timeout)
        response: BaseHTTPResponse = self._send("GET", path, query=query, timeout=timeout)
        return response


# The generated methods' list keywords and the query parameters they stand for.
LIST_PARAMS = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "watch": "watch",
}


def list_query(params: dict[str, Any]) -> Query:
    """The query of a list or watch from the generated method's keywords (None: left out).

    Raises:
        TypeError: a keyword the generated method does not take, named.
    """
    unknown = sorted(set(params) - set(LIST_PARAMS))
    if unknown:
        message = f"unexpected keyword argument(s): {', '.join(unknown)}"
        raise TypeError(message)
    return [(LIST_PARAMS[k], _text(v)) for k, v in params.items() if v is not None]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _group_path(group: str, version: str) -> str:
    return "/apis/" + "/".join(quote(part, safe="") for part in (group, version))


def _path(group: str, version: str, namespace: str | None, plural: str, name: str = "") -> str:
    """``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]``, each part quoted."""
    parts = [*(["namespaces", namespace] if namespace is not None else []), plural]
    parts += [name] if name else []
    return _group_path(group, version) + "/" + "/".join(quote(p, safe="") for p in parts)
