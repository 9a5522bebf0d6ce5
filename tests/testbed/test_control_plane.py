"""The control plane fixture runs a real etcd + kube-apiserver, with RBAC, on loopback."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from testbed.assets import K8S_VERSION
from testbed.control_plane import ControlPlane, wait_established

pytestmark = pytest.mark.integration


def test_watch_sees_a_created_configmap(api_client: client.ApiClient, namespace: str) -> None:
    """A ConfigMap created through the API arrives on a watch opened before it."""
    core = client.CoreV1Api(api_client)
    listed = core.list_namespaced_config_map(namespace)
    assert listed.metadata is not None
    since = listed.metadata.resource_version
    events: queue.Queue[tuple[str, str]] = queue.Queue()
    stream = watch.Watch()

    def consume() -> None:
        # stream.stop() below closes the socket under the reader: that ends the loop.
        with contextlib.suppress(ProtocolError):
            for event in stream.stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=since,
                timeout_seconds=30,
            ):
                events.put((event["type"], event["object"].metadata.name))

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="smoke"), data={"k": "v"})
    core.create_namespaced_config_map(namespace, body)
    try:
        assert events.get(timeout=20) == ("ADDED", "smoke")
    finally:
        stream.stop()
        consumer.join(timeout=10)


def test_kubectl_reports_the_stamped_version(control_plane: ControlPlane) -> None:
    """Both kube-apiserver and kubectl are the version-stamped builds."""
    server = json.loads(control_plane.kubectl("get", "--raw", "/version").stdout)
    assert server["gitVersion"] == f"v{K8S_VERSION}"
    versions = json.loads(control_plane.kubectl("version", "--output=json").stdout)
    assert versions["clientVersion"]["gitVersion"] == f"v{K8S_VERSION}"


def test_rbac_denies_a_user_without_bindings(control_plane: ControlPlane, namespace: str) -> None:
    """RBAC is on: a client certificate without groups gets 403, not data."""
    kubeconfig = control_plane.add_user("nobody", [])
    with control_plane.api_client(kubeconfig) as api, pytest.raises(client.ApiException) as denied:
        client.CoreV1Api(api).list_namespaced_config_map(namespace)
    assert denied.value.status == 403
    message = json.loads(str(denied.value.body))["message"]
    assert 'User "nobody" cannot list resource "configmaps"' in message


def test_a_crd_without_conditions_yet_is_waited_for() -> None:
    """``wait_established`` keeps polling while the CRD has no condition (kubectl wait fails)."""
    answers = iter(["", "False", "True"])
    calls: list[tuple[str, ...]] = []

    def kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert not check
        calls.append(args)
        return subprocess.CompletedProcess(list(args), 0, next(answers), "")

    wait_established(kubectl, "stacks.pulumi.com", timeout=30)
    assert len(calls) == 3
    assert calls[0][:2] == ("get", "crd/stacks.pulumi.com")
