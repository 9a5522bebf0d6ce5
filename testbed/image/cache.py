"""Where the image build keeps its files, the lock that serialises builds, progress output."""

from __future__ import annotations

import contextlib
import fcntl
import sys
from collections.abc import Iterator
from pathlib import Path

from testbed.assets import cache_root


class ImageError(RuntimeError):
    """The image could not be built or saved; the message says what to do."""


def image_cache() -> Path:
    """The directory of the image build's files (base root filesystems, archives, logs)."""
    path = cache_root() / "image"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold the image cache's lock: one build (or save) at a time, across processes."""
    with (image_cache() / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another image build to release {image_cache() / '.lock'}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def log(message: str) -> None:
    """Report progress on stderr (stdout is for results)."""
    sys.stderr.write(f"[image] {message}\n")
    sys.stderr.flush()
