"""Run pod labels and annotations: anything of the Stack's own, nothing read as policy."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.spec import parse_spec
from reconcile.spec.pod_metadata import ALLOWED_KEYS, RESERVED_DOMAINS
from tests.reconcile.spec.helpers import NS, assert_refused, base

TEMPLATE = "spec.workspaceTemplate"
POD = f"{TEMPLATE}.spec.podTemplate"


def with_metadata(where: str, kind: str, key: str, value: str = "x") -> dict[str, Any]:
    """A spec whose ``where`` metadata (``template`` or ``pod``) sets ``kind`` ``key``."""
    metadata = {kind: {key: value}}
    if where == "template":
        return base(workspaceTemplate={"metadata": metadata})
    return base(workspaceTemplate={"spec": {"podTemplate": {"metadata": metadata}}})


POLICY_KEYS = [
    "container.apparmor.security.beta.kubernetes.io/pulumi",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/pulumi",
    "pod-security.kubernetes.io/enforce",
    "kubernetes.io/egress-bandwidth",
    "node.k8s.io/anything",
    "sidecar.istio.io/inject",
    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    "config.linkerd.io/skip-outbound-ports",
    "vault.hashicorp.com/role",
    "k8s.v1.cni.cncf.io/networks",
    "cni.projectcalico.org/ipAddrs",
    "iam.amazonaws.com/role",
    "azure.workload.identity/use",
    "openshift.io/scc",
    "pulumi-stack-operator.dev/stack-uid",
    "io.kubernetes.cri-o.Devices",
    "io.containerd.runc.v2.group",
    "run.oci.keep_original_groups",
]


@pytest.mark.parametrize("where", ["template", "pod"])
@pytest.mark.parametrize("kind", ["annotations", "labels"])
@pytest.mark.parametrize("key", POLICY_KEYS)
def test_keys_read_as_policy_are_refused(where: str, kind: str, key: str) -> None:
    """Refused on the key's own path, saying whose and what to use instead."""
    path = f"{TEMPLATE if where == 'template' else POD}.metadata.{kind}[{key}]"
    error = assert_refused(with_metadata(where, kind, key), path, "refused")
    assert "use a key of your own" in error.problem or "runtimes" in error.problem


@pytest.mark.parametrize(
    "key",
    [
        "team",
        "app",
        "example.com/cost-center",
        "app.kubernetes.io/name",
        "app.kubernetes.io/part-of",
        "cluster-autoscaler.kubernetes.io/safe-to-evict",
        "karpenter.sh/do-not-disrupt",
        "kubernetes.io.example.com/team",  # a domain of its own, not under kubernetes.io
    ],
)
def test_the_stacks_own_keys_and_the_few_allowed_ones_pass(key: str) -> None:
    """Keys outside the reserved domains, and ``ALLOWED_KEYS``, reach the overrides."""
    spec = parse_spec(with_metadata("pod", "annotations", key, "v"), NS)
    assert spec.workspace.overrides()["annotations"] == {key: "v"}


def test_the_reserved_domains_cover_every_refused_example() -> None:
    """Each prefixed example is refused by a listed domain (the table is the contract)."""
    for key in POLICY_KEYS:
        prefix = key.rpartition("/")[0]
        if prefix and key not in ALLOWED_KEYS:
            assert any(
                prefix == domain or prefix.endswith(f".{domain}") for domain in RESERVED_DOMAINS
            ), key


def test_metadata_must_be_an_object_of_labels_and_annotations() -> None:
    """Unknown metadata fields and non-objects are refused, naming the field."""
    assert_refused(
        base(workspaceTemplate={"metadata": {"name": "x"}}),
        f"{TEMPLATE}.metadata.name",
        "unknown field",
    )
    assert_refused(base(workspaceTemplate={"metadata": "x"}), f"{TEMPLATE}.metadata", "object")
