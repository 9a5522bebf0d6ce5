"""The labels and annotations a Stack may put on its run pods, and the keys it may not.

Role: read ``workspaceTemplate.metadata`` and ``workspaceTemplate.spec.podTemplate.metadata``
into the run pod's labels and annotations, refusing every key that something other than
the Stack's own tooling reads as an instruction about the pod: the kubelet and the
container runtime (AppArmor, seccomp, OCI runtime annotations), admission plugins and
policy engines (Pod Security, OpenShift SCCs), node autoscalers (eviction), CNI plugins
(extra networks, fixed IPs), service meshes and injectors (sidecars, traffic capture,
identity), cloud identity webhooks, and the runner itself.

Allowed: any key outside ``RESERVED_DOMAINS`` and without a reserved prefix, such as
``team``, ``app``, ``example.com/cost-center``, and the few reserved keys in
``ALLOWED_KEYS``: the recommended ``app.kubernetes.io/{name,instance,version,part-of}``
labels and the node autoscalers' "do not evict" annotations.

Guarantees: a refused key raises ``SpecError`` on its own path, naming the owner and what
to do instead; the values of allowed keys are passed through unchanged (label values are
checked as labels).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from reconcile.spec.fields import FieldPath
from reconcile.spec.model import SpecError
from reconcile.spec.names import labels, qualified_name, string_map

RESERVED_DOMAINS: Final = MappingProxyType(
    {
        "kubernetes.io": "Kubernetes (AppArmor, seccomp, Pod Security, kubelet, autoscaler)",
        "k8s.io": "Kubernetes",
        "openshift.io": "OpenShift (security context constraints)",
        "istio.io": "Istio (sidecar injection, traffic capture)",
        "linkerd.io": "Linkerd (proxy injection, skipped ports)",
        "hashicorp.com": "Consul and Vault (sidecar and secret injection)",
        "kuma.io": "Kuma (sidecar injection)",
        "openservicemesh.io": "Open Service Mesh",
        "dapr.io": "Dapr (sidecar injection)",
        "cilium.io": "Cilium (network policy, proxy visibility)",
        "projectcalico.org": "Calico (IP addresses, network policy)",
        "cncf.io": "Multus (extra network interfaces)",
        "multus-cni.io": "Multus",
        "opentelemetry.io": "OpenTelemetry (sidecar and agent injection)",
        "jaegertracing.io": "Jaeger (sidecar injection)",
        "datadoghq.com": "Datadog (agent injection)",
        "amazonaws.com": "AWS (kube2iam/kiam IAM roles, EKS)",
        "azure.workload.identity": "Azure workload identity",
        "karpenter.sh": "Karpenter (disruption)",
        "pulumi.com": "the Pulumi Kubernetes Operator",
        "pulumi-stack-operator.dev": "this operator's runner",
    }
)
"""Label and annotation prefixes (with their subdomains) a Stack may not set, and whose."""

ALLOWED_KEYS: Final = frozenset(
    {
        *(f"app.kubernetes.io/{name}" for name in ("name", "instance", "version", "part-of")),
        # Ask node autoscalers not to evict the pod mid-update (the run's deadline bounds it).
        "cluster-autoscaler.kubernetes.io/safe-to-evict",
        "karpenter.sh/do-not-disrupt",
    }
)
"""Keys under a reserved domain that are allowed: Kubernetes' recommended labels, which
only describe, and the autoscalers' "do not evict" annotations, which protect the run."""

_RUNTIME_PREFIXES: Final = ("io.kubernetes.", "io.containerd.", "run.oci.", "io.katacontainers.")
"""Unprefixed keys that container runtimes (CRI-O, containerd, crun, Kata) read."""


def read_pod_metadata(obj: Mapping[str, Any], path: FieldPath) -> dict[str, Any]:
    """``obj.metadata``'s labels and annotations (each present only when set).

    Raises:
        SpecError: a key refused by ``check_key``, or a malformed key or label value.
    """
    meta = obj.get("metadata")
    meta_path = path / "metadata"
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise SpecError(meta_path, "must be an object with labels and annotations")
    for key in meta:
        if key not in {"labels", "annotations"}:
            problem = "unknown field; remove it (supported: annotations, labels)"
            raise SpecError(meta_path / str(key), problem)
    found = {
        "labels": labels(meta, meta_path, "labels"),
        "annotations": string_map(meta, meta_path, "annotations"),
    }
    for kind, entries in found.items():
        for key in entries:
            entry = (meta_path / kind).entry(key)
            check_key(qualified_name(key, entry), entry)
    return {kind: entries for kind, entries in found.items() if entries}


def check_key(key: str, path: FieldPath) -> None:
    """Refuse ``key`` when something other than the Stack's tooling reads it as policy."""
    prefix, _, name = key.rpartition("/")
    if not prefix:
        if name.startswith(_RUNTIME_PREFIXES):
            problem = "refused: container runtimes read keys of this form; choose another key"
            raise SpecError(path, problem)
        return
    if key in ALLOWED_KEYS:
        return
    for domain, owner in RESERVED_DOMAINS.items():
        if prefix == domain or prefix.endswith(f".{domain}"):
            problem = (
                f"refused: keys under {domain} are read as policy by {owner}, which only "
                "the operator or a cluster admin may set on a run pod; use a key of your own "
                "domain (e.g. example.com/team)"
            )
            raise SpecError(path, problem)
