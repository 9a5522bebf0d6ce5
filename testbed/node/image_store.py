"""Seeded containerd roots: an image archive is imported once per machine, not per node.

Importing the operator's image (864 MB) into a node's containerd costs some 25 s of CPU
(its blobs hashed and stored, its layers unpacked into overlayfs snapshots), and every
node cluster of a test run did it again. ``seed(archives)`` imports the archives once into
a containerd root of its own (a scratch containerd with the node's snapshotter, in the
``k8s.io`` namespace, in a mount namespace of its own), kept in the test cache under a key
of containerd's version and each archive's identity; ``plant(seed, root)`` gives a node's
containerd a root with those images before it starts: directories made anew (with their
owners, modes and the overlay xattrs of opaque directories), every file a hard link to the
seed's, except the bolt databases, which containerd writes in place and which are copied.

Sharing files is safe because containerd never writes a committed blob or snapshot: a
container's changes go to an upper directory of its own, and a node's garbage collection
unlinks its own names only. The newest ``KEPT`` seeds are kept. Seeds are built and
pruned under an exclusive lock, planted under a shared one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from testbed.assets import cache_root
from testbed.process import ProcessError

KEPT = 3
NAMESPACE = "k8s.io"
SNAPSHOTTER = "overlayfs"
# Archives up to this size are known by their content's hash; larger ones (the operator's
# image) by name, size and modification time: the image cache names them by image id.
HASHED_UP_TO = 64 << 20
START_TIMEOUT = 60.0
IMPORT_TIMEOUT = 600.0
_DATABASES = ("meta.db", "metadata.db")


@dataclasses.dataclass(frozen=True)
class Archive:
    """An image archive (OCI or docker-archive) and the ref it gives containerd."""

    path: Path
    ref: str

    def identity(self) -> str:
        """What changes whenever the archive's content may have changed."""
        stat = self.path.stat()
        if stat.st_size <= HASHED_UP_TO:
            return "sha256:" + hashlib.sha256(self.path.read_bytes()).hexdigest()
        return f"{self.path.name}:{stat.st_size}:{stat.st_mtime_ns}"


@dataclasses.dataclass(frozen=True)
class Seed:
    """A containerd root holding images, and what each ref was imported from."""

    root: Path
    images: dict[str, str]  # ref -> the archive's identity

    def holds(self, archive: Archive) -> bool:
        """Whether ``archive`` was imported into this seed (the same content, the same ref)."""
        return self.images.get(archive.ref) == archive.identity()


def store() -> Path:
    """Where seeds are kept (in the test cache)."""
    return cache_root() / "node-images"


def seed(archives: Sequence[Archive]) -> Seed:
    """The seed holding ``archives``, built now if no earlier run built it.

    Raises:
        ProcessError: containerd did not start, or an import failed.
    """
    images = {a.ref: a.identity() for a in archives}
    key = _key(images)
    directory = store() / key
    with _lock(fcntl.LOCK_EX):
        if not (directory / "images.json").is_file():
            _build(directory, archives)
            prune(keep=directory)
        os.utime(directory)
    return Seed(directory / "root", images)


def plant(found: Seed, root: Path) -> None:
    """Make ``root`` (absent) a containerd root with the seed's images (module doc)."""
    with _lock(fcntl.LOCK_SH):
        if not found.root.is_dir():
            msg = f"the seed {found.root} is gone"
            raise ProcessError(msg)
        root.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["cp", "-a", "--link", str(found.root), str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            msg = f"planting {found.root} at {root} failed: {proc.stderr.strip()}"
            raise ProcessError(msg)
        for database in _databases(root):
            copy = database.with_name(database.name + ".copy")
            shutil.copy2(database, copy)
            copy.replace(database)


def _databases(root: Path) -> list[Path]:
    return [path for name in _DATABASES for path in root.rglob(name) if path.is_file()]


def _key(images: dict[str, str]) -> str:
    version = subprocess.run(
        ["containerd", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    text = json.dumps([version, SNAPSHOTTER, NAMESPACE, sorted(images.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _lock(mode: int) -> Iterator[None]:
    store().mkdir(parents=True, exist_ok=True)
    with (store() / ".lock").open("w") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(directory: Path, archives: Sequence[Archive]) -> None:
    """Import ``archives`` with a scratch containerd; its root becomes ``directory/root``."""
    started = time.monotonic()
    partial = directory.with_name(f"{directory.name}.tmp.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="pso-seed-"))
    try:
        with containerd_on(partial / "root", work) as ctr:
            for archive in archives:
                ctr("images", "import", str(archive.path))
            listed = set(ctr("images", "ls", "--quiet").split())
            missing = sorted({a.ref for a in archives} - listed)
            if missing:
                msg = f"the archives did not give containerd {missing} (it has {sorted(listed)})"
                raise ProcessError(msg)
        images = {a.ref: a.identity() for a in archives}
        (partial / "images.json").write_text(json.dumps(images, indent=1))
        shutil.rmtree(directory, ignore_errors=True)
        partial.rename(directory)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    message = f"seeded {directory.name} with {len(archives)} image(s) in {took:.1f}s"
    print(message, file=sys.stderr)  # noqa: T201 - progress, as the image cache reports it


@contextlib.contextmanager
def containerd_on(root: Path, work: Path) -> Iterator[Ctr]:
    """A containerd on ``root`` (no CRI) in a mount namespace of its own; a ``ctr`` for it.

    Its socket, state and log are in ``work``; it is stopped on leaving.

    Raises:
        ProcessError: it did not start (its log's tail).
    """
    work.mkdir(parents=True, exist_ok=True)
    socket = work / "containerd.sock"
    config = work / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{root}"\nstate = "{work / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",\n'
        '  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",\n'
        '  "io.containerd.snapshotter.v1.devmapper"]\n'
        f'[grpc]\n  address = "{socket}"\n[ttrpc]\n  address = "{work / "ttrpc.sock"}"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{work / "opt"}"\n'
    )
    argv = ["unshare", "--mount", "--propagation=private", "containerd", f"--config={config}"]
    with (work / "containerd.log").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not socket.is_socket():
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = f"containerd on {root} did not start: {_tail(work / 'containerd.log')}"
                raise ProcessError(msg)
            time.sleep(0.1)
        yield Ctr(socket)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclasses.dataclass(frozen=True)
class Ctr:
    """``ctr`` against one containerd socket, in the ``k8s.io`` namespace."""

    socket: Path

    def __call__(self, *args: str) -> str:
        """Run ``ctr args…``; its stdout.

        Raises:
            ProcessError: it failed (its stderr).
        """
        argv = ["ctr", "--address", str(self.socket), "-n", NAMESPACE, *args]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=IMPORT_TIMEOUT, check=False
        )
        if proc.returncode != 0:
            msg = f"ctr {' '.join(args)} failed: {proc.stderr.strip()}"
            raise ProcessError(msg)
        return proc.stdout


def prune(keep: Path) -> None:
    """Remove all but the newest ``KEPT`` seeds (``keep`` among them), and stale partials."""
    seeds = [p for p in store().iterdir() if p.is_dir() and p != keep]
    for stale in [p for p in seeds if ".tmp." in p.name]:
        shutil.rmtree(stale, ignore_errors=True)
    done = sorted(
        (p for p in seeds if ".tmp." not in p.name), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in done[KEPT - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-20:])
