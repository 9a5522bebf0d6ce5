"""The single-node cluster runs real pods: probes, Services, tokens, the host's servers.

One pod of the test-server image (``testbed/node/testserver``) behind a ClusterIP
Service serves every check; a second cluster, started and stopped in a test, shows that
tear-down leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.node import NodeCluster
from testbed.node.cluster import READY_TIMEOUT
from testbed.node.images import HTTP_SERVER_IMAGE
from testbed.node.tenancy import wait_for_service_account
from testbed.process import ProcessError
from testbed.waits import wait_for
from tests.node.cluster import marker_server, node_binaries_or_skip

pytestmark = [pytest.mark.node, pytest.mark.integration]

_TIMEOUT = 90.0
_NOT_YET = (OSError, client.ApiException)  # what a server or pod still starting raises


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - test URLs
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _web_objects(namespace: str, image: str) -> tuple[client.V1Pod, client.V1Service]:
    labels = {"app": "web"}
    probe = client.V1Probe(
        http_get=client.V1HTTPGetAction(path="/healthz", port=8080),
        period_seconds=1,
    )
    container = client.V1Container(
        name="web",
        image=image,
        image_pull_policy="Never",
        ports=[client.V1ContainerPort(container_port=8080)],
        readiness_probe=probe,
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="web", namespace=namespace, labels=labels),
        spec=client.V1PodSpec(containers=[container], termination_grace_period_seconds=1),
    )
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="web", namespace=namespace),
        spec=client.V1ServiceSpec(
            selector=labels, ports=[client.V1ServicePort(port=80, target_port=8080)]
        ),
    )
    return pod, service


@dataclasses.dataclass(frozen=True)
class Web:
    """The test-server pod ``web`` and its Service, in their own namespace."""

    namespace: str
    url: str  # http://<ClusterIP>


@pytest.fixture(scope="module")
def web(node_cluster: NodeCluster, http_server_image: str) -> Iterator[Web]:
    """A test-server pod with an httpGet readiness probe, Ready, behind a ClusterIP Service."""
    namespace = f"node-{secrets.token_hex(3)}"
    with node_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        wait_for_service_account(core, namespace)  # until then its pods are refused
        pod, service = _web_objects(namespace, http_server_image)
        core.create_namespaced_pod(namespace, pod)
        created: Any = core.create_namespaced_service(namespace, service)
        try:
            wait_for(
                lambda: _ready(core.read_namespaced_pod("web", namespace)),
                "web is Ready",
                _TIMEOUT,
                interval=0.2,
                ignoring=_NOT_YET,
            )
            yield Web(namespace, f"http://{created.spec.cluster_ip}")
        finally:
            core.delete_namespace(namespace)


def _ready(pod: Any) -> bool:
    conditions = pod.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_pod_with_an_http_readiness_probe_turns_ready(node_cluster: NodeCluster, web: Web) -> None:
    """The scheduler binds the pod, kubelet runs it, and its httpGet probe passes."""
    with node_cluster.api_client() as api:
        pod: Any = client.CoreV1Api(api).read_namespaced_pod("web", web.namespace)
    assert _ready(pod)
    assert pod.spec.node_name == node_cluster.node_name
    assert pod.status.phase == "Running"
    [container] = pod.status.container_statuses
    assert container.ready
    assert container.started
    assert container.image == HTTP_SERVER_IMAGE
    assert pod.status.pod_ip.startswith(node_cluster.pod_cidr.rsplit(".", 2)[0] + ".")
    cluster_ip = web.url.removeprefix("http://")
    assert cluster_ip.startswith(node_cluster.service_cidr.rsplit(".", 2)[0] + ".")


def test_apiserver_reaches_the_kubelet_for_logs(node_cluster: NodeCluster, web: Web) -> None:
    """The apiserver reaches kubelet for `kubectl logs` (its client certificate, kubelet authz)."""
    logs = node_cluster.kubectl("logs", "web", "-n", web.namespace)
    assert "listening on :8080" in logs.stdout


def test_cluster_ip_service_reaches_the_pod_from_the_host(web: Web) -> None:
    """The host's route to the Service range goes through kube-proxy's rules to the pod."""
    _, body = wait_for(
        lambda: r if (r := _get(f"{web.url}/"))[0] == 200 else None,
        "the Service answers",
        _TIMEOUT,
        interval=0.2,
        ignoring=_NOT_YET,
    )
    assert body == "hello from web"


def test_mounted_service_account_token_passes_a_token_review(
    node_cluster: NodeCluster, web: Web
) -> None:
    """KCM mints the pod's token; the apiserver authenticates it as the pod's ServiceAccount."""
    _, token = wait_for(
        lambda: r if (r := _get(f"{web.url}/token"))[0] == 200 else None,
        "a token",
        _TIMEOUT,
        interval=0.2,
        ignoring=_NOT_YET,
    )
    review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
    with node_cluster.api_client() as api:
        result: Any = client.AuthenticationV1Api(api).create_token_review(review)
    assert result.status.authenticated, result.status.error
    assert result.status.user.username == f"system:serviceaccount:{web.namespace}:default"


def test_pod_calls_the_apiserver_through_the_kubernetes_service(web: Web) -> None:
    """In-cluster config works: the ClusterIP, the serving cert's SANs, the token, RBAC."""
    path = urllib.parse.quote("/api", safe="")
    status, body = wait_for(
        lambda: r if (r := _get(f"{web.url}/apiserver?path={path}"))[0] != 502 else None,
        "the apiserver answers the pod",
        _TIMEOUT,
        interval=0.2,
        ignoring=_NOT_YET,
    )
    assert status == 200, body
    assert '"kind":"APIVersions"' in body.replace(" ", "")


def test_pod_reaches_a_server_on_the_host_ip(node_cluster: NodeCluster, web: Web) -> None:
    """A server bound to ``host_ip`` on the host (a git or file server) serves pods."""
    with marker_server(node_cluster.host_ip) as (url, marker):
        status, body = _get(f"{web.url}/get?url={urllib.parse.quote(url, safe='')}")
    assert (status, body) == (200, marker)


def test_stop_leaves_nothing_behind(tmp_path: Path) -> None:
    """A second cluster, started beside the session's and stopped, leaves nothing."""
    cluster = NodeCluster(tmp_path / "second", node_binaries_or_skip())
    started = time.monotonic()
    try:
        cluster.start()
        ready = time.monotonic() - started
        assert cluster.kubectl("get", "node", cluster.node_name).returncode == 0
        running = " ".join(cluster.leftovers())  # the check sees a live cluster's pieces
        for piece in ("process", "cgroup", "network namespace", "link", "route", "directory"):
            assert piece in running
    finally:
        stopping = time.monotonic()
        cluster.stop()
        stopped = time.monotonic() - stopping
    print(f"second node cluster: ready in {ready:.1f}s, stopped in {stopped:.1f}s")  # noqa: T201
    assert cluster.leftovers() == []


def test_failed_start_leaves_nothing_behind(tmp_path: Path) -> None:
    """When kubelet cannot run, start() fails fast, says why, and cleans up after itself."""
    real = node_binaries_or_skip()
    broken = tmp_path / "bin"
    broken.mkdir()
    for binary in real.node_dir.iterdir():
        (broken / binary.name).symlink_to(binary)
    (broken / "kubelet").unlink()
    (broken / "kubelet").write_text("#!/bin/sh\necho 'kubelet: broken on purpose' >&2\nexit 3\n")
    (broken / "kubelet").chmod(0o755)
    cluster = NodeCluster(tmp_path / "cluster", dataclasses.replace(real, node_dir=broken))
    started = time.monotonic()
    with pytest.raises(ProcessError, match="supervisor exited") as failed:
        cluster.start()
    assert time.monotonic() - started < READY_TIMEOUT / 2
    assert "kubelet: broken on purpose" in str(failed.value)
    assert cluster.leftovers() == []
