"""What every module of ``testbed.assets`` shares: the error, the cache, the platform, the log.

Provides ``AssetError`` (the one exception the package raises on purpose), ``cache_root``
(where every build and the Go caches live, outside any checkout), ``go_platform`` (this
machine as Go names it), ``log`` (one progress line on stderr, prefixed with the recipe the
calling thread builds) and ``logged_as`` (runs a callable under such a prefix).

Guarantees: standard library only, no side effect on import; ``log`` writes whole lines
to stderr, flushed, never to stdout (which ``hack/test-assets`` keeps for its results).
"""

from __future__ import annotations

import os
import platform
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class AssetError(RuntimeError):
    """A binary could not be found or built; the message says what to do."""


def cache_root() -> Path:
    """Return the cache directory, outside any repository checkout."""
    override = os.environ.get("PULUMI_STACK_OPERATOR_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pulumi-stack-operator-testbin"


def go_platform() -> str:
    """This machine as Go names it: ``<GOOS>-<GOARCH>`` (``linux-amd64``)."""
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{sys.platform}-{machine}"


_building = threading.local()  # .name: the recipe this thread builds, for the log prefix


def log(message: str) -> None:
    """One progress line on stderr: ``[test-assets:<recipe>] message``."""
    recipe = getattr(_building, "name", "")
    prefix = f"test-assets:{recipe}" if recipe else "test-assets"
    print(f"[{prefix}] {message}", file=sys.stderr, flush=True)  # noqa: T201 - progress


def logged_as(name: str, find: Callable[[], T]) -> Callable[[], T]:
    """``find``, run with ``name`` as the calling thread's log prefix."""

    def run() -> T:
        _building.name = name
        try:
            return find()
        finally:
            _building.name = ""

    return run
