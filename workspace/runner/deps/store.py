"""Installed environments by content key, shared by the runs of one trust domain.

Layout under the store's root (``--work-dir``'s ``.cache`` for the local runner, the
namespace's cache volume in a run pod):

- ``envs/<kind>-<key>/``: one installed environment (``node_modules``, a virtualenv, …);
  its ``.complete`` file (JSON: kind, tool, bytes) is written last, so an entry without
  it is a leftover of an install that died, rebuilt by the next install of that key;
  the file's modification time is the entry's last use;
- ``locks/<kind>-<key>.lock``: the entry's lock. A run holds it shared while it uses the
  entry (from the lookup to the end of its operation); an install holds it exclusively;
  eviction takes it exclusively without waiting, so an entry in use is never deleted;
- ``downloads/<tool>/``: the tools' download caches (npm, pip, uv, Go modules and builds,
  yarn, pnpm, corepack), under ``locks/downloads.lock`` in the same way.

``evict`` keeps the whole store under its limit: least recently used entries first, then
the download caches (emptied whole: they are only caches).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from workspace.runner.deps.tools import ToolStoppedError

log = structlog.get_logger(__name__)

COMPLETE = ".complete"
LOCK_POLL = 0.2  # seconds between attempts to take a lock another run holds
DOWNLOADS = "downloads"


@dataclass(frozen=True)
class Entry:
    """One environment of the store: ``name`` is ``<kind>-<key>``."""

    root: Path
    name: str

    @property
    def path(self) -> Path:
        """The environment's directory."""
        return self.root / "envs" / self.name

    @property
    def lock_path(self) -> Path:
        """The environment's lock file."""
        return self.root / "locks" / f"{self.name}.lock"

    def complete(self) -> bool:
        """Whether the environment was installed completely."""
        return (self.path / COMPLETE).is_file()

    def touch(self) -> None:
        """Record a use now (eviction removes the least recently used first)."""
        with contextlib.suppress(OSError):
            os.utime(self.path / COMPLETE)

    def finish(self, kind: str, tool: str) -> int:
        """Mark the environment complete; returns its size in bytes."""
        size = disk_usage(self.path)
        record = {"kind": kind, "tool": tool, "bytes": size}
        partial = self.path / f"{COMPLETE}.partial"
        partial.write_text(json.dumps(record) + "\n")
        partial.replace(self.path / COMPLETE)
        return size


@dataclass(frozen=True)
class Usage:
    """Bytes the store holds: installed environments, download caches."""

    environments: int
    downloads: int


class DependencyStore:
    """The environments and download caches under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, limit: int) -> None:
        """Keep at most ``limit`` bytes under ``root`` (0: no limit)."""
        self.root, self.limit = root, limit

    def entry(self, kind: str, key: str) -> Entry:
        """The environment of ``kind`` for content ``key``."""
        return Entry(self.root, f"{kind}-{key}")

    def downloads(self, tool: str) -> Path:
        """The download cache directory of ``tool`` (created)."""
        path = self.root / DOWNLOADS / tool
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextlib.contextmanager
    def using(
        self,
        entry: Entry,
        build: Callable[[Entry], None],
        stop: threading.Event,
        on_wait: Callable[[], None] | None = None,
    ) -> Iterator[bool]:
        """Hold ``entry`` for use, building it first if it is not complete.

        Yields True for a hit (nothing was built). ``build`` runs with the entry's
        directory empty and the lock exclusive, and must end with ``Entry.finish``; when it
        raises, the directory is removed. The entry is held shared until the ``with``
        block ends. ``on_wait`` is called once if another run holds the lock.
        Raises ``ToolStoppedError`` when ``stop`` is set while waiting for the lock.
        """
        built = False
        with _locked(entry.lock_path, fcntl.LOCK_SH, stop, on_wait) as handle:
            while not entry.complete():
                # Never upgrade a shared lock in place: two runs doing so wait for each other.
                fcntl.flock(handle, fcntl.LOCK_UN)
                _relock(handle, fcntl.LOCK_EX, stop, on_wait)
                if not entry.complete():  # else another run built it while we waited
                    remove(entry.path)
                    entry.path.mkdir(parents=True)
                    try:
                        build(entry)
                    except BaseException:
                        remove(entry.path)  # a half-made environment only takes space
                        raise
                    built = True
                # Not atomic: an eviction may slip in between, so the loop looks again.
                _relock(handle, fcntl.LOCK_SH, stop, None)
            entry.touch()
            yield not built

    @contextlib.contextmanager
    def downloading(self, stop: threading.Event) -> Iterator[None]:
        """Hold the download caches for an install (eviction never empties them then)."""
        with _locked(self.root / "locks" / "downloads.lock", fcntl.LOCK_SH, stop, None):
            yield

    def usage(self, *, measure_downloads: bool) -> Usage:
        """The bytes held; download caches are measured only when asked (a walk)."""
        environments = sum(size for _, size, _ in self._entries())
        downloads = disk_usage(self.root / DOWNLOADS) if measure_downloads else 0
        return Usage(environments, downloads)

    def evict(self) -> Usage:
        """Remove the least recently used unused entries, then downloads, until under limit."""
        usage = self.usage(measure_downloads=True)
        total = usage.environments + usage.downloads
        if not self.limit or total <= self.limit:
            return usage
        environments = usage.environments
        for name, size, _ in sorted(self._entries(), key=lambda e: e[2]):
            if total <= self.limit:
                break
            if self._remove_unused(Entry(self.root, name)):
                log.info("Evicted an installed environment", name=name, bytes=size)
                total, environments = total - size, environments - size
        downloads = usage.downloads
        if total > self.limit and self._empty_downloads():
            log.info("Emptied the download caches", bytes=downloads)
            total, downloads = total - downloads, 0
        return Usage(environments, downloads)

    def _entries(self) -> Iterator[tuple[str, int, float]]:
        """``(name, bytes, last use)`` of every complete entry."""
        envs = self.root / "envs"
        if not envs.is_dir():
            return
        for path in envs.iterdir():
            marker = path / COMPLETE
            try:
                size = int(json.loads(marker.read_text()).get("bytes", 0))
                yield path.name, size, marker.stat().st_mtime
            except (OSError, ValueError, AttributeError):
                continue

    def _remove_unused(self, entry: Entry) -> bool:
        """Delete ``entry`` if no run holds it; True if it is gone."""
        with _try_locked(entry.lock_path) as held:
            if held:
                remove(entry.path)
            return held

    def _empty_downloads(self) -> bool:
        with _try_locked(self.root / "locks" / "downloads.lock") as held:
            if held:
                remove(self.root / DOWNLOADS)
            return held


def disk_usage(path: Path) -> int:
    """Bytes allocated to ``path`` and everything under it (symlinks not followed)."""
    total = 0
    for directory, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                total += (Path(directory) / name).lstat().st_blocks * 512
    return total


def remove(path: Path) -> None:
    """Delete ``path`` and everything under it, read-only files included (Go's modules)."""

    def writable(function: Callable[..., object], name: str, _info: object) -> None:
        with contextlib.suppress(OSError):
            Path(name).parent.chmod(stat.S_IRWXU)
            Path(name).chmod(stat.S_IRWXU)
            function(name)

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=writable)


@contextlib.contextmanager
def _locked(
    path: Path, mode: int, stop: threading.Event, on_wait: Callable[[], None] | None
) -> Iterator[IO[str]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        _relock(handle, mode, stop, on_wait)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _relock(
    handle: IO[str], mode: int, stop: threading.Event, on_wait: Callable[[], None] | None
) -> None:
    """Take (or convert to) ``mode`` on ``handle``, polling so that ``stop`` ends the wait."""
    waited = False
    while True:
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if stop.is_set():
                raise ToolStoppedError("waiting for another install") from None
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            stop.wait(LOCK_POLL)  # a stop ends the wait at once
        else:
            return


@contextlib.contextmanager
def _try_locked(path: Path) -> Iterator[bool]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
