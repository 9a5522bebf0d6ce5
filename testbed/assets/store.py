"""The build cache: where a recipe's build lives, how it is found, and how it is built there.

Provides ``cached`` (a recipe's complete build for the installed Go, or for any Go when
none is installed), ``build`` (build a recipe into the cache) and ``COSTS`` (seconds each
build of this process took, for ``hack/test-assets``' closing lines).

Guarantees: a build directory is ``<cache>/<recipe>/<version>-<go>-<recipe hash>-<platform>``
and counts only once it holds ``.complete``. A build is atomic (a temporary directory, the
expected binaries, a smoke check, then a rename) and one at a time per recipe across
processes (a file lock, ``.lock-<recipe>``); a run that waited for the lock returns the
other's build instead of building again. A failed build leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.assets.core import AssetError, cache_root, go_platform, log
from testbed.assets.recipe import Recipe, recipe_hash
from testbed.assets.toolchain import Go, installed_version

COSTS: dict[str, float] = {}  # recipe name -> seconds its build took in this process


@contextlib.contextmanager
def _cache_lock(cache: Path, name: str) -> Iterator[None]:
    """Hold ``cache/.lock-<name>``: one build of a recipe at a time across processes."""
    cache.mkdir(parents=True, exist_ok=True)
    lock = cache / f".lock-{name}"
    with lock.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build to release {lock}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cache_dir(recipe: Recipe, go_version: str) -> Path:
    key = f"{recipe.version}-{go_version}-{recipe_hash(recipe.recipe)}-{go_platform()}"
    return cache_root() / recipe.name / key


def _built(recipe: Recipe, go_version: str) -> Path | None:
    final = _cache_dir(recipe, go_version)
    return final if (final / ".complete").exists() else None


def cached(recipe: Recipe) -> Path | None:
    """Return the cached build for the installed Go, or any Go version's when Go is absent."""
    go = shutil.which("go")
    if go is not None:
        return _built(recipe, installed_version(go))
    prefix = f"{recipe.version}-"
    suffix = f"-{recipe_hash(recipe.recipe)}-{go_platform()}"
    parent = cache_root() / recipe.name
    if not parent.is_dir():
        return None
    for directory in sorted(parent.iterdir(), reverse=True):
        name = directory.name
        if name.startswith(prefix) and name.endswith(suffix) and (directory / ".complete").exists():
            return directory
    return None


def build(recipe: Recipe, go: Go) -> Path:
    """Build ``recipe`` with ``go`` into the cache (unless another run just did); its dir.

    Raises:
        AssetError: the build failed, lacks a binary, or its smoke check failed.
    """
    final = _cache_dir(recipe, go.version)
    with _cache_lock(cache_root(), recipe.name):
        if (final / ".complete").exists():  # another run built it while we waited
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=final.name + ".tmp.", dir=final.parent))
        started = time.monotonic()
        log(f"building {recipe.name} {recipe.version} with {go.version} (takes minutes)")
        try:
            recipe.build(go, staging)
            printed = _check(recipe, staging / recipe.subdir)
            (staging / ".complete").write_text(printed.strip()[:2000] + "\n")
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        seconds = time.monotonic() - started
        COSTS[recipe.name] = seconds
        log(f"built {recipe.name} in {seconds:.0f}s -> {final}")
        return final


def _check(recipe: Recipe, binaries: Path) -> str:
    """Check that ``binaries`` holds the recipe's binaries and passes its smoke check.

    Returns what the smoke check printed.
    """
    for binary in recipe.binaries:
        if not (binaries / binary).is_file():
            msg = f"build of {recipe.name} produced no {binary}"
            raise AssetError(msg)
    smoke = subprocess.run(
        [str(binaries / recipe.binaries[0]), *recipe.smoke],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )
    marker = recipe.smoke_marker or recipe.version
    printed = smoke.stdout + smoke.stderr
    if smoke.returncode not in recipe.smoke_codes or marker not in printed:
        msg = f"smoke check of {recipe.name} failed: {smoke.stdout}{smoke.stderr}"
        raise AssetError(msg)
    return printed
