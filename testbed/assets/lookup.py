"""Finding each binary in envtest's order, building it into the cache only when it is missing.

Provides ``find_kube_binary`` (etcd, kube-apiserver, kubectl), ``find_pulumi`` (the
directory of the CLI with every one of ``PULUMI_BINARIES``), ``find_built`` (an optional
recipe's directory: node, helm, pko, kubernetes, flux), ``find_prometheus_operator_crds``
and ``find_flux_crds`` (module downloads, nothing built), ``ensure_assets``/``Assets`` (the
four the tests always run), ``RECIPES`` (every recipe by name) and ``env_name`` (a
binary's ``TEST_ASSET_*``).

Guarantees: each binary is looked up in this order, and the first hit wins:

1. ``TEST_ASSET_<NAME>`` (a file path; an error when it is not an executable file, and for
   Pulumi when its directory lacks one of ``PULUMI_BINARIES``), or ``TEST_ASSET_<NAME>_DIR``
   for an optional recipe's directory,
2. ``KUBEBUILDER_ASSETS/<name>`` (one directory holding etcd, kube-apiserver, kubectl),
3. this project's cache, keyed by tool version + Go version + recipe hash,
4. the setup-envtest store (``$XDG_DATA_HOME/kubebuilder-envtest/k8s/<ver>-linux-amd64``)
   and, for Pulumi, a CLI on ``PATH`` with every one of ``PULUMI_BINARIES`` beside it,
5. otherwise it is built into the cache, or, with ``build=False``, ``AssetError`` names
   the ``hack/test-assets`` command that builds it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from testbed.assets import flux, kube, otel, pulumi, testfile
from testbed.assets.core import AssetError, cache_root, go_platform
from testbed.assets.pulumi import PULUMI_BINARIES
from testbed.assets.recipe import Recipe
from testbed.assets.store import build as build_recipe
from testbed.assets.store import cached
from testbed.assets.toolchain import Go

PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
# The newest release of the root module that the Go module proxy serves (it serves
# v0.95.x only for the pkg/apis/monitoring submodule, which holds no CRD manifests).
PROMETHEUS_OPERATOR_VERSION = "0.94.1"

RECIPES: dict[str, Recipe] = {
    **kube.RECIPES,
    **pulumi.RECIPES,
    **flux.RECIPES,
    **otel.RECIPES,
    **testfile.RECIPES,
}
"""Every recipe, by the name ``find_built`` and ``hack/test-assets --with`` take."""


@dataclasses.dataclass(frozen=True)
class Assets:
    """Paths of every binary the tests run."""

    etcd: Path
    kube_apiserver: Path
    kubectl: Path
    pulumi_bin: Path  # the directory holding pulumi, its language hosts and shims

    def env(self) -> dict[str, str]:
        """Environment variables that point other tools at these binaries."""
        return {
            "TEST_ASSET_ETCD": str(self.etcd),
            "TEST_ASSET_KUBE_APISERVER": str(self.kube_apiserver),
            "TEST_ASSET_KUBECTL": str(self.kubectl),
            "TEST_ASSET_PULUMI": str(self.pulumi_bin / "pulumi"),
        }


def env_name(binary: str) -> str:
    """``TEST_ASSET_<BINARY>``: the variable naming ``binary``'s path."""
    return "TEST_ASSET_" + "".join(c if c.isalnum() else "_" for c in binary).upper()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _from_environment(binary: str) -> Path | None:
    explicit = os.environ.get(env_name(binary))
    if explicit:
        path = Path(explicit)
        if not _executable(path):
            msg = f"{env_name(binary)}={explicit} is not an executable file"
            raise AssetError(msg)
        return path
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and _executable(Path(assets) / binary):
        return Path(assets) / binary
    return None


def _setup_envtest_store(binary: str) -> Path | None:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    store = Path(data) / "kubebuilder-envtest" / "k8s"
    suffix = "-" + go_platform()
    candidates = sorted(
        (d for d in store.glob(f"*{suffix}") if _executable(d / binary)),
        key=lambda d: _version_tuple(d.name.removesuffix(suffix)),
        reverse=True,
    )
    for directory in [*candidates, Path("/usr/local/kubebuilder/bin")]:
        if _executable(directory / binary):
            return directory / binary
    return None


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.lstrip("v").split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _build(recipe: Recipe) -> Path:
    return build_recipe(recipe, Go.find(cache_root()))


def _find_k8s_binary(binary: str, recipe_key: str, *, build: bool) -> Path:
    found = _from_environment(binary)
    if found:
        return found
    recipe = RECIPES[recipe_key]
    built = cached(recipe)
    if built:
        return built / binary
    found = _setup_envtest_store(binary)
    if found:
        return found
    if not build:
        msg = f"{binary} not found; run hack/test-assets to build it"
        raise AssetError(msg)
    return _build(recipe) / binary


def _pulumi_dir_missing(directory: Path) -> list[str]:
    """Which of PULUMI_BINARIES ``directory`` lacks (``pulumi`` must be executable)."""
    missing = [b for b in PULUMI_BINARIES if not (directory / b).is_file()]
    if "pulumi" not in missing and not _executable(directory / "pulumi"):
        missing.insert(0, "pulumi")
    return missing


def find_kube_binary(binary: str, *, build: bool = True) -> Path:
    """Find (or build) ``etcd``, ``kube-apiserver`` or ``kubectl``."""
    return _find_k8s_binary(binary, "etcd" if binary == "etcd" else "kube", build=build)


def find_pulumi(*, build: bool = True) -> Path:
    """Find (or build) the directory holding ``pulumi`` and the rest of PULUMI_BINARIES.

    Raises:
        AssetError: ``TEST_ASSET_PULUMI``'s directory lacks one of them (the message names
            which), or nothing is found and ``build`` is false or the build fails.
    """
    explicit = os.environ.get("TEST_ASSET_PULUMI")
    if explicit:
        directory = Path(explicit).parent
        missing = _pulumi_dir_missing(directory)
        if missing:
            msg = (
                f"TEST_ASSET_PULUMI={explicit}: its directory {directory} must also hold the "
                f"language hosts and shims the CLI runs from there: {', '.join(missing)} "
                "missing (a Pulumi release's directory has them all; or unset it and run "
                "hack/test-assets to build them)"
            )
            raise AssetError(msg)
        return directory
    recipe = RECIPES["pulumi"]
    built = cached(recipe)
    if built:
        return built / "bin"
    installed = shutil.which("pulumi")
    if installed and not _pulumi_dir_missing(Path(installed).resolve().parent):
        return Path(installed).resolve().parent
    if not build:
        msg = "pulumi not found; run hack/test-assets to build it"
        raise AssetError(msg)
    return _build(recipe) / "bin"


def find_prometheus_operator_crds(*, download: bool = True) -> Path:
    """Find (or download) the directory of the Prometheus Operator's CRD manifests.

    They are ``example/prometheus-operator-crd/*.yaml`` of the operator's root Go module,
    fetched with ``go mod download`` into this project's module cache (nothing is built).
    """
    module = f"{PROMETHEUS_OPERATOR_MODULE}@v{PROMETHEUS_OPERATOR_VERSION}"
    crds = Path("example", "prometheus-operator-crd")
    cached_crds = cache_root() / "go" / "mod" / module / crds
    if cached_crds.is_dir():
        return cached_crds
    if not download:
        msg = f"{module} is not in the module cache (downloading it needs Go and its proxy)"
        raise AssetError(msg)
    cache_root().mkdir(parents=True, exist_ok=True)
    go = Go.find(cache_root())
    return Path(str(go.download(module, cache_root())["Dir"])) / crds


def find_flux_crds(*, download: bool = True) -> tuple[Path, ...]:
    """Find (or download) the CRD manifests the Flux source-controller needs installed.

    They are ``FLUX_SOURCE_CRDS`` of ``config/crd/bases/`` in the source-controller's Go
    module at the pinned version, the one the ``flux`` recipe builds (which downloads it),
    fetched with ``go mod download`` into this project's module cache when missing.

    Raises:
        AssetError: the module is not cached and ``download`` is false (or Go is absent).
    """
    module = f"{flux.FLUX_SOURCE_CONTROLLER_MODULE}@v{flux.FLUX_SOURCE_CONTROLLER_VERSION}"
    directory = cache_root() / "go" / "mod" / module
    if not (directory / flux.FLUX_CRD_DIR).is_dir():
        if not download:
            msg = f"{module} is not in the module cache (downloading it needs Go and its proxy)"
            raise AssetError(msg)
        cache_root().mkdir(parents=True, exist_ok=True)
        directory = flux.module_dir(Go.find(cache_root()), module)
    return tuple(directory / flux.FLUX_CRD_DIR / name for name in flux.FLUX_SOURCE_CRDS)


def find_built(name: str, *, build: bool = True) -> Path:
    """Find (or build) the directory of an optional recipe: node, helm, pko, kubernetes, flux.

    These are built only where they are needed: the node's for the node tests (run as root
    with containerd installed; see ``hack/install-node``), helm for the chart tests, the
    Kubernetes provider (``pulumi-resource-kubernetes``) for the tests of users' programs,
    the Flux source-controller for the tests that fetch its artifacts, and the Pulumi
    Kubernetes Operator v1 for ``make bench`` alone.

    Raises:
        AssetError: not built and ``build`` is false (the message names the command), or
            the build failed.
    """
    recipe = RECIPES[name]
    override = os.environ.get(env_name(recipe.name) + "_DIR")
    if override:
        return Path(override)
    built = cached(recipe)
    if built:
        return built
    if not build:
        msg = f"{recipe.name} binaries not found; run hack/test-assets --with {name}"
        raise AssetError(msg)
    return _build(recipe)


def ensure_assets(*, build: bool = True) -> Assets:
    """Find every binary, building the missing ones when ``build`` is true."""
    return Assets(
        etcd=find_kube_binary("etcd", build=build),
        kube_apiserver=find_kube_binary("kube-apiserver", build=build),
        kubectl=find_kube_binary("kubectl", build=build),
        pulumi_bin=find_pulumi(build=build),
    )
