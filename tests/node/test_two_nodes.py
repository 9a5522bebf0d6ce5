"""A two-node cluster: pods run on both nodes, reach everything, and the scheduler uses both.

One ``NodeCluster(nodes=2)`` for the module (its own, beside the session's single node),
with the test-server image (``testbed/node/testserver``) in both nodes. A pod pinned to
each node (``nodeName``) and a Service in front of each serve the checks of addressing:
every pod reaches the API server, a server on node 1's ``host_ip`` and the other node's
pod (directly and through its ClusterIP), the host reaches both pods, and a pod still
has no way out of the cluster. Deployments asking for a topology spread or a pod
anti-affinity land on both nodes; a fault injected into node 2 leaves node 1 alone. The
last test stops the cluster: nothing may be left.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import ipaddress
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from testbed.node import NodeCluster
from testbed.node.faults import NodeFaults
from testbed.node.images import HTTP_SERVER_IMAGE, http_server_archive
from testbed.node.tenancy import wait_for_service_account
from testbed.waits import wait_for
from tests.node.cluster import (
    logs_reported,
    marker_server,
    node_binaries_or_skip,
    operator_archive,
)

# Both nodes start with the operator's image in: built with podman, labelled from git.
pytestmark = [pytest.mark.node, pytest.mark.integration, pytest.mark.image, pytest.mark.git]

_TIMEOUT = 90.0
_NOT_YET = (OSError, client.ApiException)  # what a server or pod still starting raises
_HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module")
def two_nodes(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[NodeCluster]:
    """A running two-node cluster with the test-server image on both nodes.

    Both start with the operator's image in (seeded, as the session's node is), which
    ``test_lost_node``'s operator runs.
    """
    binaries = node_binaries_or_skip()
    root = tmp_path_factory.mktemp("two-nodes")
    cluster = NodeCluster(root, binaries, nodes=2, images=operator_archive(request))
    with logs_reported(cluster):
        started = time.monotonic()
        cluster.start()  # stops what it started when it fails
        print(f"two-node cluster ready in {time.monotonic() - started:.1f}s")  # noqa: T201
        try:
            cluster.load_image(http_server_archive(root / "test-server.tar"), HTTP_SERVER_IMAGE)
            yield cluster
        finally:
            cluster.stop()  # done already by the last test, unless it did not run
            assert cluster.leftovers() == []


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:  # noqa: S310 - test URLs
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _answered(url: str) -> tuple[int, str] | None:
    """``_get(url)`` once the test server relayed an answer (not its own 502)."""
    answer = _get(url)
    return answer if answer[0] != 502 else None


def _container(image: str) -> client.V1Container:
    probe = client.V1Probe(
        http_get=client.V1HTTPGetAction(path="/healthz", port=8080), period_seconds=1
    )
    return client.V1Container(
        name="web",
        image=image,
        image_pull_policy="Never",
        ports=[client.V1ContainerPort(container_port=8080)],
        readiness_probe=probe,
    )


def _ready(pod: Any) -> bool:
    conditions = pod.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


@dataclasses.dataclass(frozen=True)
class Pinned:
    """Pod ``web-<i>`` on node ``i`` (1, 2), each behind the ClusterIP Service ``web-<i>``."""

    namespace: str
    pods: dict[int, Any]  # node index -> the Ready pod
    services: dict[int, str]  # node index -> the Service's ClusterIP

    def url(self, index: int, path: str = "/") -> str:
        """``path`` of pod ``web-<index>``, by its Pod IP."""
        return f"http://{self.pods[index].status.pod_ip}:8080{path}"

    def relay(self, index: int, target: str) -> tuple[int, str]:
        """Pod ``web-<index>`` GETs ``target`` and relays status and body."""
        return _get(self.url(index, f"/get?url={urllib.parse.quote(target, safe='')}"))


@pytest.fixture(scope="module")
def pinned(two_nodes: NodeCluster) -> Pinned:
    """A test-server pod on each node (``nodeName``) and a Service per pod; all Ready."""
    namespace = f"two-{secrets.token_hex(3)}"
    with two_nodes.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        wait_for_service_account(core, namespace)  # until then its pods are refused
        services: dict[int, str] = {}
        for index, node in enumerate(two_nodes.node_names, start=1):
            labels = {"pin": str(index)}
            meta = client.V1ObjectMeta(name=f"web-{index}", namespace=namespace, labels=labels)
            spec = client.V1PodSpec(
                node_name=node,
                containers=[_container(HTTP_SERVER_IMAGE)],
                termination_grace_period_seconds=1,
            )
            core.create_namespaced_pod(namespace, client.V1Pod(metadata=meta, spec=spec))
            port = client.V1ServicePort(port=80, target_port=8080)
            service = client.V1Service(
                metadata=client.V1ObjectMeta(name=f"web-{index}", namespace=namespace),
                spec=client.V1ServiceSpec(selector=labels, ports=[port]),
            )
            created: Any = core.create_namespaced_service(namespace, service)
            services[index] = created.spec.cluster_ip

        def ready(index: int) -> Any:
            pod = core.read_namespaced_pod(f"web-{index}", namespace)
            return pod if _ready(pod) else None

        pods = {
            index: wait_for(
                functools.partial(ready, index),
                f"web-{index} Ready",
                _TIMEOUT,
                0.2,
                ignoring=_NOT_YET,
            )
            for index in services
        }
    return Pinned(namespace, pods, services)


def test_each_node_registers_with_its_own_address_and_pod_range(two_nodes: NodeCluster) -> None:
    """Both Nodes are Ready, each with its slot's InternalIP and its Pod range as podCIDR."""
    with two_nodes.api_client() as api:
        listed: Any = client.CoreV1Api(api).list_node()
    nodes = {n.metadata.name: n for n in listed.items}
    assert sorted(nodes) == sorted(two_nodes.node_names)
    for member in two_nodes.members:
        node: Any = nodes[member.name]
        assert node.spec.pod_cidr == member.pod_cidr
        assert node.spec.pod_cidrs == [member.pod_cidr]
        addresses = {a.type: a.address for a in node.status.addresses}
        assert addresses["InternalIP"] == member.node_ip
        assert node.metadata.labels["kubernetes.io/hostname"] == member.name
        assert not node.spec.taints
        assert _ready(node)
    first, second = (ipaddress.ip_network(m.pod_cidr) for m in two_nodes.members)
    assert not first.overlaps(second)
    assert two_nodes.node_names[0] == two_nodes.node_name  # node 1 keeps the single node's name


def test_a_pod_pinned_to_each_node_turns_ready_with_an_ip_of_that_node(
    two_nodes: NodeCluster, pinned: Pinned
) -> None:
    """Each node's kubelet runs its pod; the pod's IP comes from that node's range."""
    for index, member in enumerate(two_nodes.members, start=1):
        pod = pinned.pods[index]
        assert pod.spec.node_name == member.name
        assert pod.status.phase == "Running"
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(member.pod_cidr)


def test_the_host_reaches_the_pods_of_both_nodes(pinned: Pinned) -> None:
    """The host's route to each node's Pod range reaches its pod directly."""
    for index in (1, 2):
        assert _get(pinned.url(index)) == (200, f"hello from web-{index}")


def test_apiserver_reaches_the_kubelet_of_both_nodes_for_logs(
    two_nodes: NodeCluster, pinned: Pinned
) -> None:
    """``kubectl logs`` works for a pod on either node (the apiserver calls its kubelet)."""
    for index in (1, 2):
        logs = two_nodes.kubectl("logs", f"web-{index}", "-n", pinned.namespace)
        assert "listening on :8080" in logs.stdout


def test_pods_on_both_nodes_call_the_apiserver_through_the_kubernetes_service(
    pinned: Pinned,
) -> None:
    """In-cluster config works on either node: the ClusterIP, the CA, the token, RBAC."""
    path = urllib.parse.quote("/api", safe="")
    for index in (1, 2):
        url = pinned.url(index, f"/apiserver?path={path}")
        status, body = wait_for(
            functools.partial(_answered, url),
            f"the apiserver answers web-{index}",
            _TIMEOUT,
            0.2,
            ignoring=_NOT_YET,
        )
        assert status == 200, body
        assert '"kind":"APIVersions"' in body.replace(" ", "")


def test_pods_on_both_nodes_reach_a_server_on_the_first_nodes_host_ip(
    two_nodes: NodeCluster, pinned: Pinned
) -> None:
    """A server bound to node 1's ``host_ip`` (the git server's address) serves both nodes."""
    with marker_server(two_nodes.host_ip) as (target, marker):
        answers = {index: pinned.relay(index, target) for index in (1, 2)}
    assert answers == {1: (200, marker), 2: (200, marker)}


def test_pods_reach_the_other_nodes_pod_directly_and_through_its_cluster_ip(
    pinned: Pinned,
) -> None:
    """Pod to pod across the nodes (through the host), by Pod IP and by ClusterIP.

    A Service's ClusterIP answers once each node's kube-proxy has programmed the pod's
    endpoint, some time after the pod turned Ready (until then it refuses connections):
    that is waited for, by asking.
    """
    for here, there in ((1, 2), (2, 1)):
        hello = (200, f"hello from web-{there}")
        assert pinned.relay(here, pinned.url(there)) == hello
        service = f"http://{pinned.services[there]}/"
        wait_for(
            functools.partial(_relays, pinned, here, service, hello),
            f"web-{there}'s ClusterIP to answer web-{here} with {hello}",
            _TIMEOUT,
            0.2,
            detail=functools.partial(_answer, pinned, here, service),
        )


def _relays(pinned: Pinned, here: int, target: str, expected: tuple[int, str]) -> bool:
    """Whether pod ``web-<here>`` gets ``expected`` from ``target``."""
    return pinned.relay(here, target) == expected


def _answer(pinned: Pinned, here: int, target: str) -> str:
    """What pod ``web-<here>`` gets from ``target``, for a failure's message."""
    return repr(pinned.relay(here, target))


def test_the_host_reaches_a_cluster_ip_whose_pod_is_on_the_second_node(pinned: Pinned) -> None:
    """The host's Service route goes through node 1's kube-proxy, then on to node 2."""
    assert _get(f"http://{pinned.services[2]}/") == (200, "hello from web-2")


def test_pods_still_have_no_way_out(pinned: Pinned) -> None:
    """The host forwards between the nodes only: elsewhere fails at once, as on one node."""
    started = time.monotonic()
    status, body = pinned.relay(2, "http://203.0.113.1/")  # TEST-NET-3: never reachable
    assert status == 502, body
    assert time.monotonic() - started < 5, body


def _spread_pods(kind: str) -> tuple[int, client.V1PodSpec]:
    """``replicas`` and a pod spec whose placement ``kind`` asks for both nodes."""
    selector = client.V1LabelSelector(match_labels={"app": kind})
    containers = [_container(HTTP_SERVER_IMAGE)]
    if kind == "topology-spread":
        spread = client.V1TopologySpreadConstraint(
            max_skew=1,
            topology_key=_HOSTNAME,
            when_unsatisfiable="DoNotSchedule",
            label_selector=selector,
        )
        spec = client.V1PodSpec(
            containers=containers,
            termination_grace_period_seconds=1,
            topology_spread_constraints=[spread],
        )
        return 4, spec
    term = client.V1PodAffinityTerm(label_selector=selector, topology_key=_HOSTNAME)
    apart = client.V1PodAntiAffinity(required_during_scheduling_ignored_during_execution=[term])
    spec = client.V1PodSpec(
        containers=containers,
        termination_grace_period_seconds=1,
        affinity=client.V1Affinity(pod_anti_affinity=apart),
    )
    return 2, spec


@pytest.mark.parametrize("kind", ["topology-spread", "anti-affinity"])
def test_the_scheduler_places_pods_on_both_nodes(
    two_nodes: NodeCluster, pinned: Pinned, kind: str
) -> None:
    """A Deployment whose pods ask to be spread by hostname runs evenly on both nodes."""
    replicas, pod_spec = _spread_pods(kind)
    labels = {"app": kind}
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name=kind, namespace=pinned.namespace),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels), spec=pod_spec
            ),
        ),
    )
    with two_nodes.api_client() as api:
        client.AppsV1Api(api).create_namespaced_deployment(pinned.namespace, deployment)
        core = client.CoreV1Api(api)

        def ready_pods() -> list[Any] | None:
            listed = core.list_namespaced_pod(pinned.namespace, label_selector=f"app={kind}")
            ready = [p for p in listed.items if _ready(p)]
            return ready if len(ready) == replicas else None

        pods = wait_for(ready_pods, f"{replicas} {kind} pods Ready", _TIMEOUT, 0.2)
    placed = collections.Counter(p.spec.node_name for p in pods)
    per_node = replicas // 2
    assert placed == dict.fromkeys(two_nodes.node_names, per_node)


def test_a_fault_of_the_second_node_leaves_the_first_alone(
    two_nodes: NodeCluster, pinned: Pinned
) -> None:
    """Node 2's kubelet stopped: node 1 heartbeats on, node 2 does not, both pods serve."""
    second = NodeFaults(two_nodes, node=2)
    with second.stopped("kubelet"):
        after = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
        first = NodeFaults(two_nodes)
        wait_for(lambda: first.node_ready(since=after), "node 1's next heartbeat", 30, 0.2)
        assert not second.node_ready(since=after)
        assert _get(pinned.url(1)) == (200, "hello from web-1")
        assert _get(pinned.url(2)) == (200, "hello from web-2")


def test_stop_leaves_nothing_behind(two_nodes: NodeCluster) -> None:
    """Stopping the two-node cluster removes both nodes, the forwarding and the control plane."""
    running = " ".join(two_nodes.leftovers())  # the check sees a live cluster's pieces
    for member in two_nodes.members:
        for piece in (member.network.netns, member.network.host_link, str(member.short_root)):
            assert piece in running
    assert f"--comment pso-{two_nodes.run_id}" in running  # the host's forwarding rules
    started = time.monotonic()
    two_nodes.stop()
    print(f"two-node cluster stopped in {time.monotonic() - started:.1f}s")  # noqa: T201
    assert two_nodes.leftovers() == []
