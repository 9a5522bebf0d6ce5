"""A tenant namespace on the node for the operator's run pods, and what its Stacks mount.

Used by the e2e scenarios under ``--runner=pod`` (``tests.e2e.beds``, ``tests.e2e.
test_programs``) and by the pod runner's benchmark (``bench.pods``):

- ``apply_stack_crd`` applies the Stack CRD and the Program CRD beside it, Established;
- ``state_namespace`` makes a fresh namespace whose claim is bound to a host directory (a
  hostPath PersistentVolume: the Stacks' ``file://`` backend outlives every run pod) and
  returns once the namespace's ``default`` ServiceAccount exists (pods can only be
  created then);
- ``cache_claim`` adds the claim run pods mount as their dependency cache
  (``CACHE_CLAIM``, the operator's ``--run-cache-claim`` default);
- ``with_env`` adds variables to a Stack's ``workspaceTemplate`` (a package mirror's).

The namespaces and volumes are deleted afterwards, without waiting.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from testbed.control_plane import wait_established
from testbed.finalizers import release_finalizers
from testbed.node import deployment
from testbed.node.cluster import NodeCluster
from testbed.node.deployment import UID
from testbed.waits import wait_for

CACHE_CLAIM = "pulumi-cache"  # the operator's --run-cache-claim default
SERVICE_ACCOUNT_TIMEOUT = 60.0


def apply_stack_crd(cluster: NodeCluster, crd: Path) -> None:
    """Apply the Stack CRD and the Program CRD beside it on the node; wait until Established."""
    for path in (crd, crd.with_name("programs.pulumi.com.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    wait_established(cluster.kubectl, "stacks.pulumi.com")
    wait_established(cluster.kubectl, "programs.pulumi.com")


@contextlib.contextmanager
def state_namespace(
    cluster: NodeCluster, state: Path, claim: str, prefix: str = "e2e"
) -> Iterator[str]:
    """A fresh namespace ``<prefix>-<random>`` with the claim ``claim`` on ``state``.

    Pods of a namespace can only be created once its ``default`` ServiceAccount exists
    (kube-controller-manager makes it), so this returns only then. The namespace and the
    volume are deleted afterwards, without waiting.
    """
    namespace = f"{prefix}-{secrets.token_hex(4)}"
    volume = f"{prefix}-state-{namespace}"
    manifest = state.parent / f"{namespace}-state.yaml"
    objects = deployment.state_volume(state, namespace, claim, volume)
    manifest.write_text(yaml.safe_dump_all([_namespace(namespace), *objects]))
    cluster.kubectl("apply", "-f", str(manifest))
    try:
        with cluster.api_client() as api:
            wait_for_service_account(client.CoreV1Api(api), namespace)
        yield namespace
    finally:
        with cluster.api_client() as api:
            release_finalizers(api, namespace)  # its operator is gone: or it never goes
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        cluster.kubectl("delete", "pv", volume, "--wait=false")


@contextlib.contextmanager
def cache_claim(cluster: NodeCluster, namespace: str, directory: Path) -> Iterator[None]:
    """The claim ``CACHE_CLAIM`` in ``namespace`` on a hostPath volume at ``directory``.

    ``directory`` is made here, owned by the run pods' uid.
    """
    directory.mkdir(parents=True)
    os.chown(directory, UID, UID)
    volume = f"{CACHE_CLAIM}-{namespace}"
    objects = deployment.state_volume(directory, namespace, CACHE_CLAIM, volume)
    manifest = directory.parent / f"{volume}.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    cluster.kubectl("apply", "-f", str(manifest))
    try:
        yield
    finally:
        cluster.kubectl("delete", "pv", volume, "--wait=false")


def with_env(workspace: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``workspace`` (a workspaceTemplate) with ``env`` added to its ``spec.env``."""
    spec = dict(workspace.get("spec") or {})
    spec["env"] = [*spec.get("env", []), *({"name": k, "value": v} for k, v in env.items())]
    return {**workspace, "spec": spec}


def wait_for_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """Return once ``namespace``'s ``default`` ServiceAccount exists.

    kube-controller-manager makes it some time after the namespace; until then the API
    server refuses every pod of the namespace (``serviceaccount "default" not found``).
    """
    wait_for(
        lambda: _has_service_account(core, namespace),
        f"the default ServiceAccount of {namespace}",
        SERVICE_ACCOUNT_TIMEOUT,
    )


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _has_service_account(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
