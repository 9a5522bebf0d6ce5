"""The chart installed with ``helm install --wait`` onto the real single-node cluster.

The operator's image (built as ``make image`` builds it) is imported into the node; the
chart installs it, with Helm's CRD from ``crds/``, into a namespace that enforces the
restricted Pod Security Standard. Helm returns once the Deployment is available; the pod
then takes its Lease and serves /metrics through the chart's Service (kube-proxy).
``helm uninstall`` removes every object the release made and the pods go; the CRD stays,
as Helm documents for ``crds/``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.helm import Helm
from testbed.image import BuiltImage, save_archive
from testbed.node import NodeCluster
from testbed.scraper import get_metrics, scraper_token
from testbed.waits import wait_for
from tests.charts.conftest import CHART

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.helm, pytest.mark.git]

RELEASE = "helm-e2e"  # not the kustomize install's names, should both share a cluster
FULLNAME = f"{RELEASE}-pulumi-stack-operator"
LEASE = "pulumi-stack-operator"  # the operator's default --leader-election-id
INSTALL_TIMEOUT = 300.0


def get(cluster: NodeCluster, *args: str) -> dict[str, Any]:
    """``kubectl get ... -o json``, parsed."""
    result: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return result


@pytest.fixture
def restricted_namespace(node_cluster: NodeCluster) -> Iterator[str]:
    """A fresh namespace enforcing the restricted Pod Security Standard; deleted after."""
    name = f"pso-helm-{secrets.token_hex(3)}"
    node_cluster.kubectl("create", "namespace", name)
    node_cluster.kubectl(
        "label", "namespace", name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/warn=restricted",
    )  # fmt: skip
    try:
        yield name
    finally:
        node_cluster.kubectl(
            "delete", "namespace", name, "--wait=true", "--timeout=180s", timeout=210
        )


def operator_pods(cluster: NodeCluster, namespace: str) -> list[dict[str, Any]]:
    """The release's operator pods, in any phase."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=controller"
    items: list[dict[str, Any]] = get(cluster, "pods", "-n", namespace, "-l", selector)["items"]
    return items


def lease_holder(cluster: NodeCluster, namespace: str) -> str:
    """The Lease's holderIdentity ("" while there is none)."""
    proc = cluster.kubectl("get", "lease", LEASE, "-n", namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return ""
    return str(json.loads(proc.stdout)["spec"].get("holderIdentity") or "")


def metrics(cluster: NodeCluster, namespace: str, token: str | None) -> tuple[int, str]:
    """GET /metrics through the chart's Service (ClusterIP, kube-proxy), HTTPS, as ``token``."""
    service = get(cluster, "service", f"{FULLNAME}-metrics", "-n", namespace)
    return get_metrics(f"https://{service['spec']['clusterIP']}:8443/metrics", token)


def serves_metrics(cluster: NodeCluster, namespace: str, token: str) -> bool:
    """Whether the Service answers ``token`` with the operator's leader gauge at 1."""
    try:
        status, text = metrics(cluster, namespace, token)
    except OSError:
        return False
    leading = 'leader_election_master_status{name="pulumi-stack-operator"} 1.0'
    return status == 200 and leading in text


def test_helm_install_wait_runs_the_operator_and_uninstall_removes_it(
    helm_binary: Path,
    node_cluster: NodeCluster,
    operator_image: BuiltImage,
    restricted_namespace: str,
    tmp_path: Path,
) -> None:
    """Installed with --wait: available, Lease taken, /metrics served; uninstalled: gone."""
    namespace = restricted_namespace
    started = time.monotonic()
    node_cluster.load_image(save_archive(operator_image), operator_image.ref)
    print(f"image loaded in {time.monotonic() - started:.1f}s")  # noqa: T201
    repository, _, tag = operator_image.ref.rpartition(":")
    values = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"}}
    helm = Helm(helm_binary, node_cluster.kubeconfig, tmp_path / "helm")
    try:
        started = time.monotonic()
        helm.install(RELEASE, CHART, namespace, values, wait=True, timeout=INSTALL_TIMEOUT)
        print(f"helm install --wait returned in {time.monotonic() - started:.1f}s")  # noqa: T201
        deployment = get(node_cluster, "deployment", FULLNAME, "-n", namespace)
        assert deployment["status"].get("availableReplicas") == 1
        crd = get(node_cluster, "crd", "stacks.pulumi.com")
        assert crd["spec"]["group"] == "pulumi.com"
        [pod] = operator_pods(node_cluster, namespace)
        assert pod["spec"]["containers"][0]["image"] == operator_image.ref
        pod_name = pod["metadata"]["name"]
        wait_for(
            lambda: lease_holder(node_cluster, namespace).startswith(f"{pod_name}_"),
            f"{pod_name} to hold the Lease",
            120,
        )
        with node_cluster.api_client() as api:
            reader = scraper_token(api, namespace, "scraper", f"{FULLNAME}-metrics-reader")
            stranger = scraper_token(api, namespace, "stranger")
        wait_for(
            lambda: serves_metrics(node_cluster, namespace, reader), "/metrics via the Service", 60
        )
        # Secure by default: no token 401, a token without the reader role 403.
        assert metrics(node_cluster, namespace, None)[0] == 401
        assert metrics(node_cluster, namespace, stranger)[0] == 403
    finally:
        reader_binding = f"{FULLNAME}-metrics-reader-{namespace}-scraper"
        node_cluster.kubectl("delete", "clusterrolebinding", reader_binding, "--ignore-not-found")
        started = time.monotonic()
        helm.uninstall(RELEASE, namespace, timeout=INSTALL_TIMEOUT)
        print(f"helm uninstall --wait returned in {time.monotonic() - started:.1f}s")  # noqa: T201
    for kind in ("deployment", "service", "serviceaccount", "role", "rolebinding"):
        assert (
            get(node_cluster, kind, "-n", namespace, "-l", "app.kubernetes.io/instance")["items"]
            == []
        ), kind
    for kind in ("clusterrole", "clusterrolebinding"):
        proc = node_cluster.kubectl("get", kind, FULLNAME, check=False)
        assert proc.returncode != 0, f"{kind} {FULLNAME} survived the uninstall"
    wait_for(lambda: not operator_pods(node_cluster, namespace), "the pods to go", 120)
    get(node_cluster, "crd", "stacks.pulumi.com")  # kept: Helm never deletes crds/
