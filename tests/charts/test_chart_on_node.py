"""The chart installed, upgraded and uninstalled on the real single-node cluster.

The operator's image (built as ``make image`` builds it) is imported into the node; the
chart installs it, with Helm's CRD from ``crds/``, into a namespace that enforces the
restricted Pod Security Standard. Helm returns once the Deployment is available; the pod
then takes its Lease and serves /metrics through the chart's Service (kube-proxy).

Then the user's path of ``docs/installation.md`` under the pod runner (the chart's
default), with the page's own commands: a Stack runs to Ready; the upgrade applies the
chart's ``crds/`` and ``helm upgrade --wait`` replaces the operator's pod, whose successor
takes the Lease and keeps the Stack's verdict without a run, then runs its next change;
deleting the Stack with ``destroyOnFinalize: true`` destroys its resources in a run pod.
``helm uninstall`` removes every object the release made and the pods go; the CRD stays,
as Helm documents for ``crds/``. The operator that ``manifests/default`` deploys for the
node's other tests is scaled to zero meanwhile: two operators would both serve the Stack.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.git_server import GitServer
from testbed.helm import Helm
from testbed.image import BuiltImage, save_archive
from testbed.node import NodeCluster, deployment
from testbed.scraper import get_metrics, scraper_token
from testbed.waits import wait_for
from tests.charts.conftest import CHART
from tests.e2e.conftest import Program, Sentinels, Stacks
from tests.e2e.test_install_lifecycle import DELETE_STACKS, ran, reconciles, shown
from tests.node.fixtures import tenant_namespace
from tests.node.test_pod_runner import pod_stack

pytestmark = [pytest.mark.node, pytest.mark.image, pytest.mark.helm, pytest.mark.git]

RELEASE = "helm-e2e"  # not the kustomize install's names, should both share a cluster
FULLNAME = f"{RELEASE}-pulumi-stack-operator"
LEASE = "pulumi-stack-operator"  # the operator's default --leader-election-id
INSTALL_TIMEOUT = 300.0
# Short periods, as the node's other operators have, so that the Stack's steps take seconds.
ARGS = ["--resync-period=2", "--update-retry-base=1", "--shutdown-timeout=5"]
HELM_CRDS = "kubectl apply --server-side --force-conflicts -f crds/"  # the page's, for Helm


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


@contextlib.contextmanager
def alone(cluster: NodeCluster) -> Iterator[None]:
    """``manifests/default``'s operator, if deployed, scaled to zero meanwhile; back after."""
    found = cluster.kubectl(
        "get", "deployment", deployment.NAME, "-n", deployment.NAMESPACE, check=False
    )
    if found.returncode != 0:
        yield
        return
    scale = ("scale", f"deployment/{deployment.NAME}", "-n", deployment.NAMESPACE)
    cluster.kubectl(*scale, "--replicas=0")
    wait_for(lambda: not deployment.pods(cluster), "the other operator's pods to go", 120)
    try:
        yield
    finally:
        cluster.kubectl(*scale, "--replicas=1")
        deployment.rollout(cluster)


def test_the_chart_installs_upgrades_and_uninstalls_as_the_page_says(
    helm_binary: Path,
    node_cluster: NodeCluster,
    operator_image: BuiltImage,
    restricted_namespace: str,
    node_git: GitServer,
    state: Path,
    sentinels: Sentinels,
    tmp_path: Path,
) -> None:
    """Installed with --wait: served; a Stack Ready; upgraded: kept, then run; uninstalled."""
    namespace = restricted_namespace
    started = time.monotonic()
    node_cluster.load_image(save_archive(operator_image), operator_image.ref)
    print(f"image loaded in {time.monotonic() - started:.1f}s")  # noqa: T201
    repository, _, tag = operator_image.ref.rpartition(":")
    image = {"repository": repository, "tag": tag, "pullPolicy": "Never"}
    helm = Helm(helm_binary, node_cluster.kubeconfig, tmp_path / "helm")
    with alone(node_cluster):
        try:
            started = time.monotonic()
            values = {"image": image, "extraArgs": ARGS}
            helm.install(RELEASE, CHART, namespace, values, wait=True, timeout=INSTALL_TIMEOUT)
            print(f"helm install --wait returned in {time.monotonic() - started:.1f}s")  # noqa: T201
            reader = installed(node_cluster, namespace, operator_image)
            with tenant_namespace(
                node_cluster, "helm-stacks", state, sentinels.passphrase, claim=True
            ) as stacks:
                program = Program(node_git, tmp_path / "checkouts")
                upgrade_with_a_stack(node_cluster, helm, namespace, reader, stacks, program)
        finally:
            reader_binding = f"{FULLNAME}-metrics-reader-{namespace}-scraper"
            node_cluster.kubectl(
                "delete", "clusterrolebinding", reader_binding, "--ignore-not-found"
            )
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


def installed(cluster: NodeCluster, namespace: str, image: BuiltImage) -> str:
    """Check the fresh install: available, Lease held, /metrics served securely.

    Returns a token that may read /metrics.
    """
    deployment_ = get(cluster, "deployment", FULLNAME, "-n", namespace)
    assert deployment_["status"].get("availableReplicas") == 1
    crd = get(cluster, "crd", "stacks.pulumi.com")
    assert crd["spec"]["group"] == "pulumi.com"
    [pod] = operator_pods(cluster, namespace)
    assert pod["spec"]["containers"][0]["image"] == image.ref
    holds_lease(cluster, namespace, pod["metadata"]["name"])
    with cluster.api_client() as api:
        reader = scraper_token(api, namespace, "scraper", f"{FULLNAME}-metrics-reader")
        stranger = scraper_token(api, namespace, "stranger")
    wait_for(lambda: serves_metrics(cluster, namespace, reader), "/metrics via the Service", 60)
    # Secure by default: no token 401, a token without the reader role 403.
    assert metrics(cluster, namespace, None)[0] == 401
    assert metrics(cluster, namespace, stranger)[0] == 403
    return reader


def holds_lease(cluster: NodeCluster, namespace: str, pod_name: str) -> None:
    """Wait until ``pod_name`` holds the operator's Lease."""
    wait_for(
        lambda: lease_holder(cluster, namespace).startswith(f"{pod_name}_"),
        f"{pod_name} to hold the Lease",
        120,
    )


def upgrade_with_a_stack(
    cluster: NodeCluster,
    helm: Helm,
    namespace: str,
    reader: str,
    stacks: Stacks,
    program: Program,
) -> None:
    """A Stack Ready; the page's upgrade; the verdict kept, the next change run; destroyed."""
    stacks.create(pod_stack(stacks, "helm-app", program))
    stacks.wait_ready("helm-app", timeout=240)
    earned = ran(stacks, "helm-app")
    [old] = operator_pods(cluster, namespace)

    cluster.kubectl(*shown("## Upgrading", HELM_CRDS, root=CHART))
    started = time.monotonic()
    values = {"image": image_values(old), "extraArgs": ARGS, "podAnnotations": {"upgraded": "1"}}
    helm.upgrade(RELEASE, CHART, namespace, values, timeout=INSTALL_TIMEOUT)
    print(f"helm upgrade --wait returned in {time.monotonic() - started:.1f}s")  # noqa: T201
    wait_for(
        lambda: (
            [p["metadata"]["uid"] for p in operator_pods(cluster, namespace)]
            not in ([], [old["metadata"]["uid"]])
        ),
        "the old operator pod to be replaced",
        INSTALL_TIMEOUT,
    )
    wait_for(lambda: len(operator_pods(cluster, namespace)) == 1, "one operator pod", 120)
    [new] = operator_pods(cluster, namespace)
    assert new["metadata"]["annotations"]["upgraded"] == "1"
    holds_lease(cluster, namespace, new["metadata"]["name"])
    wait_for(
        lambda: reconciles(metrics(cluster, namespace, reader)[1]) >= 2,
        "two reconciles by the new operator",
        120,
    )
    assert ran(stacks, "helm-app") == earned, "the upgraded operator ran the Stack again"

    # The page's uninstall, step 1 then 2 (in this namespace only: the node is shared).
    stacks.patch("helm-app", {"spec": {"destroyOnFinalize": True}})
    stacks.wait(
        "helm-app",
        lambda o: (
            o["status"].get("observedGeneration") == o["metadata"]["generation"]
            and ran(stacks, "helm-app") != earned
        ),
        "the change run by the new operator",
        240,
    )
    stacks.wait_ready("helm-app", timeout=240)
    delete = shown("## Uninstalling", DELETE_STACKS)
    scoped = [a for a in delete if a != "--all-namespaces"]
    cluster.kubectl(*scoped, "-n", stacks.namespace, "--timeout=240s", timeout=300)
    assert stacks.listing() == []
    assert not stacks.target("helm-app").exists(), "destroyOnFinalize: true destroyed nothing"


def image_values(pod: dict[str, Any]) -> dict[str, str]:
    """The chart's ``image`` values that run ``pod``'s image again."""
    repository, _, tag = pod["spec"]["containers"][0]["image"].rpartition(":")
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}
