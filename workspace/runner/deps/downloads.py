"""Where the install tools keep what they download: one cache per tool, in the store.

Shared by every run of the trust domain (the operator for the local runner, a namespace's
cache volume in a run pod), so a package is downloaded once; ``DependencyStore.evict``
bounds them. The variables also keep the tools quiet and non-interactive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from workspace.runner.deps.store import DependencyStore

_DIRECTORIES = {
    "npm_config_cache": "npm",
    "YARN_CACHE_FOLDER": "yarn",
    "COREPACK_HOME": "corepack",  # the yarn and pnpm releases corepack fetches
    "PIP_CACHE_DIR": "pip",
    "UV_CACHE_DIR": "uv",
    "POETRY_CACHE_DIR": "poetry",
    "GOMODCACHE": "go-mod",
    "GOCACHE": "go-build",
}
_QUIET = {
    "npm_config_update_notifier": "false",
    "npm_config_fund": "false",
    "npm_config_audit": "false",
    "npm_config_progress": "false",
    "COREPACK_ENABLE_DOWNLOAD_PROMPT": "0",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    "POETRY_NO_INTERACTION": "1",
    "UV_NO_PROGRESS": "1",
    # Go makes its module cache read-only; eviction must be able to delete it.
    "GOFLAGS": "-modcacherw",
}


def download_env(store: DependencyStore) -> dict[str, str]:
    """The variables that point every install tool at its cache in ``store``."""
    store.downloads("pnpm")
    env = {name: str(store.downloads(tool)) for name, tool in _DIRECTORIES.items()}
    return {**env, **_QUIET}


TS_NODE_CACHE = "TS_NODE_CACHE_DIRECTORY"
"""Where ts-node, which ``@pulumi/pulumi`` runs TypeScript programs with, caches its output."""


def compile_cache_env(store: DependencyStore, owner: str) -> dict[str, str]:
    """``TS_NODE_CACHE_DIRECTORY`` in ``store``: a TypeScript program compiled once, not per run.

    ts-node keeps what it compiled in the temporary directory by default; a run pod's goes
    with the pod, so every pod run compiled its program again (1.1 of the 2.3 s the
    benchmark's small program took in a pod, 29 ms with the cache). In the store it lasts
    as the download caches do (emptied when the store is over its limit). One directory
    per ``owner`` (a Stack): ts-node writes its files in place, so runs that may overlap
    must not share them.
    """
    digest = hashlib.sha256(owner.encode()).hexdigest()[:16]
    return {TS_NODE_CACHE: str(store.downloads("ts-node") / digest)}


VARIABLES = frozenset(_DIRECTORIES) | frozenset(_QUIET) | {TS_NODE_CACHE}
"""The names of every variable ``download_env`` and ``compile_cache_env`` set."""


def pnpm_store(env: Mapping[str, str]) -> Path | None:
    """The content-addressed store of pnpm, beside npm's cache in ``env`` (None: not given).

    pnpm takes it as ``--store-dir``: npm reads every ``npm_config_*`` variable too, and
    warns about one it does not know.
    """
    cache = env.get("npm_config_cache")
    return Path(cache).parent / "pnpm" if cache else None
