"""A pass-through package mirror: npm's registry and PyPI over plain HTTP, with a disk cache.

The test node's pods reach the host but not the internet, yet a run installs its program's
packages (``npm ci``, ``pip install``, ``uv sync``). ``PackageMirror`` listens on the host
(loopback, or the host end of the node's network) and forwards

- ``GET /npm/<path>`` to ``https://registry.npmjs.org/<path>`` (metadata and tarballs; the
  path is kept as encoded, so ``@scope%2fname`` and ``@scope/name`` both work),
- ``GET /pypi/simple/<project>/`` to ``https://pypi.org/simple/<project>/`` (HTML or JSON,
  as the client's ``Accept`` asks), and
- ``GET /pypi-files/<path>`` to ``https://files.pythonhosted.org/<path>`` (wheels, sdists
  and their ``.metadata``),

passing the client's ``Accept`` on and rewriting, in metadata and index pages, the upstream
download URLs to its own, so that every download comes back through it. Upstream's 200 and
404 answers are kept under ``cache_dir``, keyed by upstream URL and ``Accept``, and never
fetched again: a rerun, or a second test session, needs no internet. Anything else from
upstream, or no answer, is a 502 naming the URL. ``env(mirror)`` gives the variables that
send npm, pip and uv to a mirror.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import http.server
import json
import shutil
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Protocol

from testbed.process import Served
from testbed.serving import Serving

NPM_UPSTREAM = "https://registry.npmjs.org/"
PYPI_SIMPLE_UPSTREAM = "https://pypi.org/simple/"
PYPI_FILES_UPSTREAM = "https://files.pythonhosted.org/"
UPSTREAM_TIMEOUT = 60.0  # seconds, per upstream connection and read


@dataclasses.dataclass(frozen=True)
class Route:
    """Requests under ``prefix`` go to ``upstream`` followed by the rest of the path, verbatim.

    ``rewrite`` is ``(upstream URL, mirror prefix)``: in the route's text answers (JSON,
    HTML) every occurrence of that URL becomes the mirror's URL of that prefix.
    """

    prefix: str
    upstream: str
    rewrite: tuple[str, str] | None = None

    def upstream_url(self, path: str) -> str | None:
        """The upstream URL for request path ``path``; None if the route does not serve it."""
        if not path.startswith(self.prefix):
            return None
        return self.upstream + path.removeprefix(self.prefix)


ROUTES = (
    Route("/npm/", NPM_UPSTREAM, (NPM_UPSTREAM, "/npm/")),
    Route("/pypi/simple/", PYPI_SIMPLE_UPSTREAM, (PYPI_FILES_UPSTREAM, "/pypi-files/")),
    Route("/pypi-files/", PYPI_FILES_UPSTREAM),
)


class Readable(Protocol):
    """A binary stream to copy from."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all that is left if negative); b"" at the end."""
        ...


class UpstreamError(RuntimeError):
    """Upstream gave no answer worth keeping: unreachable, or a status other than 200/404."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One cached upstream answer: its body is ``path``'s bytes from ``offset`` on."""

    status: int
    content_type: str
    path: Path
    offset: int

    @property
    def size(self) -> int:
        """The body's length in bytes."""
        return self.path.stat().st_size - self.offset

    def cache_control(self) -> str:
        """What clients may keep: archives for good, metadata 5 minutes, 404s not at all.

        The mirror itself never fetches an answer again, but a client's cache is keyed by
        URL, and another mirror (cache) may come to have the same one.
        """
        if self.status != 200:
            return "no-store"
        return "public, max-age=300" if self.is_text() else "public, max-age=31536000, immutable"

    def is_text(self) -> bool:
        """Whether the body is metadata or an index page (JSON, HTML, text), not an archive."""
        kind = self.content_type.split(";", 1)[0].strip().lower()
        return kind.startswith("text/") or kind.endswith(("json", "html", "xml"))


def read_entry(path: Path) -> Entry | None:
    """The answer cached at ``path`` (a JSON header line, then the body); None if absent."""
    try:
        with path.open("rb") as handle:
            header = json.loads(handle.readline())
            return Entry(int(header["status"]), str(header["content_type"]), path, handle.tell())
    except FileNotFoundError:
        return None


def write_entry(path: Path, header: dict[str, object], body: Readable) -> Entry:
    """Write ``header`` (as one JSON line) and ``body`` to ``path`` atomically; its entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".", delete=False) as partial:
        try:
            partial.write(json.dumps(header).encode() + b"\n")
            shutil.copyfileobj(body, partial)
        except BaseException:
            Path(partial.name).unlink()
            raise
    Path(partial.name).replace(path)
    entry = read_entry(path)
    assert entry is not None
    return entry


def open_upstream(url: str, accept: str) -> http.client.HTTPResponse | urllib.error.HTTPError:
    """GET ``url`` (identity encoding, ``accept`` if any); a 200 or 404 response to read.

    Raises:
        UpstreamError: no answer, or a status other than 200 and 404.
    """
    headers = {"Accept-Encoding": "identity", "User-Agent": "testbed-package-mirror"}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a route's upstream
    try:
        response: http.client.HTTPResponse = urllib.request.urlopen(  # noqa: S310 - a route's upstream
            request, timeout=UPSTREAM_TIMEOUT
        )
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return error
        error.close()
        msg = f"upstream {url} answered {error.code}"
        raise UpstreamError(msg) from error
    except (OSError, http.client.HTTPException) as error:  # URLError is an OSError
        msg = f"upstream {url} unreachable: {error}"
        raise UpstreamError(msg) from error
    return response


def decoded(body: IO[bytes], encoding: str | None) -> Readable:
    """``body`` without its ``Content-Encoding`` (identity or gzip).

    Raises:
        UpstreamError: any other encoding.
    """
    if encoding in {None, "", "identity"}:
        return body
    if encoding in {"gzip", "x-gzip"}:
        return gzip.GzipFile(fileobj=body, mode="rb")
    msg = f"upstream sent an unsupported Content-Encoding {encoding!r}"
    raise UpstreamError(msg)


class Upstream:
    """Upstream answers through the disk cache under ``root``, counting the fetches made.

    Thread-safe: an answer missing from the cache is fetched once however many ask at once.
    """

    def __init__(self, root: Path) -> None:
        """Use (and create on first write) the cache directory ``root``."""
        self.root = root
        self._fetches = 0
        self._lock = threading.Lock()
        self._fetching: dict[Path, threading.Lock] = {}

    @property
    def fetches(self) -> int:
        """How many times upstream was asked (cache misses, failed ones included)."""
        with self._lock:
            return self._fetches

    def path(self, url: str, accept: str) -> Path:
        """Where the answer to ``url`` for ``accept`` is kept."""
        key = hashlib.sha256(f"{url}\n{accept}".encode()).hexdigest()
        return self.root / key[:2] / key

    def get(self, url: str, accept: str) -> Entry:
        """The answer to ``url`` for ``accept``: cached, else fetched and cached.

        Raises:
            UpstreamError: it is not cached and upstream gave no 200 or 404.
        """
        path = self.path(url, accept)
        with self._lock_for(path):  # concurrent misses of one answer fetch it once
            entry = read_entry(path)
            return entry if entry is not None else self._fetch(url, accept, path)

    def _lock_for(self, path: Path) -> threading.Lock:
        with self._lock:
            return self._fetching.setdefault(path, threading.Lock())

    def _fetch(self, url: str, accept: str, path: Path) -> Entry:
        with self._lock:
            self._fetches += 1
        with open_upstream(url, accept) as response:
            headers = response.headers
            header: dict[str, object] = {
                "status": response.status,
                "content_type": headers.get("Content-Type", "application/octet-stream"),
                "url": url,
                "accept": accept,
            }
            try:
                return write_entry(path, header, decoded(response, headers["Content-Encoding"]))
            except (OSError, http.client.HTTPException) as error:
                msg = f"upstream {url} broke off: {error}"
                raise UpstreamError(msg) from error


class _Server(http.server.ThreadingHTTPServer):
    """The HTTP server: routes, the upstream cache and the record of client requests."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], upstream: Upstream, routes: tuple[Route, ...]
    ) -> None:
        super().__init__(address, _Handler)
        self.upstream, self.routes = upstream, routes
        self.base_url = f"http://{address[0]}:{self.server_address[1]}"
        self.asked: list[str] = []
        self.asked_lock = threading.Lock()

    def record(self, path: str) -> None:
        with self.asked_lock:
            self.asked.append(path)

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: tuple[str, int]
    ) -> None:
        """Ignore clients that went away mid-answer; report anything else as usual."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET and HEAD of a mirrored path; HTTP/1.0, so each connection ends with its answer."""

    server: _Server
    timeout = UPSTREAM_TIMEOUT * 2  # a stuck client does not hold a thread for ever

    def do_GET(self) -> None:
        """Send the upstream answer (200 or 404), else 404 (unknown path) or 502."""
        self._answer(body=True)

    def do_HEAD(self) -> None:
        """Send the upstream answer's status and headers."""
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        self.server.record(self.path)
        for route in self.server.routes:
            url = route.upstream_url(self.path)
            if url is not None:
                self._forward(route, url, body=body)
                return
        self._send(404, "text/plain", b"not a mirrored path\n", body=body)

    def _forward(self, route: Route, url: str, *, body: bool) -> None:
        try:
            entry = self.server.upstream.get(url, self.headers.get("Accept", ""))
        except UpstreamError as error:
            self._send(502, "text/plain", f"{error}\n".encode(), body=body)
            return
        if route.rewrite is not None and entry.is_text():
            data = self._rewritten(entry, *route.rewrite)
            self._send(entry.status, entry.content_type, data, entry.cache_control(), body=body)
            return
        self._send_head(entry.status, entry.content_type, entry.size, entry.cache_control())
        if body:
            with entry.path.open("rb") as handle:
                handle.seek(entry.offset)
                shutil.copyfileobj(handle, self.wfile)

    def _rewritten(self, entry: Entry, old: str, prefix: str) -> bytes:
        new = self.server.base_url + prefix
        return entry.path.read_bytes()[entry.offset :].replace(old.encode(), new.encode())

    def _send(
        self, status: int, content_type: str, data: bytes, cache: str = "no-store", *, body: bool
    ) -> None:
        self._send_head(status, content_type, len(data), cache)
        if body:
            self.wfile.write(data)

    def _send_head(self, status: int, content_type: str, length: int, cache: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", cache)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        """Log nothing: ``PackageMirror.requests`` is the record."""
        del format, args


class PackageMirror(Served):
    """An npm and PyPI pass-through mirror on ``host``:``port`` (0: a free one); see the module."""

    def __init__(
        self,
        cache_dir: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        routes: tuple[Route, ...] = ROUTES,
    ) -> None:
        """Prepare (not start) a mirror keeping upstream answers under ``cache_dir``.

        ``host`` is the address to listen on and the one written into rewritten URLs, so it
        must be one the clients reach (not 0.0.0.0). ``routes`` replaces the upstreams (tests).
        """
        self.host, self._port, self.routes = host, port, routes
        self._upstream = Upstream(cache_dir)
        self._server: _Server | None = None
        self._serving: Serving | None = None

    def start(self) -> None:
        """Bind the port and serve on a daemon thread; returns once connections are accepted."""
        self._server = _Server((self.host, self._port), self._upstream, self.routes)
        name = f"package-mirror-{self._server.server_address[1]}"
        self._serving = Serving(self._server, name, poll_interval=0.1)

    def stop(self) -> None:
        """Stop serving and close the port; safe to call twice."""
        if self._serving is not None:
            self._serving.stop()

    @property
    def url(self) -> str:
        """The mirror's base URL, ``http://<host>:<port>`` (once started)."""
        assert self._server is not None, "start() first"
        return self._server.base_url

    @property
    def npm_registry(self) -> str:
        """The ``registry`` setting that sends npm to this mirror: ``<url>/npm/``."""
        return f"{self.url}/npm/"

    @property
    def pypi_index(self) -> str:
        """The index URL for pip (and uv's default index): ``<url>/pypi/simple/``."""
        return f"{self.url}/pypi/simple/"

    def requests(self) -> list[str]:
        """Every path clients asked for so far (as sent, query included), oldest first."""
        assert self._server is not None, "start() first"
        with self._server.asked_lock:
            return list(self._server.asked)

    def upstream_fetches(self) -> int:
        """How many upstream fetches (cache misses) this mirror made so far."""
        return self._upstream.fetches


def env(mirror: PackageMirror) -> dict[str, str]:
    """The variables that send npm, pip and uv installs to ``mirror`` (plain HTTP, trusted)."""
    return {
        "NPM_CONFIG_REGISTRY": mirror.npm_registry,
        "PIP_INDEX_URL": mirror.pypi_index,
        "PIP_TRUSTED_HOST": mirror.host,
        "UV_DEFAULT_INDEX": mirror.pypi_index,
        "UV_INSECURE_HOST": mirror.host,
    }
