"""PKO v2's manager and agent, built from a local source tree into the test-binaries cache.

The Go module proxy here refuses PKO v2's module path (403 for
``github.com/pulumi/pulumi-kubernetes-operator/v2``, every version), so the benchmark builds
it from a checkout of its public repository at the release our CRD mirrors (v2.9.x), named
by ``PKO_V2_SOURCE``. That tree is the main module, so the proxy is never asked for it;
only its dependencies come from the proxy (the cache's module cache, ``GOWORK=off``,
``CGO_ENABLED=0``, ``-trimpath``), as for the test bed's other Go binaries
(``testbed.assets``).

``build(source)`` puts ``manager`` (``./operator/cmd``), ``agent`` (``./agent``) and the
CRDs (``operator/config/crd/bases``) under ``<cache>/pko-v2/<key>``, where ``key`` hashes the
tree's Go sources, ``go.mod``/``go.sum``, CRDs and ``RECIPE``; a second call with the same
tree returns the cached build at once. The version stamped into both binaries (PKO's
default agent image tag and its logs) is the newest release of the tree's ``CHANGELOG.md``.

``extract_snapshot(git_dir, tag, dest)`` writes the tree of a release from a bare git
snapshot of the repository (``git archive``), for ``PKO_V2_SOURCE``;
``hack/build-pko-v2 --snapshot GIT_DIR`` does that and the build, and prints the export.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.assets import AssetError, cache_root
from testbed.assets.toolchain import Go

SOURCE_ENV = "PKO_V2_SOURCE"
SKIPPED = f"{SOURCE_ENV} unset (the Go module proxy refuses PKO v2; see hack/build-pko-v2)"
MODULE = "github.com/pulumi/pulumi-kubernetes-operator/v2"
RECIPE = "pko-v2:operator/cmd+agent+crds:trimpath,s,w:1"
PACKAGES = {"manager": ("./operator/cmd", "operator"), "agent": ("./agent", "agent")}
CRD_DIR = Path("operator") / "config" / "crd" / "bases"
HASHED_SUFFIXES = (".go", ".mod", ".sum", ".yaml", ".proto")
_RELEASE = re.compile(r"^## (\d+\.\d+\.\d+)", re.MULTILINE)


class BuildError(AssetError):
    """The source tree is not PKO v2's, or its build failed; the message says which."""


@dataclasses.dataclass(frozen=True)
class Built:
    """One cached build: its binaries, CRDs and stamped version."""

    directory: Path
    version: str  # v2.9.0
    seconds: float  # the build's wall time; 0 when served from the cache

    @property
    def manager(self) -> Path:
        """The operator's manager binary."""
        return self.directory / "manager"

    @property
    def agent(self) -> Path:
        """The workspace agent binary."""
        return self.directory / "agent"

    @property
    def crds(self) -> Path:
        """The directory of its CRDs (Stack, Program, Workspace, Update)."""
        return self.directory / "crds"


def source_from_env() -> Path | None:
    """The source tree ``PKO_V2_SOURCE`` names, or ``None`` when it is unset or empty."""
    value = os.environ.get(SOURCE_ENV, "").strip()
    return Path(value).expanduser().resolve() if value else None


def check_source(source: Path) -> None:
    """Raise ``BuildError`` unless ``source`` is a PKO v2 tree (its root ``go.mod``)."""
    gomod = source / "go.mod"
    if not gomod.is_file():
        msg = f"{SOURCE_ENV}={source}: no go.mod there"
        raise BuildError(msg)
    first = gomod.read_text().splitlines()[:1]
    if first != [f"module {MODULE}"]:
        msg = f"{SOURCE_ENV}={source}: go.mod is not module {MODULE}"
        raise BuildError(msg)
    for package, _ in PACKAGES.values():
        if not (source / package).is_dir():
            msg = f"{SOURCE_ENV}={source}: {package} is missing"
            raise BuildError(msg)


def release_of(source: Path) -> str:
    """The newest release named in the tree's ``CHANGELOG.md`` (``v2.9.0``), else ``v2-dev``."""
    changelog = source / "CHANGELOG.md"
    found = _RELEASE.search(changelog.read_text()) if changelog.is_file() else None
    return f"v{found.group(1)}" if found else "v2-dev"


def build(source: Path) -> Built:
    """The cached build of ``source``, building it first when the cache lacks it.

    Raises:
        BuildError: not a PKO v2 tree, or ``go build`` failed (with its stderr's tail).
    """
    check_source(source)
    version = release_of(source)
    directory = cache_root() / "pko-v2" / f"{version}-{source_key(source)}"
    if (directory / "manager").is_file():
        return Built(directory, version, 0.0)
    began = time.monotonic()
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    go = Go.find(cache_root())
    for binary, (package, stamp) in PACKAGES.items():
        ldflags = f"-s -w -X {MODULE}/{stamp}/version.Version={version}"
        _go_build(go, source, package, partial / binary, ldflags)
    shutil.copytree(source / CRD_DIR, partial / "crds")
    partial.rename(directory)
    return Built(directory, version, time.monotonic() - began)


def source_key(source: Path) -> str:
    """Twelve hex digits of a hash of ``RECIPE`` and every source file the build reads."""
    digest = hashlib.sha256(RECIPE.encode())
    for path in _hashed_files(source):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _hashed_files(source: Path) -> Iterator[Path]:
    """go.mod, go.sum, then the operator's and agent's sources and CRDs, in a fixed order."""
    yield source / "go.mod"
    yield source / "go.sum"
    for top in ("operator", "agent"):
        for path in sorted((source / top).rglob("*")):
            if path.is_file() and path.suffix in HASHED_SUFFIXES:
                yield path


def _go_build(go: Go, source: Path, package: str, out: Path, ldflags: str) -> None:
    """``go build`` one main package of ``source`` to ``out`` with ``ldflags``."""
    argv = ["build", "-trimpath", "-ldflags", ldflags, "-o", str(out), package]
    try:
        go.run(argv, source, {"GOWORK": "off", "GOFLAGS": "-modcacherw"})
    except AssetError as err:
        raise BuildError(str(err)) from err


def extract_snapshot(git_dir: Path, tag: str, dest: Path) -> Path:
    """Write the tree of ``tag`` from the bare repository ``git_dir`` to ``dest`` (kept if there).

    Raises:
        BuildError: the tag is not in the snapshot.
    """
    if (dest / "go.mod").is_file():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", tag],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        msg = f"git archive {tag} in {git_dir}: {archive.stderr.decode()[-2000:]}"
        raise BuildError(msg)
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
    partial.rename(dest)
    return dest
