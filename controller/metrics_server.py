"""``/metrics`` over HTTPS for callers the cluster authenticates and authorizes.

What controller-runtime's secure metrics serving does (its
``filters.WithAuthenticationAndAuthorization``), for this manager: every request carries a
bearer token; the API server says who it belongs to (a TokenReview) and whether that user
may ``get`` the non-resource URL ``/metrics`` (a SubjectAccessReview, as RBAC grants with
``nonResourceURLs: [/metrics]``). Answers:

- no token, or one the API server does not accept: 401;
- a user not allowed: 403;
- the API server unreachable, or a review that failed any other way: 503 (nothing is
  served on a guess); a streak of such failures is logged once
  (``controller.failures.FailureStreak``), and every request asks the API server again;
- otherwise the registry's exposition, in the format the caller asks for.

Both reviews are cached per token (its SHA-256, never the token) for ``CACHE_TTL``
seconds, so a Prometheus scraping every 30 s costs the API server two calls a minute.

The certificate comes from ``cert_dir`` (``tls.crt`` and ``tls.key``, a
``kubernetes.io/tls`` Secret's layout, read again when they change, e.g. after
cert-manager renews them), else a self-signed one made at start-up (as controller-runtime
does; scrapers then skip verification or pin it) by a child process, so this process never
loads ``cryptography`` (``controller.self_signed``).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ssl
import subprocess
import sys
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from controller.clock import Clock, RealClock
from controller.failures import FailureStreak

log = structlog.get_logger(__name__)

CACHE_TTL = 60.0
CACHE_SIZE = 1024
METRICS_PATH = "/metrics"


class Reviewer:
    """Asks the API server who a token is and whether it may ``get /metrics``; cached.

    ``clock.now()`` times the cache.
    """

    def __init__(self, api_client: client.ApiClient, clock: Clock) -> None:
        """Review through ``api_client``."""
        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self._now = clock.now
        self._lock = threading.Lock()
        self._answers: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._streak = FailureStreak("metrics reviews", clock)

    def status(self, authorization: str | None) -> int:
        """200, 401 or 403 for a request with the ``Authorization`` header ``authorization``.

        Raises:
            Exception: the review failed (``controller.failures.CLIENT_FAILURES`` when the
                API server did not answer); the failure is logged here, once per streak.
        """
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return 401
        key = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            cached = self._answers.get(key)
            if cached is not None and cached[1] > self._now():
                return cached[0]
        try:
            answer = self._review(token)
        except Exception as err:
            self._streak.failed(err)
            raise
        self._streak.succeeded()
        with self._lock:
            self._answers[key] = (answer, self._now() + CACHE_TTL)
            self._answers.move_to_end(key)
            while len(self._answers) > CACHE_SIZE:
                self._answers.popitem(last=False)
        return answer

    def _review(self, token: str) -> int:
        review = self._authn.create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return 401
        user = status.user
        access = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user.username,
                groups=user.groups,
                uid=user.uid,
                extra=user.extra,
                non_resource_attributes=client.V1NonResourceAttributes(
                    path=METRICS_PATH, verb="get"
                ),
            )
        )
        allowed = self._authz.create_subject_access_review(access).status
        return 200 if allowed is not None and allowed.allowed else 403


class Certificates:
    """The serving certificate: ``cert_dir``'s pair (reloaded when changed), or self-signed."""

    def __init__(self, cert_dir: Path | None, *, clock: Clock | None = None) -> None:
        """Serve ``cert_dir/tls.crt`` with ``tls.key``; None: a pair self-signed now (``clock``)."""
        self._files = None if cert_dir is None else (cert_dir / "tls.crt", cert_dir / "tls.key")
        self._stamp: tuple[float, float] | None = None
        self._lock = threading.Lock()
        self._context = (
            _self_signed_context(clock or RealClock())
            if self._files is None
            else self._load(self._files)
        )

    def context(self) -> ssl.SSLContext:
        """The TLS context for a new connection (the files' newest pair)."""
        if self._files is None:
            return self._context
        with self._lock:
            if self._stamp != _mtimes(self._files):
                try:
                    self._context = self._load(self._files)
                except (OSError, ssl.SSLError):
                    log.exception("Could not reload the metrics certificate; keeping the old one")
            return self._context

    def _load(self, files: tuple[Path, Path]) -> ssl.SSLContext:
        stamp = _mtimes(files)
        context = _server_context()
        context.load_cert_chain(*files)
        self._stamp = stamp
        return context


def _mtimes(files: tuple[Path, Path]) -> tuple[float, float]:
    cert, key = files
    return cert.stat().st_mtime, key.stat().st_mtime


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


SELF_SIGNED_MODULE = "controller.self_signed"  # the child's program
SELF_SIGNED_NAME = "pulumi-stack-operator-metrics"  # the certificate's common name
CHILD_TIMEOUT = 60.0  # seconds for the child to write the pair


class SelfSignedError(RuntimeError):
    """The child process could not make the self-signed pair."""


def make_self_signed(
    directory: Path, now: datetime.datetime, common_name: str = SELF_SIGNED_NAME
) -> None:
    """Write a new self-signed pair into ``directory`` from a child process.

    The child runs ``controller.self_signed`` with this interpreter; this process never
    loads ``cryptography``.

    Raises:
        SelfSignedError: the child failed (its last words in the message) or took longer
            than ``CHILD_TIMEOUT``.
    """
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                SELF_SIGNED_MODULE,
                str(directory),
                "--now",
                now.isoformat(),
                "--name",
                common_name,
            ],
            check=True,
            capture_output=True,
            timeout=CHILD_TIMEOUT,
        )
    except subprocess.CalledProcessError as error:
        words = error.stderr.decode(errors="replace").strip().splitlines()[-1:]
        msg = f"could not make a self-signed metrics certificate: {' '.join(words)}"
        raise SelfSignedError(msg) from None
    except subprocess.TimeoutExpired:
        msg = f"making a self-signed metrics certificate took over {CHILD_TIMEOUT:.0f} s"
        raise SelfSignedError(msg) from None


def _self_signed_context(clock: Clock) -> ssl.SSLContext:
    """A context serving a new self-signed certificate (made by a child process)."""
    context = _server_context()
    # load_cert_chain reads files only: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="metrics-tls-") as directory:
        make_self_signed(Path(directory), clock.wall())
        context.load_cert_chain(Path(directory) / "tls.crt", Path(directory) / "tls.key")
    return context


class SecureMetricsServer(http.server.ThreadingHTTPServer):
    """HTTPS ``/metrics`` of ``registry`` for callers ``reviewer`` allows (see the module doc).

    The TLS handshake happens in the request's own thread, so a slow client never holds
    up the others.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        reviewer: Reviewer,
        certificates: Certificates,
    ) -> None:
        """Listen on ``address``; nothing is served until ``serve_forever``."""
        self.registry, self.reviewer, self.certificates = registry, reviewer, certificates
        super().__init__(address, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection that broke is the client's problem: log it quietly, go on."""
        del request
        log.debug("A metrics connection failed", client=str(client_address))

    def get_request(self) -> tuple[Any, Any]:
        """Accept a connection and wrap it in TLS (the handshake waits for the handler)."""
        sock, address = self.socket.accept()
        context = self.certificates.context()
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SecureMetricsServer
    timeout = 30  # seconds a connection may idle (the handshake included)

    def do_GET(self) -> None:
        if self.path.split("?")[0] != METRICS_PATH:
            self._reply(404, b"not found\n")
            return
        try:
            status = self.server.reviewer.status(self.headers.get("Authorization"))
        except Exception:  # noqa: BLE001 - logged by the reviewer; nothing served on a guess
            self._reply(503, b"could not authenticate the request\n")
            return
        if status != 200:
            self._reply(status, b"Unauthorized\n" if status == 401 else b"Forbidden\n")
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        self._reply(200, encoder(self.server.registry), content_type)

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Scrapes come every few seconds; their lines would drown the log."""

    def handle(self) -> None:
        try:
            self.request.do_handshake()
            super().handle()
        except OSError:  # a failed handshake, a reset, a timeout: that client's loss only
            return
