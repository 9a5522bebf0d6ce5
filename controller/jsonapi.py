"""The request layer of the operator's hand-written API clients: JSON in, JSON out.

``JsonApi`` sends a request through a generated ``ApiClient`` (its configuration,
credentials, connection pool and TLS settings), without the generated API classes and
their models and pydantic validators. ``controller.coreapi.CoreApi`` (core/v1) and
``controller.objectsapi.ObjectsApi`` (custom resources) are its subclasses. Guarantees:

- a 2xx answer is returned as its decoded JSON (``dict``), or by ``_send`` as the
  streaming ``urllib3`` response, unread;
- any other answer raises ``kubernetes.client.ApiException`` (its typed subclasses, with
  ``status``, ``reason`` and ``body``) exactly as the generated client raises it;
- a body may be a dict or a generated model (serialized as the generated client does);
- a write given a ``field_manager`` sends it as the ``fieldManager`` query parameter, so
  that ``managedFields`` name the writer (None: the API server's default, the user agent).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.response import BaseHTTPResponse

Timeout = float | tuple[float, float] | None
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class JsonApi:
    """Requests through ``api_client`` (see the module docstring)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        """Send every request through ``api_client``."""
        self.api_client = api_client

    def _write(  # noqa: PLR0913 - one write's parts
        self,
        method: str,
        path: str,
        body: object,
        field_manager: str | None,
        content_type: str = JSON,
        *,
        timeout: Timeout,
    ) -> dict[str, Any]:
        """Send one write as ``field_manager``; its JSON answer."""
        query = [("fieldManager", field_manager)] if field_manager is not None else []
        return self._json(method, path, body, content_type, query=query, timeout=timeout)

    def _json(  # noqa: PLR0913 - one request's parts
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = JSON,
        *,
        query: list[tuple[str, str]] | None = None,
        timeout: Timeout,
    ) -> dict[str, Any]:
        """Send one request; its JSON answer."""
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        decoded: dict[str, Any] = json.loads(response.data or b"{}")
        return decoded

    def _send(  # noqa: PLR0913 - one request's parts
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = JSON,
        timeout: Timeout,
    ) -> BaseHTTPResponse:
        """Send one request; the response unread, or ``ApiException`` for a non-2xx."""
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        answer = self.api_client.call_api(*request, _request_timeout=timeout)
        response: BaseHTTPResponse = answer.response
        if not 200 <= answer.status <= 299:
            text = response.data.decode(errors="replace")
            raise ApiException.from_response(http_resp=answer, body=text, data=None)
        return response
