"""Small images for the node tests, built from source here (no registry, no engine).

``http_server_archive`` compiles ``testbed/node/testserver`` (a stdlib-only Go HTTP
server, ``CGO_ENABLED=0``, so the binary is static) with the test cache's Go caches,
keeps the binary in the cache keyed by its source, and packs it with
``make_oci_archive`` as ``HTTP_SERVER_IMAGE``, running as uid 65532.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from testbed.assets import AssetError, cache_root
from testbed.node.oci import make_oci_archive

HTTP_SERVER_IMAGE = "localhost/pulumi-stack-operator/test-server:testbed"
_SOURCE = Path(__file__).with_name("testserver")


def build_http_server() -> Path:
    """The static test-server binary, built on first use.

    Raises:
        AssetError: Go is missing or the build failed.
    """
    digest = hashlib.sha256()
    for name in ("go.mod", "main.go"):
        digest.update((_SOURCE / name).read_bytes())
    binary = cache_root() / "node-test-server" / digest.hexdigest()[:12] / "test-server"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        msg = "Go is needed to build the node tests' test-server image"
        raise AssetError(msg)
    env = dict(os.environ)
    env.update(
        GOCACHE=str(cache_root() / "go" / "build"),
        GOMODCACHE=str(cache_root() / "go" / "mod"),
        GOTOOLCHAIN="local",
        GOFLAGS="-modcacherw",
        GOWORK="off",
        CGO_ENABLED="0",
    )
    partial = binary.with_suffix(".tmp")
    partial.parent.mkdir(parents=True, exist_ok=True)
    argv = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), "."]
    proc = subprocess.run(argv, cwd=_SOURCE, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        msg = f"building the test server failed:\n{proc.stderr[-4000:]}"
        raise AssetError(msg)
    partial.rename(binary)
    return binary


def http_server_archive(dest: Path) -> Path:
    """Write the test-server image (``HTTP_SERVER_IMAGE``) as an OCI archive at ``dest``."""
    binary = build_http_server()
    return make_oci_archive(
        dest, HTTP_SERVER_IMAGE, {"test-server": binary}, ["/test-server"], user="65532"
    )
