"""Find or build the binaries the test suite and ``make dev`` run.

The tests start a real etcd, kube-apiserver, kubectl and Pulumi CLI (with its Python,
Node.js, Go and YAML language hosts beside it). This package finds each one, in the order
controller-runtime's envtest looks for its assets (``lookup``), and builds what is missing
from published Go modules into a cache outside the repository (``store``). Nothing is
downloaded from a release page: every binary is compiled with ``go build`` from modules
served by the Go module proxy. Standard library only: ``hack/test-assets`` runs it with
the system python3, as ``python3 -m testbed.assets [--print-env] [--no-build]
[--with node|helm|pko|kubernetes|flux|otel|testfile]`` (``cli``); the test fixtures import it.

Its modules, each with its own contract:

- ``core``: ``AssetError``, ``cache_root``, ``go_platform`` and the progress log;
- ``toolchain``: the Go toolchain, run with the cache's module and build caches;
- ``recipe``: what a recipe is, and the hash that keys its builds;
- ``kube``: the Kubernetes family (etcd, kube-apiserver and kubectl, the node's, helm);
- ``pulumi``: the Pulumi family (the CLI and language hosts, the Kubernetes provider, PKO);
- ``flux``: the Flux source-controller;
- ``otel``: the OpenTelemetry Collector (OTLP in, JSON files out);
- ``testfile``: the test bed's own file provider (source in ``testbed/providers``);
- ``store``: the cache: atomic, smoke-checked builds under a per-recipe file lock;
- ``lookup``: the lookup order and the ``find_*`` functions;
- ``cli``: ``hack/test-assets``.

This module re-exports the names the rest of the repository uses; importing it builds
nothing.
"""

from testbed.assets.core import AssetError, cache_root, go_platform
from testbed.assets.flux import (
    FLUX_SOURCE_CONTROLLER_MODULE,
    FLUX_SOURCE_CONTROLLER_VERSION,
    FLUX_SOURCE_CRDS,
)
from testbed.assets.kube import (
    ETCD_VERSION,
    HELM_K8S_MINOR,
    HELM_VERSION,
    K8S_VERSION,
    NODE_BINARIES,
)
from testbed.assets.lookup import (
    PROMETHEUS_OPERATOR_MODULE,
    PROMETHEUS_OPERATOR_VERSION,
    Assets,
    ensure_assets,
    find_built,
    find_flux_crds,
    find_kube_binary,
    find_prometheus_operator_crds,
    find_pulumi,
)
from testbed.assets.pulumi import (
    GO_HOST_SDK_VERSION,
    KUBERNETES_PROVIDER_MODULE,
    KUBERNETES_PROVIDER_MODULE_VERSION,
    KUBERNETES_PROVIDER_VERSION,
    NODEJS_HOST_SDK_VERSION,
    PKO_MODULE,
    PKO_VERSION,
    PULUMI_BINARIES,
    PULUMI_VERSION,
    PYTHON_HOST_SDK_VERSION,
    YAML_HOST_VERSION,
)
from testbed.assets.recipe import RECIPE_REVISION

__all__ = [
    "ETCD_VERSION",
    "FLUX_SOURCE_CONTROLLER_MODULE",
    "FLUX_SOURCE_CONTROLLER_VERSION",
    "FLUX_SOURCE_CRDS",
    "GO_HOST_SDK_VERSION",
    "HELM_K8S_MINOR",
    "HELM_VERSION",
    "K8S_VERSION",
    "KUBERNETES_PROVIDER_MODULE",
    "KUBERNETES_PROVIDER_MODULE_VERSION",
    "KUBERNETES_PROVIDER_VERSION",
    "NODEJS_HOST_SDK_VERSION",
    "NODE_BINARIES",
    "PKO_MODULE",
    "PKO_VERSION",
    "PROMETHEUS_OPERATOR_MODULE",
    "PROMETHEUS_OPERATOR_VERSION",
    "PULUMI_BINARIES",
    "PULUMI_VERSION",
    "PYTHON_HOST_SDK_VERSION",
    "RECIPE_REVISION",
    "YAML_HOST_VERSION",
    "AssetError",
    "Assets",
    "cache_root",
    "ensure_assets",
    "find_built",
    "find_flux_crds",
    "find_kube_binary",
    "find_prometheus_operator_crds",
    "find_pulumi",
    "go_platform",
]
