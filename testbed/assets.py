"""Find or build the binaries the test suite and ``make dev`` run.

The tests start a real etcd, kube-apiserver, kubectl and Pulumi CLI (with its Python,
Node.js, Go and YAML language hosts beside it). This module
finds each one, in the order controller-runtime's envtest looks for its assets,
and builds what is missing from published Go modules into a cache outside the
repository:

1. ``TEST_ASSET_<NAME>`` (a file path, e.g. ``TEST_ASSET_KUBE_APISERVER``),
2. ``KUBEBUILDER_ASSETS/<name>`` (one directory holding etcd, kube-apiserver, kubectl),
3. this project's cache, keyed by tool version + Go version + recipe hash,
4. the setup-envtest store (``$XDG_DATA_HOME/kubebuilder-envtest/k8s/<ver>-linux-amd64``)
   and, for Pulumi, a CLI on ``PATH`` with every one of ``PULUMI_BINARIES`` beside it,
5. otherwise it builds into the cache.

Builds are atomic (a temporary directory, a smoke check, then a rename) and safe when
two runs race (a file lock per recipe). ``hack/test-assets`` builds the missing recipes
longest first, ``TEST_ASSET_JOBS`` at a time (default 1: ``go build`` already uses every
core, and on two cores three builds side by side took 23 minutes where one at a time took
16), every recipe with the one Go build cache, and ends with what each one cost.
Nothing here is downloaded from a release page: every binary is compiled with
``go build`` from modules served by the Go module proxy.

Run it as ``hack/test-assets [--print-env] [--with node|helm|pko|kubernetes]``; the test
fixtures import it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ETCD_VERSION = "3.6.16"
K8S_VERSION = "1.36.3"
# The Python SDK is pinned at 3.272.0 (pyproject.toml). The Go module proxy does not
# serve pkg/v3 at 3.269-3.273; 3.274.1 is the nearest served release, and a CLI newer
# than the SDK is the supported direction of skew.
PULUMI_VERSION = "3.274.1"
# The Python and Node.js language hosts have lived in Go modules of their own
# (github.com/pulumi/pulumi/sdk/{python/cmd/pulumi-language-python,
# nodejs/cmd/pulumi-language-nodejs}/v3) since mid-2023, with no tags of their own, and the
# Go module proxy serves none of their versions. The newest published module that contains
# them is sdk/v3 itself, up to v3.68.0, so both are built from there; they speak the
# LanguageRuntime gRPC protocol to the newer CLI and run programs with the newer SDKs
# (pulumi-language-python-exec, the pulumi package from PyPI, @pulumi/pulumi from npm).
PYTHON_HOST_SDK_VERSION = "3.68.0"
NODEJS_HOST_SDK_VERSION = PYTHON_HOST_SDK_VERSION  # the same module: one wrapper builds both
# The Go host (sdk/v3's go/pulumi-language-go) moved to its own module, likewise never
# served by the proxy, one release earlier: sdk/v3 v3.66.0 is the last that contains it.
GO_HOST_SDK_VERSION = "3.66.0"
# The YAML language host has a module of its own with tags (github.com/pulumi/pulumi-yaml).
YAML_HOST_VERSION = "1.25.0"
# The Kubernetes provider users' programs ask for (SDKs at 4.25.0 request plugin 4.25.0).
# Its Go module lives in the repository's provider/ directory, whose release tags are the
# root's (v4.25.0) and not provider/v4.25.0, so the proxy serves it only by pseudo-version:
# this one is the v4.25.0 tag's commit.
KUBERNETES_PROVIDER_VERSION = "4.25.0"
KUBERNETES_PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"
KUBERNETES_PROVIDER_MODULE_VERSION = "v4.0.0-20260115033456-f47bc2d6f199"

# Bump when a recipe below changes in a way that changes its output.
RECIPE_REVISION = "1"

_K8S_BINARIES = ("kube-apiserver", "kubectl")
# The node's components, built only when the node tests run (``--with node``). ``pause``
# is the sandbox image's one binary, compiled with gcc from the same kubernetes module.
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler", "pause")
HELM_VERSION = "3.22.0"
HELM_K8S_MINOR = "37"  # the client-go minor helm 3.22 is built with
# Built only for ``make bench``'s side-by-side comparison (bench/peer), never for the tests:
# the Pulumi Kubernetes Operator's last v1 release. The proxy serves PKO v1.16.0, but the
# checksum database has no entry for it, so that one module is fetched with GONOSUMDB set;
# its dependencies still verify against its own go.sum.
PKO_MODULE = "github.com/pulumi/pulumi-kubernetes-operator"
PKO_VERSION = "1.16.0"
# The CLI and what it runs from its own directory: the language hosts (found only on PATH
# elsewhere, with a warning on every run) and the dynamic-provider shims.
PULUMI_BINARIES = (
    "pulumi",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-pulumi-python",
    "pulumi-language-nodejs",
    "pulumi-resource-pulumi-nodejs",
    "pulumi-language-go",
    "pulumi-language-yaml",
)


class AssetError(RuntimeError):
    """A binary could not be found or built; the message says what to do."""


def cache_root() -> Path:
    """Return the cache directory, outside any repository checkout."""
    override = os.environ.get("PULUMI_STACK_OPERATOR_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pulumi-stack-operator-testbin"


_building = threading.local()  # .name: the recipe this thread builds, for the log prefix


def _log(message: str) -> None:
    recipe = getattr(_building, "name", "")
    prefix = f"test-assets:{recipe}" if recipe else "test-assets"
    print(f"[{prefix}] {message}", file=sys.stderr, flush=True)


def go_platform() -> str:
    """This machine as Go names it: ``<GOOS>-<GOARCH>`` (``linux-amd64``)."""
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{sys.platform}-{machine}"


# ---------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------


def _env_name(binary: str) -> str:
    return "TEST_ASSET_" + "".join(c if c.isalnum() else "_" for c in binary).upper()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _from_environment(binary: str) -> Path | None:
    explicit = os.environ.get(_env_name(binary))
    if explicit:
        path = Path(explicit)
        if not _executable(path):
            msg = f"{_env_name(binary)}={explicit} is not an executable file"
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


# ---------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Go:
    """The Go toolchain, run with the cache's module and build caches."""

    cache: Path
    version: str

    @classmethod
    def find(cls, cache: Path) -> _Go:
        go = shutil.which("go")
        if go is None:
            msg = (
                "Go is not installed, and a test binary must be built. Install Go 1.26 or "
                "newer (https://go.dev/doc/install), or point KUBEBUILDER_ASSETS / "
                "TEST_ASSET_* at existing binaries (see README)."
            )
            raise AssetError(msg)
        out = subprocess.run(
            [go, "env", "GOVERSION"], check=True, capture_output=True, text=True
        ).stdout.strip()
        return cls(cache=cache, version=out)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            GOMODCACHE=str(self.cache / "go" / "mod"),
            GOCACHE=str(self.cache / "go" / "build"),
            GOFLAGS="-modcacherw",
            GOTOOLCHAIN="local",
            CGO_ENABLED="0",
        )
        return env

    def run(
        self, args: Sequence[str], cwd: Path, extra_env: Mapping[str, str] | None = None
    ) -> str:
        _log("go " + " ".join(args))
        env = {**self.env(), **(extra_env or {})}
        proc = subprocess.run(
            ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            msg = f"go {' '.join(args)} failed in {cwd}:\n{proc.stderr[-4000:]}"
            raise AssetError(msg)
        return proc.stdout

    def download(
        self,
        module: str,
        cwd: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> Mapping[str, object]:
        args = ["mod", "download", "-json", module]
        info: dict[str, object] = json.loads(self.run(args, cwd, extra_env))
        if info.get("Error"):
            msg = f"the Go module proxy does not serve {module}: {info['Error']}"
            raise AssetError(msg)
        return info

    def mod_json(self, gomod: str, cwd: Path) -> Mapping[str, object]:
        result: dict[str, object] = json.loads(self.run(["mod", "edit", "-json", gomod], cwd))
        return result


def _recipe_hash(*parts: str) -> str:
    digest = hashlib.sha256("\0".join((RECIPE_REVISION, *parts)).encode())
    return digest.hexdigest()[:10]


def _new_wrapper(go: _Go, name: str, header: str) -> Path:
    wrapper = go.cache / "wrappers" / name
    shutil.rmtree(wrapper, ignore_errors=True)
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text(f"module local/{name}\n\n{header}")
    return wrapper


def _build_etcd(go: _Go, out: Path) -> None:
    wrapper = _new_wrapper(go, f"etcd-{ETCD_VERSION}", "go 1.26.0\n")
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


def _kube_wrapper(go: _Go, name: str) -> tuple[Path, Mapping[str, object]]:
    """A wrapper module requiring k8s.io/kubernetes with its staging modules replaced."""
    staging = "v0." + K8S_VERSION.split(".", 1)[1]
    header = "go 1.26.0\n\ngodebug default=go1.26\n"
    wrapper = _new_wrapper(go, f"{name}-{K8S_VERSION}", header)
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
    _log(f"k8s.io/kubernetes v{K8S_VERSION}: {len(staged)} staging modules replaced")
    return wrapper, info


def _build_kube_commands(go: _Go, out: Path, name: str, binaries: Sequence[str]) -> Path:
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


def _build_kube(go: _Go, out: Path) -> None:
    _build_kube_commands(go, out, "k8s", _K8S_BINARIES)


def _build_node(go: _Go, out: Path) -> None:
    module = _build_kube_commands(go, out, "k8s-node", NODE_BINARIES[:-1])
    gcc = shutil.which("gcc")
    if gcc is None:
        msg = "gcc is needed to build the pause binary of the node's sandbox image"
        raise AssetError(msg)
    source = module / "build" / "pause" / "linux" / "pause.c"
    version = f'-DVERSION="v{K8S_VERSION}"'
    _log(f"gcc -static {source}")
    subprocess.run(
        [gcc, "-Os", "-static", "-Wall", "-Werror", version, "-o", str(out / "pause"), str(source)],
        check=True,
        capture_output=True,
    )


def _build_helm(go: _Go, out: Path) -> None:
    wrapper = _new_wrapper(go, f"helm-{HELM_VERSION}", "go 1.26.0\n")
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


def _build_pulumi(go: _Go, out: Path) -> None:
    wrapper = _new_wrapper(go, f"pulumi-{PULUMI_VERSION}", "go 1.26.0\n")
    pkg = f"github.com/pulumi/pulumi/pkg/v3@v{PULUMI_VERSION}"
    sdk = f"github.com/pulumi/pulumi/sdk/v3@v{PULUMI_VERSION}"
    pkg_mod = go.mod_json(str(go.download(pkg, wrapper)["GoMod"]), wrapper)
    # Copy pkg/go.mod's replaces that point at published versions; the local
    # "=> ../sdk" one is satisfied by requiring sdk/v3 at the same release.
    replaces: list[dict[str, dict[str, str]]] = pkg_mod.get("Replace") or []  # type: ignore[assignment]
    for replace in replaces:
        if replace["New"].get("Version"):
            old, new = replace["Old"]["Path"], replace["New"]
            go.run(["mod", "edit", f"-replace={old}={new['Path']}@{new['Version']}"], wrapper)
    cli = f"github.com/pulumi/pulumi/pkg/v3/cmd/pulumi@v{PULUMI_VERSION}"
    go.run(["get", pkg, sdk, cli], wrapper)
    sdk_info = go.download(sdk, wrapper)
    ldflags = (
        f"-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v{PULUMI_VERSION}"
    )
    bin_dir = out / "bin"
    bin_dir.mkdir()
    cmd = "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
    tags = "osusergo,grpcnotrace"
    go.run(
        ["build", "-trimpath", "-tags", tags, "-ldflags", ldflags, "-o", f"{bin_dir}/", cmd],
        wrapper,
    )
    _build_language_hosts(go, bin_dir)
    # The dynamic-provider shims and the Python executor are plain files in the sdk
    # module (no go.mod of their own); the module cache holds them read-only.
    sdk_dir = Path(str(sdk_info["Dir"]))
    plain_files = {
        "pulumi-resource-pulumi-python": Path("python", "dist"),
        "pulumi-language-python-exec": Path("python", "cmd"),
        "pulumi-resource-pulumi-nodejs": Path("nodejs", "dist"),
    }
    for name, directory in plain_files.items():
        shutil.copyfile(sdk_dir / directory / name, bin_dir / name)
        (bin_dir / name).chmod(0o755)


def _build_language_hosts(go: _Go, bin_dir: Path) -> None:
    """Build the Python, Node.js, Go and YAML language hosts into ``bin_dir``.

    Each comes from the newest module version the Go module proxy serves that holds it
    (see the ``*_HOST_*VERSION`` constants), stamped with that version.
    """
    sdk = "github.com/pulumi/pulumi/sdk/v3"
    sdk_stamp = f"{sdk}/go/common/version.Version"
    hosts = (
        (
            f"sdk-hosts-{PYTHON_HOST_SDK_VERSION}",
            PYTHON_HOST_SDK_VERSION,
            (
                f"{sdk}/python/cmd/pulumi-language-python",
                f"{sdk}/nodejs/cmd/pulumi-language-nodejs",
            ),
            sdk_stamp,
        ),
        (
            f"go-host-{GO_HOST_SDK_VERSION}",
            GO_HOST_SDK_VERSION,
            (f"{sdk}/go/pulumi-language-go",),
            sdk_stamp,
        ),
        (
            f"yaml-host-{YAML_HOST_VERSION}",
            YAML_HOST_VERSION,
            ("github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml",),
            "github.com/pulumi/pulumi-yaml/pkg/version.Version",
        ),
    )
    for wrapper_name, version, packages, stamp in hosts:
        _build_commands(
            go, bin_dir, wrapper_name, f"v{version}", packages, f"-w -s -X {stamp}=v{version}"
        )


def _build_commands(
    go: _Go, out: Path, wrapper_name: str, version: str, packages: Sequence[str], ldflags: str
) -> None:
    """Build the main ``packages`` of one module at ``version`` into ``out``, in a wrapper."""
    wrapper = _new_wrapper(go, wrapper_name, "go 1.26.0\n")
    go.run(["get", *(f"{package}@{version}" for package in packages)], wrapper)
    go.run(["build", "-trimpath", "-ldflags", ldflags, "-o", f"{out}/", *packages], wrapper)


def _build_pko(go: _Go, out: Path) -> None:
    """Build PKO v1's manager in its own module (its go.mod pins old Kubernetes modules).

    Its metrics listener is hard-wired to 0.0.0.0:8383; the stamp moves it to loopback.
    """
    info = go.download(f"{PKO_MODULE}@v{PKO_VERSION}", go.cache, {"GONOSUMDB": PKO_MODULE})
    source = Path(str(info["Dir"]))
    stamp = f"-s -w -X main.metricsHost=127.0.0.1 -X {PKO_MODULE}/version.Version=v{PKO_VERSION}"
    binary = out / "pulumi-kubernetes-operator"
    go.run(["build", "-trimpath", "-ldflags", stamp, "-o", str(binary), "./cmd/manager"], source)
    shutil.copytree(source / "deploy" / "crds", out / "crds")
    for copied in (out / "crds").iterdir():
        copied.chmod(0o644)


def _build_kubernetes_provider(go: _Go, out: Path) -> None:
    """Build pulumi-resource-kubernetes from its module, as its release does.

    Its ``main.go`` embeds ``schema-embed.json`` and ``terraform-mapping-embed.json``, which
    the release generates (``go generate``: the schema stamped with the version) and the
    module zip lacks. So the command's directory is copied into a wrapper module requiring
    the provider's module, generated there with its own ``generate.go``, then built.
    """
    name = f"kubernetes-{KUBERNETES_PROVIDER_VERSION}"
    wrapper = _new_wrapper(go, name, "go 1.26.0\n")
    module = f"{KUBERNETES_PROVIDER_MODULE}@{KUBERNETES_PROVIDER_MODULE_VERSION}"
    source = Path(str(go.download(module, wrapper)["Dir"])) / "cmd" / "pulumi-resource-kubernetes"
    for file in ("main.go", "generate.go", "schema.json", "terraform-mapping.json"):
        shutil.copyfile(source / file, wrapper / file)
        (wrapper / file).chmod(0o644)
    go.run(["get", module], wrapper)
    # generate.go imports pulumi's codegen, which main.go does not: -mod=mod records the
    # checksums it needs at the versions already selected, without upgrading anything.
    version = {"VERSION": KUBERNETES_PROVIDER_VERSION}
    go.run(["run", "-mod=mod", "generate.go"], wrapper, version)
    go.run(["mod", "tidy"], wrapper)
    stamp = f"{KUBERNETES_PROVIDER_MODULE}/pkg/version.Version={KUBERNETES_PROVIDER_VERSION}"
    binary = out / "pulumi-resource-kubernetes"
    go.run(["build", "-trimpath", "-ldflags", f"-s -w -X {stamp}", "-o", str(binary), "."], wrapper)


@dataclasses.dataclass(frozen=True)
class _Recipe:
    name: str
    version: str
    binaries: tuple[str, ...]
    subdir: str  # where the binaries sit inside the built directory
    build: Callable[[_Go, Path], None]
    smoke: tuple[str, ...]  # argv (after the first binary) to run as a smoke check
    recipe: str
    # What the smoke check must print (default: the version) and may exit with.
    smoke_marker: str = ""
    smoke_codes: tuple[int, ...] = (0,)


_RECIPES = {
    "etcd": _Recipe(
        "etcd", ETCD_VERSION, ("etcd",), "", _build_etcd, ("--version",), "etcd:server/v3"
    ),
    "kube": _Recipe(
        "k8s",
        K8S_VERSION,
        _K8S_BINARIES,
        "",
        _build_kube,
        ("--version",),
        "k8s:wrapper+staging-replaces+stamp:" + _k8s_ldflags(""),
    ),
    "node": _Recipe(
        "k8s-node",
        K8S_VERSION,
        NODE_BINARIES,
        "",
        _build_node,
        ("--version",),
        "k8s-node:wrapper+staging-replaces+stamp+pause-gcc-static:" + _k8s_ldflags(""),
    ),
    "helm": _Recipe(
        "helm",
        HELM_VERSION,
        ("helm",),
        "",
        _build_helm,
        ("version",),
        f"helm:v3+k8s-1.{HELM_K8S_MINOR}",
    ),
    "pulumi": _Recipe(
        "pulumi",
        PULUMI_VERSION,
        PULUMI_BINARIES,
        "bin",
        _build_pulumi,
        ("version",),
        f"pulumi:pkg+sdk+shims:osusergo,grpcnotrace:python+nodejs-hosts@{PYTHON_HOST_SDK_VERSION}"
        f":go-host@{GO_HOST_SDK_VERSION}:yaml-host@{YAML_HOST_VERSION}",
    ),
    # Without WATCH_NAMESPACE the manager logs its version and exits 1.
    "pko": _Recipe(
        "pulumi-kubernetes-operator",
        PKO_VERSION,
        ("pulumi-kubernetes-operator",),
        "",
        _build_pko,
        (),
        "pko:cmd/manager+metrics-loopback+crds",
        smoke_codes=(1,),
    ),
    # The provider has no version flag, and without arguments it serves until killed;
    # -help prints the flags of Pulumi's provider main (Go's flag exits 0 or 2).
    "kubernetes": _Recipe(
        "pulumi-resource-kubernetes",
        KUBERNETES_PROVIDER_VERSION,
        ("pulumi-resource-kubernetes",),
        "",
        _build_kubernetes_provider,
        ("-help",),
        f"kubernetes:{KUBERNETES_PROVIDER_MODULE_VERSION}+generate+stamp",
        smoke_marker="-tracing",
        smoke_codes=(0, 2),
    ),
}


@contextlib.contextmanager
def _cache_lock(cache: Path, name: str) -> Iterator[None]:
    """Hold ``cache/.lock-<name>``: one build of a recipe at a time across processes."""
    cache.mkdir(parents=True, exist_ok=True)
    lock = cache / f".lock-{name}"
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another build to release {lock}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cache_dir(recipe: _Recipe, go_version: str) -> Path:
    key = f"{recipe.version}-{go_version}-{_recipe_hash(recipe.recipe)}-{go_platform()}"
    return cache_root() / recipe.name / key


def _built(recipe: _Recipe, go_version: str) -> Path | None:
    final = _cache_dir(recipe, go_version)
    return final if (final / ".complete").exists() else None


def _cached(recipe: _Recipe) -> Path | None:
    """Return the cached build for the installed Go, or any Go version's when Go is absent."""
    go = shutil.which("go")
    if go is not None:
        version = subprocess.run(
            [go, "env", "GOVERSION"], check=True, capture_output=True, text=True
        ).stdout.strip()
        return _built(recipe, version)
    prefix = f"{recipe.version}-"
    suffix = f"-{_recipe_hash(recipe.recipe)}-{go_platform()}"
    parent = cache_root() / recipe.name
    if not parent.is_dir():
        return None
    for directory in sorted(parent.iterdir(), reverse=True):
        name = directory.name
        if name.startswith(prefix) and name.endswith(suffix) and (directory / ".complete").exists():
            return directory
    return None


_costs: dict[str, float] = {}  # recipe name -> seconds its build took in this process


def _build(recipe: _Recipe, go: _Go) -> Path:
    final = _cache_dir(recipe, go.version)
    with _cache_lock(cache_root(), recipe.name):
        if (final / ".complete").exists():  # another run built it while we waited
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=final.name + ".tmp.", dir=final.parent))
        started = time.monotonic()
        _log(f"building {recipe.name} {recipe.version} with {go.version} (takes minutes)")
        try:
            recipe.build(go, staging)
            binaries = staging / recipe.subdir
            for binary in recipe.binaries:
                if not (binaries / binary).is_file():
                    msg = f"build of {recipe.name} produced no {binary}"
                    raise AssetError(msg)
            smoke = subprocess.run(
                [str(binaries / recipe.binaries[0]), *recipe.smoke],
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
            )
            marker = recipe.smoke_marker or recipe.version
            printed = smoke.stdout + smoke.stderr
            if smoke.returncode not in recipe.smoke_codes or marker not in printed:
                msg = f"smoke check of {recipe.name} failed: {smoke.stdout}{smoke.stderr}"
                raise AssetError(msg)
            (staging / ".complete").write_text(printed.strip()[:2000] + "\n")
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        _costs[recipe.name] = seconds
        _log(f"built {recipe.name} in {seconds:.0f}s -> {final}")
        return final


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


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


def _find_k8s_binary(binary: str, recipe_key: str, *, build: bool) -> Path:
    found = _from_environment(binary)
    if found:
        return found
    recipe = _RECIPES[recipe_key]
    built = _cached(recipe)
    if built:
        return built / binary
    found = _setup_envtest_store(binary)
    if found:
        return found
    if not build:
        msg = f"{binary} not found; run hack/test-assets to build it"
        raise AssetError(msg)
    return _build(recipe, _Go.find(cache_root())) / binary


def _pulumi_dir_missing(directory: Path) -> list[str]:
    """Which of PULUMI_BINARIES ``directory`` lacks (``pulumi`` must be executable)."""
    missing = [b for b in PULUMI_BINARIES if not (directory / b).is_file()]
    if "pulumi" not in missing and not _executable(directory / "pulumi"):
        missing.insert(0, "pulumi")
    return missing


def _pulumi_dir_complete(directory: Path) -> bool:
    return not _pulumi_dir_missing(directory)


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
    recipe = _RECIPES["pulumi"]
    built = _cached(recipe)
    if built:
        return built / "bin"
    installed = shutil.which("pulumi")
    if installed and _pulumi_dir_complete(Path(installed).resolve().parent):
        return Path(installed).resolve().parent
    if not build:
        msg = "pulumi not found; run hack/test-assets to build it"
        raise AssetError(msg)
    return _build(recipe, _Go.find(cache_root())) / "bin"


PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
# The newest release of the root module that the Go module proxy serves (it serves
# v0.95.x only for the pkg/apis/monitoring submodule, which holds no CRD manifests).
PROMETHEUS_OPERATOR_VERSION = "0.94.1"


def find_prometheus_operator_crds(*, download: bool = True) -> Path:
    """Find (or download) the directory of the Prometheus Operator's CRD manifests.

    They are ``example/prometheus-operator-crd/*.yaml`` of the operator's root Go module,
    fetched with ``go mod download`` into this project's module cache (nothing is built).
    """
    module = f"{PROMETHEUS_OPERATOR_MODULE}@v{PROMETHEUS_OPERATOR_VERSION}"
    crds = Path("example", "prometheus-operator-crd")
    cached = cache_root() / "go" / "mod" / module / crds
    if cached.is_dir():
        return cached
    if not download:
        msg = f"{module} is not in the module cache (downloading it needs Go and its proxy)"
        raise AssetError(msg)
    cache_root().mkdir(parents=True, exist_ok=True)
    go = _Go.find(cache_root())
    return Path(str(go.download(module, cache_root())["Dir"])) / crds


def find_built(name: str, *, build: bool = True) -> Path:
    """Find (or build) the directory of an optional recipe: node, helm, pko or kubernetes.

    These are built only where they are needed: the node's for the node tests (run as root
    with containerd installed; see ``hack/install-node``), helm for the chart tests, the
    Kubernetes provider (``pulumi-resource-kubernetes``) for the tests of users' programs,
    and the Pulumi Kubernetes Operator v1 for ``make bench`` alone.

    Raises:
        AssetError: not built and ``build`` is false (the message names the command), or
            the build failed.
    """
    recipe = _RECIPES[name]
    override = os.environ.get(_env_name(recipe.name) + "_DIR")
    if override:
        return Path(override)
    built = _cached(recipe)
    if built:
        return built
    if not build:
        msg = f"{recipe.name} binaries not found; run hack/test-assets --with {name}"
        raise AssetError(msg)
    return _build(recipe, _Go.find(cache_root()))


def ensure_assets(*, build: bool = True) -> Assets:
    """Find every binary, building the missing ones when ``build`` is true."""
    return Assets(
        etcd=find_kube_binary("etcd", build=build),
        kube_apiserver=find_kube_binary("kube-apiserver", build=build),
        kubectl=find_kube_binary("kubectl", build=build),
        pulumi_bin=find_pulumi(build=build),
    )


def _jobs() -> int:
    try:
        return max(1, int(os.environ.get("TEST_ASSET_JOBS", "1")))
    except ValueError:
        return 1


def _named(name: str, find: Callable[[], Path]) -> Callable[[], Path]:
    """``find`` run with ``name`` as this thread's log prefix."""

    def run() -> Path:
        _building.name = name
        try:
            return find()
        finally:
            _building.name = ""

    return run


def _find_all(extra: Sequence[str], *, build: bool) -> tuple[Assets, dict[str, str]]:
    """Find every binary, building the missing recipes ``_jobs()`` at a time.

    The longest builds are started first; the node's binaries come after kube-apiserver's
    in one task, so that the packages they share are compiled once, into the build cache.
    """

    def kube() -> Path:
        found = find_kube_binary("kube-apiserver", build=build)
        if "node" in extra:
            find_built("node", build=build)
        return found

    tasks: dict[str, Callable[[], Path]] = {}
    for name in ("kubernetes", "pko"):
        if name in extra:
            tasks[name] = lambda name=name: find_built(name, build=build)  # type: ignore[misc]
    tasks["pulumi"] = lambda: find_pulumi(build=build)
    tasks["kube"] = kube
    if "helm" in extra:
        tasks["helm"] = lambda: find_built("helm", build=build)
    tasks["etcd"] = lambda: find_kube_binary("etcd", build=build)
    with ThreadPoolExecutor(max_workers=_jobs()) as pool:
        futures = {key: pool.submit(_named(key, task)) for key, task in tasks.items()}
        found = {key: future.result() for key, future in futures.items()}
    assets = Assets(
        etcd=found["etcd"],
        kube_apiserver=found["kube"],
        kubectl=find_kube_binary("kubectl", build=build),
        pulumi_bin=found["pulumi"],
    )
    extras = {
        f"{_env_name(_RECIPES[name].name)}_DIR": str(find_built(name, build=build))
        for name in extra
    }
    return assets, extras


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: find or build, then print where everything is."""
    parser = argparse.ArgumentParser(prog="hack/test-assets", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--print-env", action="store_true", help="print TEST_ASSET_* lines for `eval`/`export`"
    )
    parser.add_argument(
        "--no-build", action="store_true", help="fail instead of building what is missing"
    )
    parser.add_argument(
        "--with",
        dest="extra",
        action="append",
        default=[],
        choices=("node", "helm", "pko", "kubernetes"),
        help=(
            "also find or build the node's binaries, helm, PKO v1 or the Kubernetes provider "
            "(repeatable)"
        ),
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        assets, extras = _find_all(list(dict.fromkeys(args.extra)), build=not args.no_build)
    except AssetError as err:
        print(f"hack/test-assets: {err}", file=sys.stderr)
        return 1
    for key, value in {**assets.env(), **extras}.items():
        print(f"export {key}={value}" if args.print_env else f"{key}={value}")
    for name, seconds in _costs.items():
        _log(f"cost: {name} {seconds:.0f}s")
    _log(f"ready in {time.monotonic() - started:.1f}s (cache {cache_root()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
