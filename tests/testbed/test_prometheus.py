"""Debian's Prometheus scrapes a prometheus_client endpoint; promtool lints expositions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

from testbed.process import free_port
from testbed.prometheus import Prometheus, check_metrics, find_binary


def test_prometheus_scrapes_a_counter(prometheus: Callable[[str], Prometheus]) -> None:
    """A counter incremented three times is queryable as 3 through PromQL."""
    registry = CollectorRegistry()
    counter = Counter("testbed_smoke", "Smoke-test counter.", registry=registry)
    counter.inc(3)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        scraper = prometheus(f"127.0.0.1:{port}")
        result = scraper.wait_for("testbed_smoke_total")
        assert [sample["value"][1] for sample in result] == ["3"]
        assert scraper.query('up{job="operator"}')[0]["value"][1] == "1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.skipif(find_binary("promtool") is None, reason="Debian's prometheus is not installed")
@pytest.mark.prometheus
def test_promtool_accepts_clean_metrics_and_flags_bad_names() -> None:
    """Promtool passes prometheus_client output and flags a gauge named like a counter."""
    registry = CollectorRegistry()
    Counter("testbed_requests", "Requests.", registry=registry).inc()
    clean = check_metrics(generate_latest(registry).decode())
    assert clean.returncode == 0, clean.stdout + clean.stderr

    bad_registry = CollectorRegistry()
    Gauge("testbed_items_count", "Items.", registry=bad_registry).set(1)
    bad = check_metrics(generate_latest(bad_registry).decode())
    assert bad.returncode == 3
    assert "_count" in bad.stdout + bad.stderr
