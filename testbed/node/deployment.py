"""The operator deployed onto the test node the way users deploy it: ``manifests/default``.

Used by the node tests and by ``make dev ARGS=--node``.

An overlay (a kustomization in a temporary directory) takes ``manifests/default`` as its
one resource and changes only what the test says: always the image (the one ``make image``
built, imported into the node's containerd), and for the Stack scenarios a state volume
and shorter periods. ``kubectl apply --server-side -k`` applies it, as ``make deploy`` does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.node.cluster import NodeCluster
from testbed.scraper import get_metrics, scraper_token
from testbed.waits import wait_for

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "pulumi-stack-operator-system"
NAME = "pulumi-stack-operator"
SERVICE = "pulumi-stack-operator-metrics"
MANIFEST_IMAGE = "ghcr.io/pulumi-stack-operator/pulumi-stack-operator"
SELECTOR = "app.kubernetes.io/name=pulumi-stack-operator,app.kubernetes.io/component=controller"
UID = 65532
STATE = "pulumi-stack-operator-state"
METRICS_PORT = 8443
METRICS_READER = "pulumi-stack-operator-metrics-reader"  # manifests/rbac/metrics_reader_role
SCRAPER = "metrics-scraper"  # a ServiceAccount of the tests, bound to METRICS_READER


def write_overlay(
    directory: Path, image_ref: str, *, args: Sequence[str] = (), state: Path | None = None
) -> Path:
    """Write a kustomization over ``manifests/default``; returns its directory.

    ``image_ref`` replaces the manifests' image. ``args`` are appended to the manager's
    (a later flag wins). ``state`` (a host directory) is mounted at ``/state``: the Stacks'
    file backend, outliving any pod. It comes as a PersistentVolumeClaim bound to a
    hostPath PersistentVolume, since the namespace enforces the restricted Pod Security
    Standard, which forbids a hostPath volume in the pod itself.
    """
    directory.mkdir(parents=True, exist_ok=True)
    name, _, tag = image_ref.rpartition(":")
    operations: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": arg}
        for arg in args
    ]
    if state is not None:
        operations += [
            {
                "op": "add",
                "path": "/spec/template/spec/volumes/-",
                "value": {"name": "state", "persistentVolumeClaim": {"claimName": STATE}},
            },
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/volumeMounts/-",
                "value": {"name": "state", "mountPath": "/state"},
            },
        ]
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "manifests" / "default", directory)],
        "images": [{"name": MANIFEST_IMAGE, "newName": name, "newTag": tag}],
    }
    if state is not None:
        (directory / "state.yaml").write_text(yaml.safe_dump_all(state_volume(state)))
        kustomization["resources"].append("state.yaml")
    if operations:
        kustomization["patches"] = [
            {
                "target": {"kind": "Deployment", "name": NAME},
                "patch": json.dumps(operations),
            }
        ]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def state_volume(
    path: Path, namespace: str = NAMESPACE, claim: str = STATE, volume: str = STATE
) -> list[dict[str, Any]]:
    """A hostPath PersistentVolume ``volume`` for ``path`` and the claim bound to it.

    No provisioner: the volume names its claim (``namespace``/``claim``) and the claim its
    volume. By default, the operator's own state claim.
    """
    claim_ref = {"namespace": namespace, "name": claim}
    persistent = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": claim_ref,
            "hostPath": {"path": str(path), "type": "Directory"},
        },
    }
    bound = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": claim_ref,
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return [persistent, bound]


def state_directory(root: Path) -> Path:
    """``root`` with a ``backend`` directory, both owned by the pods' uid; returns ``root``."""
    (root / "backend").mkdir(parents=True, exist_ok=True)
    for path in (root, root / "backend"):
        os.chown(path, UID, UID)
    return root


def state_workspace(claim: str, mount: str = "/state") -> dict[str, Any]:
    """A Stack's ``workspaceTemplate`` that mounts the claim ``claim`` at ``mount``.

    For ``--runner=pod``: the run pods of the Stack then keep a ``file://`` backend (and
    whatever else the program writes there) on that volume.
    """
    volume = {"name": "state", "persistentVolumeClaim": {"claimName": claim}}
    container = {"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": mount}]}
    return {"spec": {"podTemplate": {"spec": {"volumes": [volume], "containers": [container]}}}}


def deploy(cluster: NodeCluster, overlay: Path, timeout: int = 240) -> None:
    """Apply ``overlay`` server-side; wait for the rollout and for the old pods to be gone.

    ``rollout status`` returns while a replaced pod may still be terminating, and until
    it exits it can still act on a Stack created next (with its old flags).
    """
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
    rollout(cluster, timeout)
    wait_for(
        lambda: not any(p["metadata"].get("deletionTimestamp") for p in pods(cluster)),
        "the replaced operator pods to exit",
        timeout,
        detail=lambda: leaving(cluster),
    )


def leaving(cluster: NodeCluster) -> str:
    """The operator pods being deleted: their container states and their logs' last lines."""
    lines = []
    for pod in pods(cluster):
        if not pod["metadata"].get("deletionTimestamp"):
            continue
        name = pod["metadata"]["name"]
        states = [s.get("state") for s in pod.get("status", {}).get("containerStatuses") or ()]
        log = cluster.kubectl("logs", "-n", NAMESPACE, name, "--tail=30", check=False)
        lines.append(f"pod {name} containers {states}:\n{log.stdout}{log.stderr}")
    return "\n".join(lines) or "no operator pod is being deleted"


def rollout(cluster: NodeCluster, timeout: int = 240) -> None:
    """Wait for the Deployment's rollout (``kubectl rollout status``)."""
    cluster.kubectl(
        "rollout",
        "status",
        f"deployment/{NAME}",
        "-n",
        NAMESPACE,
        f"--timeout={timeout}s",
        timeout=timeout + 30,
    )


def pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    """The operator's pods (any phase), oldest first."""
    out = cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return sorted(items, key=lambda pod: pod["metadata"]["creationTimestamp"])


def ready_pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    """The operator's pods that are Ready and not being deleted."""
    return [
        pod
        for pod in pods(cluster)
        if not pod["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod.get("status", {}).get("conditions", [])
        )
    ]


def lease_holder(cluster: NodeCluster) -> str:
    """The Lease's holderIdentity ("" when nobody holds it)."""
    proc = cluster.kubectl("get", "lease", NAME, "-n", NAMESPACE, "-o", "json", check=False)
    if proc.returncode != 0:
        return ""
    return str(json.loads(proc.stdout)["spec"].get("holderIdentity") or "")


def service_ip(cluster: NodeCluster) -> str:
    """The metrics Service's ClusterIP."""
    out = cluster.kubectl("get", "service", SERVICE, "-n", NAMESPACE, "-o", "json").stdout
    return str(json.loads(out)["spec"]["clusterIP"])


def metrics_url(cluster: NodeCluster) -> str:
    """The operator's /metrics through the Service's ClusterIP (HTTPS, --metrics-secure)."""
    return f"https://{service_ip(cluster)}:{METRICS_PORT}/metrics"


def reader_token(cluster: NodeCluster) -> str:
    """A token of ``SCRAPER``, a ServiceAccount bound to the metrics reader role."""
    with cluster.api_client() as api:
        return scraper_token(api, NAMESPACE, SCRAPER, METRICS_READER)


def metrics_through_service(cluster: NodeCluster) -> str:
    """GET /metrics from the host through the Service (kube-proxy), as an allowed scraper."""
    status, body = get_metrics(metrics_url(cluster), reader_token(cluster))
    assert status == 200, f"/metrics answered {status}: {body}"
    return body


def logs(cluster: NodeCluster) -> str:
    """Every operator container's log, current and previous, of the pods that exist."""
    text = []
    for pod in pods(cluster):
        name = pod["metadata"]["name"]
        for previous in ("--previous=false", "--previous=true"):
            proc = cluster.kubectl("logs", "-n", NAMESPACE, name, previous, check=False)
            text.append(proc.stdout)
    return "\n".join(text)


def container_process(pod: dict[str, Any]) -> int:
    """The host PID of the pod's operator process (found by the pod UID in its cgroup)."""
    uid = pod["metadata"]["uid"]
    variants = (uid, uid.replace("-", "_"))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroup = (entry / "cgroup").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        in_pod = any(v in cgroup for v in variants)
        operator = any(part.endswith(b"pulumi-stack-operator") for part in cmdline[:3])
        if in_pod and operator and not cmdline[0].endswith(b"tini"):  # tini is PID 1
            return int(entry.name)
    msg = f"no operator process found in pod {pod['metadata']['name']}"
    raise AssertionError(msg)


def process_uid(pid: int) -> int:
    """The real uid of a host process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    msg = f"no Uid line for {pid}"
    raise AssertionError(msg)


def root_mount_options(pid: int) -> set[str]:
    """The mount options of a process's root filesystem (as its mount namespace sees it)."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return set(fields[5].split(","))
    msg = f"no root mount for {pid}"
    raise AssertionError(msg)
