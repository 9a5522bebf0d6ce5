"""Secure metrics: HTTPS, and only for tokens the API server says may get /metrics.

Against the real apiserver: the server runs as the operator (its own RBAC from
``manifests/``), and scrapers are real ServiceAccounts with TokenRequest tokens, one bound
to the metrics reader role and one not. Unit tests cover the header's parsing, the cache
and a certificate rotated on disk.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter

from controller import metrics_server
from controller.clock import FAKE_EPOCH, FakeClock, RealClock
from controller.metrics_server import (
    CACHE_TTL,
    SELF_SIGNED_NAME,
    Certificates,
    Reviewer,
    SecureMetricsServer,
    SelfSignedError,
    make_self_signed,
)
from testbed.control_plane import ControlPlane
from testbed.rbac import METRICS_READER, operator_kubeconfig
from testbed.scraper import get_metrics, scraper_token


def probe_registry() -> CollectorRegistry:
    """A registry with one known series."""
    registry = CollectorRegistry()
    Counter("probe", "A series the scrape must show.", registry=registry).inc()
    return registry


@contextlib.contextmanager
def serving(reviewer: Reviewer, certificates: Certificates) -> Iterator[str]:
    """A ``SecureMetricsServer`` on a free loopback port; yields its /metrics URL."""
    server = SecureMetricsServer(("127.0.0.1", 0), probe_registry(), reviewer, certificates)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# -- against the real apiserver -----------------------------------------------------------


@pytest.fixture
def operator_api(control_plane: ControlPlane, namespace: str) -> Iterator[client.ApiClient]:
    """An API client with the operator's own token and RBAC (installed in ``namespace``)."""
    with control_plane.api_client(operator_kubeconfig(control_plane, namespace)) as api:
        yield api


@pytest.mark.integration
def test_only_a_token_allowed_to_get_metrics_is_served(
    operator_api: client.ApiClient, api_client: client.ApiClient, namespace: str
) -> None:
    """A reader's token: 200 and the series; another SA's: 403; none or a bad one: 401."""
    reader = scraper_token(api_client, namespace, "reader", METRICS_READER)
    stranger = scraper_token(api_client, namespace, "stranger")
    with serving(Reviewer(operator_api, RealClock()), Certificates(None)) as url:
        status, body = get_metrics(url, reader)
        assert status == 200, body
        assert "probe_total 1.0" in body
        assert get_metrics(url, stranger)[0] == 403
        assert get_metrics(url, None)[0] == 401
        assert get_metrics(url, "not-a-token")[0] == 401
        assert get_metrics(url.replace("/metrics", "/"), reader)[0] == 404


@pytest.mark.integration
def test_plain_http_gets_no_metrics(operator_api: client.ApiClient) -> None:
    """A plain-HTTP request is not answered with metrics (the TLS handshake fails)."""
    with serving(Reviewer(operator_api, RealClock()), Certificates(None)) as url:
        host, port = url.removeprefix("https://").split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.recv(4096)
        assert b"probe_total" not in answer


# -- units -------------------------------------------------------------------------------


def test_an_unreachable_apiserver_serves_nothing() -> None:
    """Reviews that cannot be made answer 503, never the metrics."""
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"  # nothing listens there
    with (
        client.ApiClient(configuration) as api,
        serving(Reviewer(api, RealClock()), Certificates(None)) as url,
    ):
        status, body = get_metrics(url, "some-token", timeout=30)
    assert (status, "probe_total" in body) == (503, False)


class CountingReviewer(Reviewer):
    """A reviewer whose API answers are scripted: token → status, each call counted."""

    def __init__(self, answers: dict[str, int], clock: FakeClock) -> None:
        """Answer ``answers`` on ``clock``'s time."""
        super().__init__(client.ApiClient(), clock)
        self.answers, self.calls = answers, 0

    def _review(self, token: str) -> int:
        self.calls += 1
        return self.answers[token]


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "token abc"]
)
def test_a_request_without_a_bearer_token_is_401_without_a_review(header: str | None) -> None:
    """Nothing to review: 401 at once, the API server is not asked."""
    reviewer = CountingReviewer({}, FakeClock())
    assert reviewer.status(header) == 401
    assert reviewer.calls == 0


def test_answers_are_cached_per_token_for_the_ttl() -> None:
    """Two reviews a token per CACHE_TTL, whatever the scrape rate; the answer is kept."""
    clock = FakeClock()
    reviewer = CountingReviewer({"good": 200, "bad": 403}, clock)
    for _ in range(5):
        assert reviewer.status("Bearer good") == 200
        assert reviewer.status("bearer bad") == 403
    assert reviewer.calls == 2
    clock.step(CACHE_TTL + 1)
    reviewer.answers["good"] = 403  # the binding was removed
    assert reviewer.status("Bearer good") == 403
    assert reviewer.calls == 3


def served_certificate(url: str) -> x509.Certificate:
    """The certificate ``url``'s server presents."""
    host, port = url.removeprefix("https://").split("/")[0].split(":")
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection((host, int(port)), timeout=5) as sock,
        context.wrap_socket(sock) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def served_name(url: str) -> str:
    """The common name of the certificate ``url``'s server presents."""
    [attribute] = served_certificate(url).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attribute.value)


def test_a_certificate_renewed_on_disk_is_served_to_the_next_connection(tmp_path: Path) -> None:
    """``--metrics-cert-dir``: the pair is read again when its files change (cert-manager)."""
    make_self_signed(tmp_path, RealClock().wall(), "first")
    certificates = Certificates(tmp_path)
    reviewer = CountingReviewer({}, FakeClock())
    with serving(reviewer, certificates) as url:
        assert served_name(url) == "first"
        make_self_signed(tmp_path, RealClock().wall(), "second")
        later = (tmp_path / "tls.crt").stat().st_mtime + 5
        for name in ("tls.crt", "tls.key"):
            os.utime(tmp_path / name, (later, later))
        assert served_name(url) == "second"


def test_without_a_directory_the_certificate_is_self_signed_for_this_host() -> None:
    """No ``--metrics-cert-dir``: a self-signed certificate made at start-up."""
    reviewer = CountingReviewer({}, FakeClock())
    with serving(reviewer, Certificates(None)) as url:
        assert served_name(url) == SELF_SIGNED_NAME


def test_a_self_signed_certificate_is_valid_from_the_clocks_wall_time() -> None:
    """Five minutes before ``clock.wall()`` to a year after: the clock's time, not the host's."""
    reviewer = CountingReviewer({}, FakeClock())
    with serving(reviewer, Certificates(None, clock=FakeClock(start=30.0))) as url:
        cert = served_certificate(url)
    issued = FAKE_EPOCH + datetime.timedelta(seconds=30)
    assert cert.not_valid_before_utc == issued - datetime.timedelta(minutes=5)
    assert cert.not_valid_after_utc == issued + datetime.timedelta(days=365)


def test_the_operator_process_never_loads_cryptography() -> None:
    """The pair is made by a child: ``cryptography`` would stay resident (~9 MiB) for good."""
    program = (
        "import sys, controller.manager, pulumi_stack_operator.__main__; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", program], check=True, capture_output=True, text=True
    ).stdout
    assert loaded.strip() == "[]"


def test_a_child_that_fails_is_named_with_its_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken child fails start-up with its own error, not a bare exit status."""
    monkeypatch.setattr(metrics_server, "SELF_SIGNED_MODULE", "controller.no_such_module")
    with pytest.raises(SelfSignedError, match=r"self-signed .*No module named"):
        make_self_signed(tmp_path, RealClock().wall())
