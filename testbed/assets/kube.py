"""The Kubernetes family of recipes: etcd, the control plane, the node's components, helm.

Provides the pinned versions (``ETCD_VERSION``, ``K8S_VERSION``, ``HELM_VERSION``…), the
binaries each recipe yields (``KUBE_BINARIES``, ``NODE_BINARIES``) and ``RECIPES``: ``etcd``
(etcd's server module), ``kube`` (kube-apiserver and kubectl), ``node`` (kubelet,
kube-proxy, kube-controller-manager, kube-scheduler and the sandbox image's ``pause``) and
``helm``.

Guarantees: everything is compiled with ``go build`` from modules the Go module proxy
serves (``pause`` with gcc from the kubernetes module's source), version-stamped as the
projects' own releases are, so that ``--version`` prints the pinned version.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.assets.core import AssetError, log
from testbed.assets.recipe import Recipe
from testbed.assets.toolchain import Go, new_wrapper

ETCD_VERSION = "3.6.16"
K8S_VERSION = "1.36.3"
KUBE_BINARIES = ("kube-apiserver", "kubectl")
# The node's components, built only when the node tests run (``--with node``). ``pause``
# is the sandbox image's one binary, compiled with gcc from the same kubernetes module.
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler", "pause")
HELM_VERSION = "3.22.0"
HELM_K8S_MINOR = "37"  # the client-go minor helm 3.22 is built with


def _build_etcd(go: Go, out: Path) -> None:
    wrapper = new_wrapper(go, f"etcd-{ETCD_VERSION}", "go 1.26.0\n")
    go.run(["get", f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}"], wrapper)
    go.run(
        [
            "build",
            "-trimpath",
            "-ldflags",
            "-s -w",
            "-o",
            str(out / "etcd"),
            "go.etcd.io/etcd/server/v3",
        ],
        wrapper,
    )


def _k8s_ldflags(commit: str) -> str:
    minor = K8S_VERSION.split(".")[1]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps = {
            "gitVersion": f"v{K8S_VERSION}",
            "gitMajor": "1",
            "gitMinor": minor,
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
        }
        if commit:
            stamps["gitCommit"] = commit
        flags += [f"-X {package}.{key}={value}" for key, value in stamps.items()]
    return " ".join(flags)


def _kube_wrapper(go: Go, name: str) -> tuple[Path, Mapping[str, object]]:
    """A wrapper module requiring k8s.io/kubernetes with its staging modules replaced."""
    staging = "v0." + K8S_VERSION.split(".", 1)[1]
    header = "go 1.26.0\n\ngodebug default=go1.26\n"
    wrapper = new_wrapper(go, f"{name}-{K8S_VERSION}", header)
    info = go.download(f"k8s.io/kubernetes@v{K8S_VERSION}", wrapper)
    gomod = go.mod_json(str(info["GoMod"]), wrapper)
    # k8s.io/kubernetes requires its staging modules at the fake v0.0.0 and maps them to
    # ./staging with replace directives, which do not apply to a dependency. Replace each
    # with its published v0.<minor>.<patch> twin, derived from the served go.mod so that
    # a newly added staging module is never missed.
    requires: list[dict[str, str]] = gomod.get("Require") or []  # type: ignore[assignment]
    staged = [r["Path"] for r in requires if r["Version"] == "v0.0.0"]
    for module in staged:
        go.run(["mod", "edit", f"-replace={module}={module}@{staging}"], wrapper)
    log(f"k8s.io/kubernetes v{K8S_VERSION}: {len(staged)} staging modules replaced")
    return wrapper, info


def _build_kube_commands(go: Go, out: Path, name: str, binaries: Sequence[str]) -> Path:
    """Build ``k8s.io/kubernetes/cmd/<binary>`` for each binary; returns the module's dir."""
    wrapper, info = _kube_wrapper(go, name)
    targets = [f"k8s.io/kubernetes/cmd/{b}" for b in binaries]
    go.run(["get", *(f"{t}@v{K8S_VERSION}" for t in targets)], wrapper)
    origin = info.get("Origin")
    commit = str(origin.get("Hash", "")) if isinstance(origin, dict) else ""
    go.run(
        [
            "build",
            "-trimpath",
            "-pgo=off",
            "-ldflags",
            _k8s_ldflags(commit),
            "-o",
            f"{out}/",
            *targets,
        ],
        wrapper,
    )
    return Path(str(info["Dir"]))


def _build_kube(go: Go, out: Path) -> None:
    _build_kube_commands(go, out, "k8s", KUBE_BINARIES)


def _build_node(go: Go, out: Path) -> None:
    module = _build_kube_commands(go, out, "k8s-node", NODE_BINARIES[:-1])
    gcc = shutil.which("gcc")
    if gcc is None:
        msg = "gcc is needed to build the pause binary of the node's sandbox image"
        raise AssetError(msg)
    source = module / "build" / "pause" / "linux" / "pause.c"
    version = f'-DVERSION="v{K8S_VERSION}"'
    log(f"gcc -static {source}")
    subprocess.run(
        [gcc, "-Os", "-static", "-Wall", "-Werror", version, "-o", str(out / "pause"), str(source)],
        check=True,
        capture_output=True,
    )


def _build_helm(go: Go, out: Path) -> None:
    wrapper = new_wrapper(go, f"helm-{HELM_VERSION}", "go 1.26.0\n")
    command = "helm.sh/helm/v3/cmd/helm"
    go.run(["get", f"{command}@v{HELM_VERSION}"], wrapper)
    # Without the Kubernetes version stamps, offline `helm template`/`lint` assume 1.20 and
    # refuse charts that need newer (helm's own build sets them from its client-go).
    stamp = (
        f"-s -w -X helm.sh/helm/v3/internal/version.version=v{HELM_VERSION}"
        f" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
        f" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={HELM_K8S_MINOR}"
        f" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
        f" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={HELM_K8S_MINOR}"
    )
    go.run(["build", "-trimpath", "-ldflags", stamp, "-o", f"{out}/", command], wrapper)


RECIPES = {
    "etcd": Recipe(
        "etcd", ETCD_VERSION, ("etcd",), "", _build_etcd, ("--version",), "etcd:server/v3"
    ),
    "kube": Recipe(
        "k8s",
        K8S_VERSION,
        KUBE_BINARIES,
        "",
        _build_kube,
        ("--version",),
        "k8s:wrapper+staging-replaces+stamp:" + _k8s_ldflags(""),
    ),
    "node": Recipe(
        "k8s-node",
        K8S_VERSION,
        NODE_BINARIES,
        "",
        _build_node,
        ("--version",),
        "k8s-node:wrapper+staging-replaces+stamp+pause-gcc-static:" + _k8s_ldflags(""),
    ),
    "helm": Recipe(
        "helm",
        HELM_VERSION,
        ("helm",),
        "",
        _build_helm,
        ("version",),
        f"helm:v3+k8s-1.{HELM_K8S_MINOR}",
    ),
}
"""The Kubernetes family's recipes, by the name ``find_built``/``--with`` use."""
