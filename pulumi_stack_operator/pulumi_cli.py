"""Finding the Pulumi CLI the local runner runs, once, at start-up.

The operator drives the CLI itself (``workspace.runner.cli``) and needs only the binary's
path: it does not import the Pulumi SDK, whose Automation API would cost every operator
process some 20 MiB and half a second of start-up for that one path. ``pulumi_command``
resolves ``pulumi`` on ``PATH`` to an absolute path (symlinks resolved) and checks its
version: a missing or too old CLI fails fast, and a Stack whose ``envRefs`` set ``PATH``
cannot substitute another ``pulumi``. The language host and bundled plugins are found next
to the real binary (the runner puts its directory first on the CLI's ``PATH``).

``pulumi version`` costs a process start (some 0.1 s of CPU, 0.1 to 0.3 s here) and a run
pod's agent would pay it on every run: given a ``memo`` file (on the namespace's cache
volume), the version read is kept there with the binary's identity (path, size,
modification time, inode) and read back while the binary is the same one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

# The oldest CLI with every command and flag the runner uses (the Automation API's own
# floor, which those commands were built for).
MINIMUM_VERSION: Final = (3, 1, 0)
VERSION_TIMEOUT: Final = 60.0  # seconds for ``pulumi version``
_VERSION: Final = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


@dataclasses.dataclass(frozen=True)
class PulumiCli:
    """The Pulumi CLI binary: ``command`` is its absolute path (``CliBinary``)."""

    command: str


VERSION_MEMO = "pulumi-version.json"
"""The file name a version memo has (``remembered_version``) in a cache directory."""


class CliVersionError(RuntimeError):
    """The CLI is older than ``MINIMUM_VERSION``, or its version cannot be read."""


def pulumi_command(memo: Path | None = None) -> PulumiCli:
    """The ``pulumi`` on ``PATH``, resolved and version-checked.

    ``memo``: a file keeping the version of the binary last checked (see the module doc);
    one that cannot be read or written is as none.

    Raises:
        FileNotFoundError: no ``pulumi`` on ``PATH``.
        CliVersionError: it is too old, or ``pulumi version`` fails.
    """
    found = shutil.which("pulumi")
    if found is None:
        msg = "the pulumi CLI is not on PATH"
        raise FileNotFoundError(msg)
    binary = Path(found).resolve()
    version = remembered_version(binary, memo) if memo is not None else cli_version(binary)
    if version < MINIMUM_VERSION:
        need = ".".join(map(str, MINIMUM_VERSION))
        msg = f"{binary} is version {'.'.join(map(str, version))}; {need} or newer is needed"
        raise CliVersionError(msg)
    return PulumiCli(str(binary))


def remembered_version(binary: Path, memo: Path) -> tuple[int, int, int]:
    """The version of ``binary``: from ``memo`` if it names this very binary, else asked.

    A version asked is written to ``memo`` (atomically, its directory made if missing; a
    failure to write is ignored).
    """
    identity = _identity(binary)
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
        kept = json.loads(memo.read_text())
        if kept.get("binary") == identity and len(kept["version"]) == len(MINIMUM_VERSION):
            major, minor, patch = (int(part) for part in kept["version"])
            return major, minor, patch
    version = cli_version(binary)
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        fresh = memo.with_name(f".{memo.name}.{os.getpid()}")
        fresh.write_text(json.dumps({"binary": identity, "version": list(version)}))
        fresh.replace(memo)
    return version


def _identity(binary: Path) -> list[object]:
    """What tells one binary from another at the same path: a replaced file differs."""
    stat = binary.stat()
    return [str(binary), stat.st_size, stat.st_mtime_ns, stat.st_ino]


def cli_version(binary: Path) -> tuple[int, int, int]:
    """``major, minor, patch`` of the CLI at ``binary`` (from ``pulumi version``)."""
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    try:
        done = subprocess.run(
            [str(binary), "version"],
            capture_output=True,
            text=True,
            check=True,
            timeout=VERSION_TIMEOUT,
            env=env,
        )
    except (OSError, subprocess.SubprocessError) as err:
        msg = f"`{binary} version` failed: {err}"
        raise CliVersionError(msg) from err
    match = _VERSION.match(done.stdout.strip())
    if match is None:
        msg = f"`{binary} version` printed no version: {done.stdout.strip()[:200]!r}"
        raise CliVersionError(msg)
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch
