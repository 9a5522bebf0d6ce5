"""What a recipe is: how one family of binaries is built, smoke-checked and keyed in the cache.

Provides ``Recipe`` (its name, version, binaries, build function, smoke check and recipe
text) and ``recipe_hash`` (the part of a cache key that changes with the recipe).

Guarantees: a cache key changes whenever a recipe's text or ``RECIPE_REVISION`` does, so a
changed recipe is never served an old build; the same recipe always hashes the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path

from testbed.assets.toolchain import Go

# Bump when a recipe changes in a way that changes its output.
RECIPE_REVISION = "1"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One build: ``build(go, out)`` puts ``binaries`` into ``out / subdir``."""

    name: str
    version: str
    binaries: tuple[str, ...]
    subdir: str  # where the binaries sit inside the built directory
    build: Callable[[Go, Path], None]
    smoke: tuple[str, ...]  # argv (after the first binary) to run as a smoke check
    recipe: str
    # What the smoke check must print (default: the version) and may exit with.
    smoke_marker: str = ""
    smoke_codes: tuple[int, ...] = (0,)


def recipe_hash(*parts: str) -> str:
    """Ten hex digits of a hash of ``RECIPE_REVISION`` and ``parts``."""
    digest = hashlib.sha256("\0".join((RECIPE_REVISION, *parts)).encode())
    return digest.hexdigest()[:10]
