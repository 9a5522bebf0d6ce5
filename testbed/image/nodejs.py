"""The Dockerfile's ``NODE_IMAGE`` stage, made from this machine's Node.js: no registry.

The Dockerfile copies node, npm and corepack from ``/usr/local`` of ``NODE_IMAGE`` (default
``node:20-bookworm-slim``). ``ensure_node`` lays this machine's Node.js (>= 20, with npm and
corepack) out as the official images do, ``/usr/local/bin/{node,npm,npx,corepack}`` and
``/usr/local/lib/node_modules/{npm,corepack}``, and imports it as
``localhost/pso-node:<key>``, keyed by the versions and the files' identity. Nothing else
is in it (no shell): the Dockerfile only copies from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Protocol

from testbed.image.cache import ImageError, log

MIN_MAJOR = 20  # @pulumi/pulumi's engines.node
NODE_REPOSITORY = "localhost/pso-node"
MODULES = ("npm", "corepack")
# The official images' links in /usr/local/bin (relative, as theirs are).
LINKS = {
    "npm": "../lib/node_modules/npm/bin/npm-cli.js",
    "npx": "../lib/node_modules/npm/bin/npx-cli.js",
    "corepack": "../lib/node_modules/corepack/dist/corepack.js",
}
# Bump when the layout below changes.
RECIPE_REVISION = "1"
HINT = (
    f"the image's Node.js is copied from this machine's: install Node.js >= {MIN_MAJOR} with "
    "npm and corepack (e.g. NodeSource's nodejs .deb; Debian bookworm's nodejs is 18)"
)


class Importer(Protocol):
    """What ``ensure_node`` needs of a container engine (``testbed.image.engine.Engine``).

    Declared here, not imported, so that this module does not depend on the engine's,
    which asks this one whether the stage can be made here (``problem``).
    """

    def image_id(self, ref: str) -> str | None:
        """The id of the local image ``ref``, or None when there is none."""

    def run(self, *args: str) -> object:
        """Run ``<engine> args…``, raising ImageError when it fails."""


@dataclasses.dataclass(frozen=True)
class HostNode:
    """This machine's Node.js: the ``node`` binary, its ``node_modules`` and its version."""

    binary: Path
    modules: Path
    version: str


def find_host_node() -> HostNode:
    """This machine's Node.js, the one ``node`` on PATH is.

    Its npm and corepack are in ``<prefix>/lib/node_modules``, ``<prefix>`` being the
    parent of the binary's directory (``/usr`` for a .deb, ``/usr/local`` for the tarball).
    Raises ImageError (saying what to install) when it is missing, older than MIN_MAJOR
    or lacks npm or corepack.
    """
    found = shutil.which("node")
    if found is None:
        msg = f"node is not on PATH; {HINT}"
        raise ImageError(msg)
    binary = Path(found).resolve()
    modules = binary.parent.parent / "lib" / "node_modules"
    version = _version(binary)
    if int(version.lstrip("v").split(".")[0]) < MIN_MAJOR:
        msg = f"{binary} is Node.js {version}; {HINT}"
        raise ImageError(msg)
    for module in MODULES:
        if not (modules / module / "package.json").is_file():
            msg = f"{modules / module} is missing; {HINT}"
            raise ImageError(msg)
    return HostNode(binary, modules, version)


def problem() -> str | None:
    """Why the Node.js stage cannot be made here (for ``missing_tools``), or None."""
    try:
        find_host_node()
    except ImageError:
        return f"Node.js >= {MIN_MAJOR} with npm and corepack"
    return None


def node_key(node: HostNode) -> str:
    """The stage's cache key: node's version and a hash of the recipe and files' identity."""
    parts = [RECIPE_REVISION, node.version, _stat_id(node.binary)]
    for module in MODULES:
        package = node.modules / module / "package.json"
        parts += [module, json.loads(package.read_text())["version"], _stat_id(package)]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    return f"{node.version}-{digest}"


def ensure_node(engine: Importer) -> str:
    """The ref of the imported Node.js stage, made from the host's Node.js when missing.

    Raises ImageError when there is no suitable Node.js here, or the import fails.
    """
    node = find_host_node()
    ref = f"{NODE_REPOSITORY}:{node_key(node)}"
    if engine.image_id(ref) is not None:
        return ref
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pso-node-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        write_rootfs(node, rootfs)
        engine.run("import", "--change", 'CMD ["node"]', str(rootfs), ref)
    log(f"imported {ref} (this machine's Node.js) in {time.monotonic() - started:.0f}s")
    return ref


def write_rootfs(node: HostNode, dest: Path) -> None:
    """Write to ``dest`` a tar of ``node`` laid out under ``usr/local`` as the node images do.

    Owned by root, modes kept, symbolic links inside npm and corepack kept as links.
    """
    with tarfile.open(dest, "w") as tar:
        for directory in ("usr", "usr/local", "usr/local/bin", "usr/local/lib"):
            tar.addfile(_entry(directory, tarfile.DIRTYPE, 0o755))
        tar.add(node.binary, "usr/local/bin/node", filter=_as_root)
        for name, target in LINKS.items():
            link = _entry(f"usr/local/bin/{name}", tarfile.SYMTYPE, 0o777)
            link.linkname = target
            tar.addfile(link)
        tar.addfile(_entry("usr/local/lib/node_modules", tarfile.DIRTYPE, 0o755))
        for module in MODULES:
            arcname = f"usr/local/lib/node_modules/{module}"
            tar.add(node.modules / module, arcname, filter=_as_root)


def _entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, mode
    return _as_root(info)


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _version(binary: Path) -> str:
    proc = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0 or not proc.stdout.startswith("v"):
        msg = f"{binary} --version failed: {proc.stderr.strip()}; {HINT}"
        raise ImageError(msg)
    return proc.stdout.strip()


def _stat_id(path: Path) -> str:
    stat = path.stat()
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
