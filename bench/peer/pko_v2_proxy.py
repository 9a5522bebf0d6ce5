"""Plumbing between the host and the node's pods for PKO v2: a CONNECT proxy and a relay.

``WorkspaceProxy``: an HTTP CONNECT proxy that lets PKO v2's manager, a host process,
reach its workspace pods.

PKO v2's manager dials each workspace's agent at ``<workspace>-workspace.<namespace>:50051``,
a name only a cluster's DNS resolves; the node cluster has none, but the host reaches Pod
IPs directly. gRPC-Go honours ``HTTPS_PROXY`` and then hands the name to the proxy
unresolved, so the manager runs with ``HTTPS_PROXY`` set to this proxy (and ``NO_PROXY``
naming the API server). For ``CONNECT <service>.<namespace>:<port>`` it looks up the
Service's EndpointSlices and connects to a ready address (what a headless Service's DNS
answers); an IP address is connected to as given. It then copies bytes both ways until
either side closes. Unknown names get ``502``, which gRPC reports as a failed connect and
retries, as it would an unresolved name.

``WorkspaceProxy(api)`` listens on a free loopback port (``url``) once started; ``stop``
closes the listener and every open tunnel.

``Relay(host, target, tls)``: a TCP relay listening on ``host`` (the node's host address,
which pods reach) and forwarding every connection to ``target`` on loopback, ending TLS
with ``tls`` first when given: PKO v2 takes git repositories over HTTPS only, and the test
bed's smart-HTTP git server (``testbed.git_http``) speaks plain HTTP on loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import socketserver
import ssl
import threading
from typing import cast

from kubernetes import client

from bench.running import Running

CONNECT_TIMEOUT = 10.0  # seconds to reach a pod
HEADER_LIMIT = 16384  # bytes of a CONNECT request's head
BUFFER = 65536


class _Served(Running):
    """A ``_Server`` serving in a thread of its own once started."""

    _server: _Server | None = None

    def _serve(self, server: _Server) -> None:
        """Serve ``server`` in a daemon thread."""
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop listening and close the open connections; safe to call twice."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_tunnels()
            self._server = None


class WorkspaceProxy(_Served):
    """The CONNECT proxy; see the module docstring."""

    def __init__(self, api: client.ApiClient) -> None:
        """Prepare (not start); ``api`` reads EndpointSlices."""
        self._discovery = client.DiscoveryV1Api(api)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, for ``HTTPS_PROXY``."""
        if self._server is None:
            raise RuntimeError("the workspace proxy is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        """Listen on a free loopback port and serve in a thread of its own."""
        server = _Server(("127.0.0.1", 0), _Tunnel)
        server.resolve = self.resolve
        self._serve(server)

    def resolve(self, host: str) -> str:
        """An address for ``host``: itself if an IP, else a ready endpoint of the Service.

        Raises:
            LookupError: not ``<service>.<namespace>``, or no ready endpoint.
        """
        with contextlib.suppress(ValueError):
            return str(ipaddress.ip_address(host))
        service, _, namespace = host.partition(".")
        namespace = namespace.split(".", 1)[0]
        if not service or not namespace:
            raise LookupError(host)
        slices = self._discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={service}"
        ).items
        for found in slices:
            for endpoint in found.endpoints or []:
                if endpoint.conditions is None or endpoint.conditions.ready is not False:
                    return str(endpoint.addresses[0])
        raise LookupError(host)


class Relay(_Served):
    """A TCP relay from ``host`` (a free port) to ``target``; see the module docstring."""

    def __init__(
        self, host: str, target: tuple[str, int], tls: ssl.SSLContext | None = None
    ) -> None:
        """Prepare (not start); ``tls``: a server-side context to end TLS with."""
        self.host, self.target, self.tls = host, target, tls

    @property
    def port(self) -> int:
        """The port it listens on (after ``start``)."""
        if self._server is None:
            raise RuntimeError("the relay is not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Listen on a free port of ``host`` and serve in a thread of its own."""
        server = _Server((self.host, 0), _Forward)
        server.target, server.tls = self.target, self.tls
        self._serve(server)


class _Server(socketserver.ThreadingTCPServer):
    """A threading TCP server that remembers its tunnels' sockets, to close them at stop."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[socketserver.BaseRequestHandler]
    ) -> None:
        super().__init__(address, handler)
        self.resolve = _unresolved
        self.target = ("", 0)
        self.tls: ssl.SSLContext | None = None
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()

    def track(self, *sockets: socket.socket, open_: bool = True) -> None:
        """Remember (or forget) sockets to shut down at ``close_tunnels``."""
        with self.lock:
            if open_:
                self.sockets.update(sockets)
            else:
                self.sockets.difference_update(sockets)

    def close_tunnels(self) -> None:
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()


class _Tunnel(socketserver.BaseRequestHandler):
    """One CONNECT: read its head, connect, answer, copy both ways."""

    def handle(self) -> None:
        server = cast("_Server", self.server)
        downstream = cast("socket.socket", self.request)
        target = _read_connect(downstream)
        if target is None:
            downstream.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        host, port = target
        try:
            upstream = socket.create_connection((server.resolve(host), port), CONNECT_TIMEOUT)
            upstream.settimeout(None)  # the timeout was for the connect; a tunnel may idle
        except (LookupError, OSError, client.ApiException):
            downstream.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        server.track(upstream, downstream)
        with upstream:
            downstream.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _pump_both(downstream, upstream)
        server.track(upstream, downstream, open_=False)


class _Forward(socketserver.BaseRequestHandler):
    """One relayed connection: connect to the target, copy both ways."""

    def handle(self) -> None:
        server = cast("_Server", self.server)
        downstream = cast("socket.socket", self.request)
        try:
            if server.tls is not None:
                downstream = server.tls.wrap_socket(downstream, server_side=True)
            upstream = socket.create_connection(server.target, CONNECT_TIMEOUT)
            upstream.settimeout(None)
        except OSError:
            return
        server.track(upstream, downstream)
        with upstream:
            _pump_both(downstream, upstream)
        server.track(upstream, downstream, open_=False)


def _unresolved(host: str) -> str:
    raise LookupError(host)


def _read_connect(sock: socket.socket) -> tuple[str, int] | None:
    """The ``(host, port)`` of a CONNECT request's head, or ``None`` when it is not one."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) < HEADER_LIMIT:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        head += chunk
    words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(words) != 3 or words[0] != "CONNECT":
        return None
    host, _, port = words[1].rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def _pump_both(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes between the two sockets until either side closes; then close both."""
    back = threading.Thread(target=_pump, args=(other, one), daemon=True)
    back.start()
    _pump(one, other)
    back.join()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until EOF or an error; then shut both down."""
    try:
        while chunk := source.recv(BUFFER):
            sink.sendall(chunk)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
