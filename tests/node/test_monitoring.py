"""Prometheus (Debian's) scraping the operator's pod on the node, and its alerts firing.

Prometheus runs on the host and scrapes the pods behind the metrics Service, as a
ServiceMonitor has it do (HTTPS, with a token bound to the metrics reader role). Debian
builds Prometheus without Kubernetes service discovery, so the test reads the Service's
EndpointSlices from the API and hands their addresses to Prometheus through file-based
discovery, labelled with the pod, as the ServiceMonitor's relabelling does. Its rules are
``manifests/prometheus/rules`` with every ``for`` shortened to ``0s`` (the expressions
untouched), so that an alert fires within the test instead of after ten minutes.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.node import deployment
from testbed.node.deployment import NAMESPACE, SERVICE
from testbed.prometheus import INSTALL_HINT, Prometheus, find_binary
from testbed.waits import wait_for
from tests.e2e.agreement import api_states
from tests.e2e.conftest import Program, Stacks

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.e2e]

RULES = deployment.REPO / "manifests" / "prometheus" / "rules" / "prometheus_rule.yaml"
JOB = "pulumi-stack-operator"
DOWN = "PulumiStackOperatorDown"


def rule_file(directory: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file, every ``for`` set to 0s."""
    groups = copy.deepcopy(yaml.safe_load(RULES.read_text())["spec"]["groups"])
    for group in groups:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    path = directory / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    return path


def service_targets(node_cluster: Any) -> list[dict[str, Any]]:
    """File-discovery target groups: each ready endpoint of the metrics Service, by pod."""
    listing = node_cluster.kubectl(
        "get",
        "endpointslices",
        "-n",
        NAMESPACE,
        "-l",
        f"kubernetes.io/service-name={SERVICE}",
        "-o",
        "json",
    ).stdout
    groups = []
    for endpoint_slice in json.loads(listing)["items"]:
        port = next(p["port"] for p in endpoint_slice["ports"] if p["name"] == "metrics")
        for endpoint in endpoint_slice.get("endpoints") or []:
            if not endpoint.get("conditions", {}).get("ready"):
                continue
            pod = endpoint["targetRef"]["name"]
            targets = [f"{address}:{port}" for address in endpoint["addresses"]]
            groups.append({"targets": targets, "labels": {"pod": pod, "service": SERVICE}})
    return groups


def scrape_config(targets: Path, token: Path) -> dict[str, Any]:
    """Scrape the targets in ``targets`` (file discovery) as the ServiceMonitor does.

    HTTPS, the bearer token in the file ``token``, the certificate unverified.
    """
    return {
        "job_name": JOB,
        "file_sd_configs": [{"files": [str(targets)]}],
        "scheme": "https",
        "authorization": {"credentials_file": str(token)},
        "tls_config": {"insecure_skip_verify": True},
    }


@pytest.fixture
def prometheus(node_cluster: Any, tmp_path: Path) -> Iterator[Prometheus]:
    """Debian's Prometheus on the host, scraping the targets in ``targets.json`` beside it.

    It holds the token of a ServiceAccount bound to the metrics reader role.
    """
    binary = find_binary("prometheus")
    if binary is None:
        pytest.skip(f"Debian's prometheus is not installed ({INSTALL_HINT})")
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    token = tmp_path / "token"
    token.write_text(deployment.reader_token(node_cluster))
    server = Prometheus(
        binary,
        tmp_path / "prometheus",
        scrape_configs=[scrape_config(targets, token)],
        rule_files=[rule_file(tmp_path)],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def scraped_states(prometheus: Prometheus, namespace: str) -> dict[tuple[str, str], list[str]]:
    """(name, type) -> statuses whose ``pulumi_stack_condition`` series is 1, as scraped."""
    states: dict[tuple[str, str], list[str]] = {}
    query = f'pulumi_stack_condition{{job="{JOB}", namespace="{namespace}"}}'
    for sample in prometheus.query(query):
        labels = sample["metric"]
        ones = states.setdefault((labels["name"], labels["type"]), [])
        if float(sample["value"][1]) == 1:
            ones.append(labels["status"])
    return states


def test_prometheus_scrapes_the_pod_and_a_stalled_stack_fires_its_alert(
    node_cluster: Any,
    stack_overlay: Path,
    tenant: Stacks,
    node_git: Any,
    tmp_path: Path,
    prometheus: Prometheus,
) -> None:
    """The scraped condition series equal the API; PulumiStackStalled fires in Prometheus."""
    deployment.deploy(node_cluster, stack_overlay)
    program = Program(node_git, tmp_path)
    tenant.create(
        tenant.manifest(
            "stuck", program, envRefs={"X": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}
        )
    )
    tenant.wait_reason("stuck", "Stalled", "InvalidSpec", timeout=120)
    [pod] = deployment.ready_pods(node_cluster)
    wait_for(lambda: bool(service_targets(node_cluster)), "the Service's ready endpoint", 60)
    # Nothing scraped yet: the operator-down alert fires (its rule works)...
    assert prometheus.wait_for(f'ALERTS{{alertname="{DOWN}", alertstate="firing"}}', timeout=60)
    (tmp_path / "targets.json").write_text(json.dumps(service_targets(node_cluster)))
    up = prometheus.wait_for(f'up{{job="{JOB}"}} == 1', timeout=60)
    scraped = time.time()
    assert [s["metric"]["pod"] for s in up] == [pod["metadata"]["name"]]
    # ... and the first evaluation that sees the scrape resolves it.
    assert prometheus.evaluated_after(DOWN, scraped)["state"] == "inactive"

    wait_for(
        lambda: scraped_states(prometheus, tenant.namespace) == api_states(tenant.listing()),
        "the scraped condition series to equal the API",
        timeout=60,
    )
    firing = prometheus.wait_for(
        f'ALERTS{{alertname="PulumiStackStalled", alertstate="firing", '
        f'namespace="{tenant.namespace}", name="stuck"}}',
        timeout=60,
    )
    assert firing, "PulumiStackStalled did not fire for the Stalled Stack"
