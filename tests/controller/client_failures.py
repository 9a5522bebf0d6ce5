"""Every kind of exception a Kubernetes client call can raise, and a fake API raising them.

``FAILURES`` names one factory per kind (a fresh exception each call): urllib3's
``HTTPError`` family, ``http.client``'s errors, TLS and socket errors, a body that does not
decode, ``ApiException`` answers, and a plain bug. ``FakeApi`` stands behind a real
``ApiClient`` (its ``rest_client.request``): while broken it raises the fault for every
request, counting them; otherwise it answers through the routes a test adds.
``Collection`` is one namespaced resource on it: list, watch (from a resourceVersion,
replaying what changed since, then open until cut), get, and status PATCH.
"""

from __future__ import annotations

import copy
import http.client
import json
import queue
import re
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import rest
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError

Fault = Callable[[], Exception]


def _refused() -> MaxRetryError:
    """What urllib3 raises once it gives up connecting to a stopped apiserver."""
    reason = NewConnectionError(None, "Failed to establish a new connection: [Errno 111]")  # type: ignore[arg-type]
    return MaxRetryError(None, "/apis", reason)  # type: ignore[arg-type]


FAILURES: dict[str, Fault] = {
    "MaxRetryError": _refused,
    "ProtocolError": lambda: ProtocolError("Connection aborted.", ConnectionResetError(104)),
    "ReadTimeoutError": lambda: ReadTimeoutError(None, "/apis", "Read timed out."),  # type: ignore[arg-type]
    "IncompleteRead": lambda: http.client.IncompleteRead(b"{", 100),
    "RemoteDisconnected": lambda: http.client.RemoteDisconnected("closed without response"),
    "SSLError": lambda: ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
    "TimeoutError": lambda: TimeoutError("timed out"),  # socket.timeout
    "ConnectionRefusedError": lambda: ConnectionRefusedError(111, "Connection refused"),
    "JSONDecodeError": lambda: json.JSONDecodeError("Expecting value", "<html>", 0),
    "UnicodeDecodeError": lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid byte"),
    "ApiException-503": lambda: client.ApiException(status=503, reason="Service Unavailable"),
    "ApiException-403": lambda: client.ApiException(status=403, reason="Forbidden"),
    "ApiException-0": lambda: client.ApiException(status=0, reason="SSLError: EOF"),
    "RuntimeError": lambda: RuntimeError("a bug, not the API server"),
}
"""One factory per kind of exception a loop must survive, by name (the test ids)."""

Route = Callable[[re.Match[str], Mapping[str, Any]], rest.RESTResponse]
"""Answers a request: the path's match, and the request's keyword arguments (with
``query``, the query string as a dict)."""


def response(status: int, body: object) -> rest.RESTResponse:
    """A JSON answer with ``status``."""
    raw = urllib3.HTTPResponse(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json"},
        preload_content=True,
    )
    return rest.RESTResponse(raw)


def status(code: int, message: str) -> rest.RESTResponse:
    """A failure ``Status`` with ``code``."""
    return response(code, {"kind": "Status", "status": "Failure", "code": code, "message": message})


class _WatchBody:
    """A watch response's body: event lines as they are sent, until it is ended."""

    def __init__(self) -> None:
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._ended = False

    @property
    def closed(self) -> bool:
        return self._ended

    def send(self, event: Mapping[str, Any]) -> None:
        self._lines.put((json.dumps(event) + "\n").encode())

    def end(self) -> None:
        self._lines.put(None)

    def read(self, amt: int | None = None) -> bytes:
        del amt
        line = self._lines.get()
        if line is None:
            self._ended = True
            return b""
        return line

    def close(self) -> None:
        self.end()


class FakeApi:
    """An API server behind a real ``ApiClient``: routes answer, or every request fails."""

    def __init__(self) -> None:
        """No route (every request is answered 404); not broken."""
        self._routes: list[tuple[str, re.Pattern[str], Route]] = []
        self._fault: Fault | None = None
        self._lock = threading.Lock()
        self._failures = 0
        self._watches: list[_WatchBody] = []
        self._closed = False

    def route(self, method: str, path: str, answer: Route) -> None:
        """Answer ``method`` requests whose path matches the regular expression ``path``."""
        self._routes.append((method, re.compile(path), answer))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> client.ApiClient:
        """A new ``ApiClient`` whose every request this fake answers."""
        api_client = client.ApiClient(client.Configuration(host="https://fake.invalid"))
        monkeypatch.setattr(api_client.rest_client, "request", self.request)
        return api_client

    def break_with(self, fault: Fault) -> None:
        """From now on every request raises ``fault()``."""
        with self._lock:
            self._fault = fault

    def heal(self) -> None:
        """From now on requests are answered again."""
        with self._lock:
            self._fault = None

    def failed(self) -> int:
        """How many requests have been failed so far."""
        with self._lock:
            return self._failures

    def gate(self) -> None:
        """Raise the fault if broken (counted as a failed request): for fakes of other seams."""
        with self._lock:
            fault = self._fault
            if fault is not None:
                self._failures += 1
        if fault is not None:
            raise fault()

    def request(self, method: str, url: str, **kwargs: Any) -> rest.RESTResponse:
        """Raise the fault while broken; otherwise answer through the routes (else 404)."""
        self.gate()
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        for verb, pattern, answer in self._routes:
            match = pattern.fullmatch(parts.path)
            if verb == method and match is not None:
                return answer(match, {**kwargs, "query": query})
        return status(404, f"{method} {parts.path}: no route")

    def open_watch(
        self, backlog: Sequence[Mapping[str, Any]]
    ) -> tuple[_WatchBody, rest.RESTResponse]:
        """A 200 watch answer delivering ``backlog``, then whatever is sent, until cut."""
        body = _WatchBody()
        for event in backlog:
            body.send(event)
        with self._lock:
            if self._closed:
                body.end()
            else:
                self._watches.append(body)
        raw = urllib3.HTTPResponse(
            body=cast("IO[bytes]", body),
            status=200,
            headers={"Content-Type": "application/json"},
            preload_content=False,
        )
        return body, rest.RESTResponse(raw)

    def watching(self) -> int:
        """How many watches are open."""
        with self._lock:
            return sum(not body.closed for body in self._watches)

    def cut_watches(self) -> None:
        """End every open watch, as a dropped connection does."""
        with self._lock:
            bodies, self._watches = self._watches, []
        for body in bodies:
            body.end()

    def close(self) -> None:
        """End every open watch and answer later ones closed: no thread stays blocked."""
        with self._lock:
            self._closed = True
        self.cut_watches()

    def sent(self, event: Mapping[str, Any]) -> None:
        """Deliver ``event`` to every open watch (``Collection`` calls it)."""
        with self._lock:
            bodies = list(self._watches)
        for body in bodies:
            body.send(event)


class Collection:
    """One namespaced resource on a ``FakeApi``: list, watch, get and status PATCH.

    Every change gets the next resourceVersion and goes to the open watches; a watch from
    a resourceVersion first gets every change after it, as the API server's does.
    """

    def __init__(self, api: FakeApi, prefix: str) -> None:
        """Serve ``prefix`` (``/apis/<group>/<version>/namespaces/<ns>/<plural>``) on ``api``."""
        self._api = api
        self._lock = threading.Lock()
        self._version = 0
        self.objects: dict[str, dict[str, Any]] = {}
        self._history: list[tuple[int, dict[str, Any]]] = []
        self.patches = 0
        api.route("GET", re.escape(prefix), self._list_or_watch)
        api.route("GET", re.escape(prefix) + "/(?P<name>[^/]+)", self._get)
        api.route("PATCH", re.escape(prefix) + "/(?P<name>[^/]+)/status", self._patch_status)

    def add(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` (created or replaced) at a new resourceVersion; tell the watches."""
        with self._lock:
            stored = self._store(copy.deepcopy(dict(obj)))
        return copy.deepcopy(stored)

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        kind = "MODIFIED" if name in self.objects else "ADDED"
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self.objects[name] = obj
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self._history.append((self._version, event))
        self._api.sent(event)
        return obj

    def _list_or_watch(self, match: re.Match[str], kwargs: Mapping[str, Any]) -> rest.RESTResponse:
        del match
        query = kwargs["query"]
        with self._lock:
            if query.get("watch") == "true":
                since = int(query.get("resourceVersion") or 0)
                backlog = [event for version, event in self._history if version > since]
                return self._api.open_watch(backlog)[1]
            items = [copy.deepcopy(obj) for obj in self.objects.values()]
            return response(
                200, {"items": items, "metadata": {"resourceVersion": str(self._version)}}
            )

    def _get(self, match: re.Match[str], kwargs: Mapping[str, Any]) -> rest.RESTResponse:
        del kwargs
        with self._lock:
            obj = self.objects.get(match["name"])
            return status(404, "not found") if obj is None else response(200, obj)

    def _patch_status(self, match: re.Match[str], kwargs: Mapping[str, Any]) -> rest.RESTResponse:
        body = kwargs["body"]
        with self._lock:
            self.patches += 1
            obj = self.objects.get(match["name"])
            if obj is None:
                return status(404, "not found")
            if body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                return status(409, "the object has been modified")
            obj = copy.deepcopy(obj)
            obj["status"] = merge(obj.get("status") or {}, body["status"])
            return response(200, self._store(obj))


def merge(old: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386: apply the merge patch ``patch`` to ``old``."""
    new = dict(old)
    for key, value in patch.items():
        if value is None:
            new.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(old.get(key), Mapping):
            new[key] = merge(old[key], value)
        else:
            new[key] = value
    return new
