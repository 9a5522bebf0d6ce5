"""Finding the Pulumi CLI the local runner runs, once, at start-up.

The operator drives the CLI itself (``workspace.runner.cli``) and needs only the binary's
path: it does not import the Pulumi SDK, whose Automation API would cost every operator
process some 20 MiB and half a second of start-up for that one path. ``pulumi_command``
resolves ``pulumi`` on ``PATH`` to an absolute path (symlinks resolved) and checks its
version: a missing or too old CLI fails fast, and a Stack whose ``envRefs`` set ``PATH``
cannot substitute another ``pulumi``. The language host and bundled plugins are found next
to the real binary (the runner puts its directory first on the CLI's ``PATH``).
"""

from __future__ import annotations

import dataclasses
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


class CliVersionError(RuntimeError):
    """The CLI is older than ``MINIMUM_VERSION``, or its version cannot be read."""


def pulumi_command() -> PulumiCli:
    """The ``pulumi`` on ``PATH``, resolved and version-checked.

    Raises:
        FileNotFoundError: no ``pulumi`` on ``PATH``.
        CliVersionError: it is too old, or ``pulumi version`` fails.
    """
    found = shutil.which("pulumi")
    if found is None:
        msg = "the pulumi CLI is not on PATH"
        raise FileNotFoundError(msg)
    binary = Path(found).resolve()
    version = cli_version(binary)
    if version < MINIMUM_VERSION:
        need = ".".join(map(str, MINIMUM_VERSION))
        msg = f"{binary} is version {'.'.join(map(str, version))}; {need} or newer is needed"
        raise CliVersionError(msg)
    return PulumiCli(str(binary))


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
