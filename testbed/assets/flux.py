"""The Flux family of recipes: the source-controller, built from its own Go module.

Provides the pinned version (``FLUX_SOURCE_CONTROLLER_MODULE``,
``FLUX_SOURCE_CONTROLLER_VERSION``), ``FLUX_SOURCE_CRDS`` (the CRD manifests the
controller needs installed, by file name in its module's ``config/crd/bases/``) and
``RECIPES``: ``flux`` (``source-controller``, for ``testbed.flux`` and the tests that
fetch artifacts from it).

Guarantees: the binary is compiled with ``go build`` from the module the Go module proxy
serves, in a copy of it (its go.mod replaces ``…/api`` with ``./api``, a directory the
module zip leaves out: the copy gets the published ``api`` module at the same version
there), with the go.mod and go.sum of the release, so with the release's dependency
versions but for ``FLUX_DOWNGRADES`` (modules the proxy does not serve at the release's
version); nothing is downloaded from a release page. The copy is removed afterwards.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from testbed.assets.recipe import Recipe
from testbed.assets.toolchain import Go

FLUX_SOURCE_CONTROLLER_MODULE = "github.com/fluxcd/source-controller"
# v1.10.x's go.mod says go 1.27, newer than the Go this test bed builds with (1.26; the
# toolchain is never switched: GOTOOLCHAIN=local). v1.9.6 is the newest release for 1.26.
FLUX_SOURCE_CONTROLLER_VERSION = "1.9.6"
# Every kind main.go starts a controller for: without one of these CRDs the manager does
# not start ("no matches for kind HelmRepository") and the process exits 1. It does not
# reconcile ExternalArtifact, so that CRD is not needed.
FLUX_SOURCE_PLURALS = (
    "gitrepositories",
    "ocirepositories",
    "buckets",
    "helmrepositories",
    "helmcharts",
)
FLUX_SOURCE_CRDS = tuple(f"source.toolkit.fluxcd.io_{p}.yaml" for p in FLUX_SOURCE_PLURALS)
FLUX_CRD_DIR = Path("config", "crd", "bases")
# The Go module proxy answers "403 This module version is not available" for
# github.com/fluxcd/pkg/artifact v0.18.3, which v1.9.6 requires; of that minor line it
# serves only v0.18.0, which requires nothing newer than v1.9.6's go.mod does, so the
# replacement changes no other module's version.
FLUX_DOWNGRADES = {"github.com/fluxcd/pkg/artifact": "v0.18.0"}


def module_dir(go: Go, module: str) -> Path:
    """Download ``module`` (``path@version``) into the module cache; its directory there."""
    return Path(str(go.download(module, go.cache)["Dir"]))


def _writable_copy(source: Path, target: Path) -> None:
    """Copy the read-only module tree ``source`` to ``target``, every file owner-writable."""
    shutil.copytree(source, target)
    for directory, _, files in os.walk(target):
        for name in files:
            path = Path(directory, name)
            path.chmod(path.stat().st_mode | 0o200)


def _build_source_controller(go: Go, out: Path) -> None:
    """Build ``source-controller`` in a copy of its module with the ``api`` module in ./api."""
    version = f"v{FLUX_SOURCE_CONTROLLER_VERSION}"
    module = module_dir(go, f"{FLUX_SOURCE_CONTROLLER_MODULE}@{version}")
    api = module_dir(go, f"{FLUX_SOURCE_CONTROLLER_MODULE}/api@{version}")
    work = go.cache / "wrappers" / f"source-controller-{FLUX_SOURCE_CONTROLLER_VERSION}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        _writable_copy(module, work)
        _writable_copy(api, work / "api")
        for path, served in FLUX_DOWNGRADES.items():
            go.run(["mod", "edit", f"-replace={path}={path}@{served}"], work)
            go.run(["mod", "download", path], work)  # records its go.sum lines
        binary = out / "source-controller"
        go.run(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


RECIPES = {
    # No version flag (the release stamps none); --help prints pflag's usage and exits 0.
    "flux": Recipe(
        "source-controller",
        FLUX_SOURCE_CONTROLLER_VERSION,
        ("source-controller",),
        "",
        _build_source_controller,
        ("--help",),
        "source-controller:module-copy+api@same-version:trimpath,-s -w:"
        + ",".join(f"{path}@{served}" for path, served in FLUX_DOWNGRADES.items()),
        smoke_marker="--storage-adv-addr",
    ),
}
"""The Flux family's recipes, by the name ``find_built``/``--with`` use."""
