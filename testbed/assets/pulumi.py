"""The Pulumi family of recipes: the CLI with its language hosts, the Kubernetes provider, PKO.

Provides the pinned versions (``PULUMI_VERSION``, the language hosts' ``*_HOST_*VERSION``,
``KUBERNETES_PROVIDER_*``, ``PKO_*``), ``PULUMI_BINARIES`` (what the CLI's directory must
hold) and ``RECIPES``: ``pulumi`` (the CLI, the Python, Node.js, Go and YAML language hosts
and the dynamic-provider shims, in ``bin/``), ``kubernetes`` (the provider
``pulumi-resource-kubernetes`` users' programs ask for) and ``pko`` (the Pulumi Kubernetes
Operator v1's manager and CRDs, for ``make bench`` alone).

Guarantees: everything is compiled with ``go build`` from modules the Go module proxy
serves, stamped with its version; nothing is downloaded from a release page.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from testbed.assets.recipe import Recipe
from testbed.assets.toolchain import Go, new_wrapper

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


def _build_pulumi(go: Go, out: Path) -> None:
    wrapper = new_wrapper(go, f"pulumi-{PULUMI_VERSION}", "go 1.26.0\n")
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


def _build_language_hosts(go: Go, bin_dir: Path) -> None:
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
    go: Go, out: Path, wrapper_name: str, version: str, packages: Sequence[str], ldflags: str
) -> None:
    """Build the main ``packages`` of one module at ``version`` into ``out``, in a wrapper."""
    wrapper = new_wrapper(go, wrapper_name, "go 1.26.0\n")
    go.run(["get", *(f"{package}@{version}" for package in packages)], wrapper)
    go.run(["build", "-trimpath", "-ldflags", ldflags, "-o", f"{out}/", *packages], wrapper)


def _build_pko(go: Go, out: Path) -> None:
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


def _build_kubernetes_provider(go: Go, out: Path) -> None:
    """Build pulumi-resource-kubernetes from its module, as its release does.

    Its ``main.go`` embeds ``schema-embed.json`` and ``terraform-mapping-embed.json``, which
    the release generates (``go generate``: the schema stamped with the version) and the
    module zip lacks. So the command's directory is copied into a wrapper module requiring
    the provider's module, generated there with its own ``generate.go``, then built.
    """
    name = f"kubernetes-{KUBERNETES_PROVIDER_VERSION}"
    wrapper = new_wrapper(go, name, "go 1.26.0\n")
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


RECIPES = {
    "pulumi": Recipe(
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
    "pko": Recipe(
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
    "kubernetes": Recipe(
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
"""The Pulumi family's recipes, by the name ``find_built``/``--with`` use."""
