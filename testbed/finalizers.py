"""Release the Stacks that would keep a test's namespace from ever being deleted.

A Stack carries the operator's finalizer until an operator removes it. A test stops its
operator before its namespace is deleted, so without this the namespace stays
``Terminating`` for good, and every namespace controller that sees it tries it again and
again (the node cluster's for the rest of its life, a test's kube-controller-manager on a
worker's control plane while it runs): listing and deleting every kind of object in it
for each retry, measured at an eighth of a core for a dozen such namespaces on a node
cluster. With the finalizers gone, one pass deletes the namespace.

Guarantees: only the ``metadata.finalizers`` of ``pulumi.com/v1`` Stacks and Programs in
the namespace change; a namespace without the CRDs, or an object gone meanwhile, is fine.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION = "pulumi.com", "v1"
PLURALS = ("stacks", "programs")


def release_finalizers(api: client.ApiClient, namespace: str) -> int:
    """Remove the finalizers of every Stack and Program in ``namespace``; how many had some."""
    custom = client.CustomObjectsApi(api)
    released = 0
    for plural in PLURALS:
        for obj in _listed(custom, namespace, plural):
            if not obj.get("metadata", {}).get("finalizers"):
                continue
            name = obj["metadata"]["name"]
            body = {"metadata": {"finalizers": None}}
            try:
                custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)
            except ApiException as err:
                if err.status != 404:
                    raise
            released += 1
    return released


def _listed(custom: client.CustomObjectsApi, namespace: str, plural: str) -> list[Any]:
    """The namespace's objects of ``plural`` (none when the CRD is not installed)."""
    try:
        found: Any = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
    except ApiException as err:
        if err.status == 404:
            return []
        raise
    return list(found.get("items") or [])
