"""The Go toolchain every recipe builds with, and the wrapper modules it builds in.

Provides ``Go`` (the installed ``go``, run with this project's module and build caches under
``cache_root()``: ``GOFLAGS=-modcacherw``, ``GOTOOLCHAIN=local``, ``CGO_ENABLED=0``) and
``new_wrapper`` (an empty module under the cache from which one recipe requires and builds
published modules).

Guarantees: ``Go.find`` raises ``AssetError`` saying how to install Go (or point at existing
binaries) when there is none; every failed ``go`` command raises ``AssetError`` with the
tail of its stderr; nothing is fetched but through the Go module proxy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.assets.core import AssetError, log


@dataclasses.dataclass(frozen=True)
class Go:
    """The Go toolchain, run with the cache's module and build caches."""

    cache: Path
    version: str

    @classmethod
    def find(cls, cache: Path) -> Go:
        """The ``go`` on PATH, with its version (``go1.26.8``), caching under ``cache``."""
        go = shutil.which("go")
        if go is None:
            msg = (
                "Go is not installed, and a test binary must be built. Install Go 1.26 or "
                "newer (https://go.dev/doc/install), or point KUBEBUILDER_ASSETS / "
                "TEST_ASSET_* at existing binaries (see docs/test-bed.md)."
            )
            raise AssetError(msg)
        return cls(cache=cache, version=installed_version(go))

    def env(self) -> dict[str, str]:
        """This process's environment with the cache's Go settings."""
        env = dict(os.environ)
        env.update(
            GOMODCACHE=str(self.cache / "go" / "mod"),
            GOCACHE=str(self.cache / "go" / "build"),
            GOFLAGS="-modcacherw",
            GOTOOLCHAIN="local",
            CGO_ENABLED="0",
        )
        return env

    def run(
        self, args: Sequence[str], cwd: Path, extra_env: Mapping[str, str] | None = None
    ) -> str:
        """Run ``go args…`` in ``cwd``; its stdout."""
        log("go " + " ".join(args))
        env = {**self.env(), **(extra_env or {})}
        for wait in (*RETRY_WAITS, None):
            proc = subprocess.run(
                ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
            )
            if proc.returncode == 0:
                return proc.stdout
            if wait is None or not network_failure(proc.stderr):
                break
            log(f"go {args[0]}: the network failed; trying again in {wait:.0f} s")
            time.sleep(wait)  # a backoff before a retry, not a synchronisation
        msg = f"go {' '.join(args)} failed in {cwd}:\n{proc.stderr[-4000:]}"
        raise AssetError(msg)

    def download(
        self,
        module: str,
        cwd: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> Mapping[str, object]:
        """``go mod download -json module``: where it is (``Dir``, ``GoMod``) and its origin."""
        args = ["mod", "download", "-json", module]
        info: dict[str, object] = json.loads(self.run(args, cwd, extra_env))
        if info.get("Error"):
            msg = f"the Go module proxy does not serve {module}: {info['Error']}"
            raise AssetError(msg)
        return info

    def mod_json(self, gomod: str, cwd: Path) -> Mapping[str, object]:
        """The go.mod file ``gomod`` as ``go mod edit -json`` reads it."""
        result: dict[str, object] = json.loads(self.run(["mod", "edit", "-json", gomod], cwd))
        return result


RETRY_WAITS = (5.0, 20.0)
"""Seconds before each retry of a go command that failed on the network (then it fails)."""
_NETWORK = re.compile(
    r"i/o timeout|dial tcp|connection (?:reset|refused)|TLS handshake timeout"
    r"|server misbehaving|temporary failure in name resolution|unexpected EOF"
    r"|502 Bad Gateway|503 Service Unavailable|504 Gateway Timeout",
    re.IGNORECASE,
)


def network_failure(stderr: str) -> bool:
    """Whether go's ``stderr`` says the module proxy could not be reached (worth a retry)."""
    return _NETWORK.search(stderr) is not None


def installed_version(go: str) -> str:
    """``go env GOVERSION`` of the toolchain ``go``."""
    return subprocess.run(
        [go, "env", "GOVERSION"], check=True, capture_output=True, text=True
    ).stdout.strip()


def new_wrapper(go: Go, name: str, header: str) -> Path:
    """An empty module ``local/<name>`` (go.mod: ``header``) under the cache, made afresh."""
    wrapper = go.cache / "wrappers" / name
    shutil.rmtree(wrapper, ignore_errors=True)
    wrapper.mkdir(parents=True)
    (wrapper / "go.mod").write_text(f"module local/{name}\n\n{header}")
    return wrapper
