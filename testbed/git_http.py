"""Bare git repositories served over smart HTTP, behind HTTP basic authentication.

``GitHttpServer`` is a threaded ``http.server`` on 127.0.0.1 that runs ``git http-backend``
as a CGI program for every request that carries one of its accounts' username and password;
every other request gets ``401`` with ``WWW-Authenticate: Basic``, the way a private GitHub
or GitLab repository answers. The authenticated user is passed to the backend as
``REMOTE_USER``.

Test set-up pushes without going through HTTP: ``push_url(name)`` is a ``file://`` URL of
the bare repository, for ``Checkout`` from ``testbed.git_server``. Clients under test
clone ``url(name)``.

Three switches imitate other servers:
- ``public=True`` serves every request, with or without credentials, as a public GitHub
  repository does (the user is then ``""`` unless an account's credentials came);
- ``protocol_v2=False`` drops the ``Git-Protocol`` header, so the backend speaks protocol v0
  and refuses to send a commit by id unless a branch or tag points at it (older servers,
  ``uploadpack.allowReachableSHA1InWant=false``);
- ``fail(name, status)`` answers every request for one repository with that HTTP status
  (e.g. 503) until ``fail(name, None)``.

``requests`` records (method, path, user) of every request, for tests that prove a call
did or did not reach the server.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
import subprocess
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from testbed.git_server import git
from testbed.serving import Serving

BACKEND_TIMEOUT = 60.0  # seconds one http-backend run may take


@dataclass(frozen=True)
class Account:
    """One username and password the server accepts."""

    username: str
    password: str

    @classmethod
    def random(cls, username: str | None = None) -> Account:
        """A fresh account; the username is random too unless given."""
        return cls(username or f"user-{secrets.token_hex(4)}", secrets.token_urlsafe(18))


@dataclass(frozen=True)
class Request:
    """One request the server received; ``user`` is None when it was refused."""

    method: str
    path: str
    user: str | None


class _HTTPServer(ThreadingHTTPServer):
    """The socket server; carries a reference to the ``GitHttpServer`` it serves."""

    daemon_threads = True

    def __init__(self, backend: GitHttpServer) -> None:
        self.backend = backend
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    """Authenticate, then hand the request to ``git http-backend`` (CGI)."""

    timeout = 30  # socket timeout: a stalled client cannot pin a thread forever

    def do_GET(self) -> None:
        """Serve info/refs and other GET endpoints."""
        self._serve()

    def do_POST(self) -> None:
        """Serve git-upload-pack and git-receive-pack."""
        self._serve()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
        """Append to the server's log file instead of stderr."""
        self._backend.log(f"{self.address_string()} {format % args}")

    @property
    def _backend(self) -> GitHttpServer:
        server = self.server
        assert isinstance(server, _HTTPServer)
        return server.backend

    def _serve(self) -> None:
        backend = self._backend
        parts = urllib.parse.urlsplit(self.path)
        user = backend.authenticate(self.headers.get("Authorization"))
        if user is None and backend.public:
            user = ""
        backend.record(Request(self.command, parts.path, user))
        if user is None:
            self._reply(
                401, {"WWW-Authenticate": 'Basic realm="git"'}, b"authentication required\n"
            )
            return
        status = backend.failure_for(parts.path)
        if status is not None:
            self._reply(status, {}, b"injected failure\n")
            return
        body = self._read_body()
        output = backend.run_backend(self._cgi_environ(parts, user, len(body)), body)
        self._relay(output)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _read_chunked(self) -> bytes:
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk
        while self.rfile.readline().strip():  # optional trailers, then an empty line
            pass
        return b"".join(chunks)

    def _cgi_environ(
        self, parts: urllib.parse.SplitResult, user: str, length: int
    ) -> dict[str, str]:
        env = {
            "REQUEST_METHOD": self.command,
            "PATH_INFO": urllib.parse.unquote(parts.path),
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "REMOTE_USER": user,
            "REMOTE_ADDR": self.client_address[0],
        }
        # The body is decoded from chunked above, but gzip is the backend's to inflate.
        if encoding := self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = encoding
        if (protocol := self.headers.get("Git-Protocol")) and self._backend.protocol_v2:
            env["HTTP_GIT_PROTOCOL"] = protocol
        return env

    def _relay(self, output: bytes) -> None:
        if not output:  # the backend died before writing its headers
            self._reply(500, {}, b"git http-backend failed\n")
            return
        head, _, body = output.partition(b"\r\n\r\n")
        if not body and b"\r\n" not in head:
            head, _, body = output.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers[name] = value.strip()
        self._reply(status, headers, body)

    def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class GitHttpServer:
    """Smart HTTP (``git http-backend``) for every bare repository under ``root/repos``."""

    def __init__(
        self,
        root: Path,
        accounts: Sequence[Account],
        *,
        protocol_v2: bool = True,
        public: bool = False,
    ) -> None:
        """Prepare (not start) a server that accepts exactly ``accounts`` (``public``: anyone)."""
        self.root = root
        self.repos = root / "repos"
        self.accounts = tuple(accounts)
        self.public = public
        self.protocol_v2 = protocol_v2
        self.requests: list[Request] = []
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()  # guards requests, _failures and the log file
        self._httpd: _HTTPServer | None = None
        self._serving: Serving | None = None

    @property
    def port(self) -> int:
        """The port the server listens on (after ``start``)."""
        assert self._httpd is not None, "start() first"
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        """Listen on an ephemeral loopback port and serve from a background thread."""
        self.repos.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        self._httpd = _HTTPServer(self)
        self._serving = Serving(self._httpd, "git-http")

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice."""
        serving, self._serving, self._httpd = self._serving, None, None
        if serving is not None:
            serving.stop()

    def url(self, name: str) -> str:
        """The clone URL of repository ``name`` (no credentials in it)."""
        return f"http://127.0.0.1:{self.port}/{name}.git"

    def push_url(self, name: str) -> str:
        """A ``file://`` URL of the bare repository, for test set-up (bypasses HTTP)."""
        return (self.repos / f"{name}.git").as_uri()

    def create_repo(self, name: str, branch: str = "main") -> str:
        """Create an empty bare repository whose default branch is ``branch``; returns its URL."""
        git("init", "--bare", f"--initial-branch={branch}", str(self.repos / f"{name}.git"))
        return self.url(name)

    def fail(self, name: str, status: int | None) -> None:
        """Answer every request for repository ``name`` with ``status`` (None: stop failing)."""
        with self._lock:
            if status is None:
                self._failures.pop(f"/{name}.git", None)
            else:
                self._failures[f"/{name}.git"] = status

    def requests_for(self, name: str) -> list[Request]:
        """The requests received so far for repository ``name``."""
        prefix = f"/{name}.git/"
        with self._lock:
            return [r for r in self.requests if r.path.startswith(prefix)]

    # Called from request threads.

    def authenticate(self, header: str | None) -> str | None:
        """The username if ``header`` carries one account's credentials, else None."""
        scheme, _, encoded = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            username, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        for account in self.accounts:
            same_user = hmac.compare_digest(username.encode(), account.username.encode())
            if same_user and hmac.compare_digest(password.encode(), account.password.encode()):
                return username
        return None

    def failure_for(self, path: str) -> int | None:
        """The injected status for the repository ``path`` belongs to, if any."""
        with self._lock:
            return next((s for p, s in self._failures.items() if path.startswith(p + "/")), None)

    def record(self, request: Request) -> None:
        """Remember one request."""
        with self._lock:
            self.requests.append(request)

    def log(self, line: str) -> None:
        """Append one line to ``root/logs/git-http.log``."""
        with self._lock, (self.root / "logs" / "git-http.log").open("a") as log:
            log.write(line + "\n")

    def run_backend(self, cgi: dict[str, str], body: bytes) -> bytes:
        """Run ``git http-backend`` with the CGI variables ``cgi`` and request ``body``."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(self.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            **cgi,
        }
        proc = subprocess.run(
            ["git", "http-backend"],
            input=body,
            env=env,
            capture_output=True,
            check=False,
            timeout=BACKEND_TIMEOUT,
        )
        if proc.stderr:
            self.log(proc.stderr.decode(errors="replace").rstrip())
        return proc.stdout
