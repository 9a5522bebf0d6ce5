"""Build the operator's image from the Dockerfile, cached by the content it is made of.

The image is tagged ``localhost/pulumi-stack-operator:<digest>``, the digest hashing the
Dockerfile, every file its ``COPY`` lines take from the build context, the build arguments
(bases, the Node.js stage made from the host's Node.js, Pulumi source, version, revision)
and the Pulumi binaries' identity. When an image
with that tag exists it is returned without building; otherwise the engine builds it, its
layer cache reusing the unchanged steps. ``save_archive`` writes it as a docker-archive,
which ``ctr -n k8s.io images import`` (containerd 1.6) and ``docker load`` accept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from testbed.assets import find_pulumi
from testbed.image import base, nodejs, release
from testbed.image.cache import image_cache, locked, log
from testbed.image.engine import Engine, find_engine

REPO = Path(__file__).resolve().parents[2]
REPOSITORY = "localhost/pulumi-stack-operator"
# What .dockerignore keeps out of the context inside the copied directories.
IGNORED_PARTS = ("__pycache__",)
IGNORED_SUFFIXES = (".pyc", ".pyo", ".pyd")
# The newest images (content tags) and archives kept; older ones are removed after a build.
KEPT = 3
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    """A built image: its ref (content-hash tag), id, size in bytes, build time, base ref."""

    ref: str
    id: str
    size: int
    seconds: float
    base: str
    cached: bool  # true when an image with this content's tag already existed


def copied_paths(dockerfile: Path) -> list[str]:
    """The build-context sources of the Dockerfile's ``COPY`` lines (not ``--from``)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w.rstrip("/") for w in words[1:-1] if not w.startswith("--")]
    return sources


def context_files(repo: Path, sources: Sequence[str]) -> Iterator[Path]:
    """Every file the build context gives those sources, as .dockerignore filters it."""
    for source in sources:
        path = repo / source
        found = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in found:
            ignored = set(file.relative_to(repo).parts) & set(IGNORED_PARTS)
            if file.is_file() and not ignored and file.suffix not in IGNORED_SUFFIXES:
                yield file


def content_digest(repo: Path, build_args: Mapping[str, str]) -> str:
    """The digest of the Dockerfile, .dockerignore, the files it copies and ``build_args``."""
    digest = hashlib.sha256()
    files = [repo / "Dockerfile", repo / ".dockerignore"]
    files += context_files(repo, copied_paths(repo / "Dockerfile"))
    for file in files:
        mode = "x" if os.access(file, os.X_OK) else "-"
        digest.update(f"{file.relative_to(repo)}\0{mode}\0".encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    for key, value in sorted(build_args.items()):
        digest.update(f"{key}={value}\0".encode())
    return digest.hexdigest()


def build_image(
    *,
    tag: str | None = None,
    no_cache: bool = False,
    pulumi_url: str | None = None,
    pulumi_checksums_url: str | None = None,
    revision: str | None = None,
    repo: Path = REPO,
) -> BuiltImage:
    """Build (or find, by its content's tag) the operator's image; also tag it ``tag``.

    Without ``pulumi_url``/``pulumi_checksums_url`` the test bed's Pulumi CLI is served
    on loopback as the release archive. ``no_cache`` rebuilds every step (the bases stay).
    ``revision`` (default: ``repo``'s git HEAD) is the revision label; it is part of the
    content tag, so two revisions of the same tree are two images.
    Raises ImageError when a tool is missing or a step fails.
    """
    started = time.monotonic()
    engine = find_engine()
    with locked():
        base_ref = base.ensure_base(engine)
        builder_ref = base.ensure_builder_base(engine, base_ref)
        args = _build_args(repo, base_ref, builder_ref, revision or _revision(repo))
        args["NODE_IMAGE"] = nodejs.ensure_node(engine)
        if pulumi_url and pulumi_checksums_url:
            args |= {"PULUMI_URL": pulumi_url, "PULUMI_CHECKSUMS_URL": pulumi_checksums_url}
            built = _build(engine, repo, args, pulumi_url, no_cache=no_cache)
        else:
            pulumi_bin = find_pulumi()
            with release.serve(release.release_dir(pulumi_bin)) as url:
                args |= {
                    "PULUMI_URL": f"{url}/{release.archive_name()}",
                    "PULUMI_CHECKSUMS_URL": f"{url}/{release.checksums_name()}",
                }
                # The loopback URL changes with its port: the binaries are the key.
                source = f"test bed {release.identity(pulumi_bin)}"
                built = _build(engine, repo, args, source, no_cache=no_cache)
    if tag:
        engine.run("tag", built.ref, tag)
    return dataclasses.replace(built, seconds=time.monotonic() - started)


def _build_args(repo: Path, base_ref: str, builder_ref: str, revision: str) -> dict[str, str]:
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return {
        "PYTHON_IMAGE": base_ref,
        "BUILDER_IMAGE": builder_ref,
        "PULUMI_ARCH": release.arch(),
        "VERSION": str(project["version"]),
        "REVISION": revision,
    }


def _revision(repo: Path) -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def _build(
    engine: Engine, repo: Path, args: Mapping[str, str], pulumi_source: str, *, no_cache: bool
) -> BuiltImage:
    """Build with ``args`` unless the content's tag exists (or ``no_cache``)."""
    keyed = {k: v for k, v in args.items() if k not in {"PULUMI_URL", "PULUMI_CHECKSUMS_URL"}}
    keyed |= {"PULUMI_SOURCE": pulumi_source, "ENGINE": " ".join(_engine_flags(engine))}
    ref = f"{REPOSITORY}:{content_digest(repo, keyed)[:16]}"
    cached = not no_cache and engine.image_id(ref) is not None
    if not cached:
        _run_build(engine, repo, ref, args, no_cache=no_cache)
        _prune(engine)
    found = engine.run("image", "inspect", "--format", "{{.Id}} {{.Size}}", ref).stdout.split()
    return BuiltImage(ref, found[0], int(found[1]), 0.0, args["PYTHON_IMAGE"], cached)


def _run_build(
    engine: Engine, repo: Path, ref: str, args: Mapping[str, str], *, no_cache: bool
) -> None:
    logs = image_cache() / "logs"
    logs.mkdir(exist_ok=True)
    output = logs / f"build-{ref.rpartition(':')[2]}.log"
    argv = ["build", *_engine_flags(engine), "--tag", ref, "--file", str(repo / "Dockerfile")]
    for key, value in args.items():
        argv += ["--build-arg", f"{key}={value}"]
    if engine.name == "docker":  # podman passes the proxy variables itself (--http-proxy)
        argv += [f"--build-arg={name}" for name in PROXY_VARIABLES if name in os.environ]
    if no_cache:
        argv.append("--no-cache")
    log(f"building {ref} with {engine.name} (log: {output})")
    started = time.monotonic()
    engine.run(*argv, str(repo), timeout=3600, output=output)
    log(f"built {ref} in {time.monotonic() - started:.0f}s")


def _prune(engine: Engine) -> None:
    """Untag all but the KEPT newest content tags (their own layers go with them)."""
    listed = engine.run("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    refs = [ref for ref in listed if ref.startswith(f"{REPOSITORY}:")]
    created = {
        ref: engine.run("image", "inspect", "--format", "{{.Created}}", ref).stdout for ref in refs
    }
    for stale in sorted(refs, key=created.__getitem__, reverse=True)[KEPT:]:
        engine.run("rmi", stale, check=False)  # in use by a container: kept
        log(f"removed the older image {stale}")


def _engine_flags(engine: Engine) -> list[str]:
    """The build's network (the loopback release server, the package index) and format."""
    # podman's default OCI format drops SHELL (the Dockerfile's pipefail); docker's keeps it.
    return ["--network", "host", *(["--format", "docker"] if engine.name == "podman" else [])]


def save_archive(image: BuiltImage) -> Path:
    """A docker-archive of ``image`` in the cache (made once per ref and id); its path.

    ``ctr -n k8s.io images import <path>`` loads it into containerd under ``image.ref``.
    The archive holds the ref it was saved under, so it is keyed by the ref's tag as well
    as the id: one image id may carry several refs. The newest few archives are kept,
    older ones removed.
    """
    engine = find_engine()
    directory = image_cache() / "archives"
    tag = image.ref.rpartition(":")[2]
    archive = directory / f"{tag}-{image.id.removeprefix('sha256:')[:16]}.tar"
    with locked():
        if archive.is_file():
            return archive
        directory.mkdir(exist_ok=True)
        partial = archive.with_suffix(f".tmp.{os.getpid()}")
        try:
            started = time.monotonic()
            podman = ["--format", "docker-archive"] if engine.name == "podman" else []
            engine.run("save", *podman, "--output", str(partial), image.ref)
            partial.rename(archive)
            log(f"saved {image.ref} to {archive} in {time.monotonic() - started:.0f}s")
        finally:
            partial.unlink(missing_ok=True)
        old = sorted(directory.glob("*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[KEPT:]:
            stale.unlink(missing_ok=True)
    return archive
