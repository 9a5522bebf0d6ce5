"""Running the install tools (npm, pip, uv, go, …) for one run: environment, stop, versions.

Every tool runs through ``workspace.process`` in a process group of its own, with the run's
environment (``Tools.env``), so ``stop`` interrupts it the way Ctrl-C does and nothing it
started outlives it. A tool is looked up on that environment's ``PATH``; its version (part
of an environment's cache key) is asked once per binary and modification time, then
remembered for the life of the process.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workspace import process

VERSION_TIMEOUT = 60.0  # seconds for ``<tool> --version``


class ToolFailedError(Exception):
    """A tool exited non-zero (``result`` has its output), or was interrupted."""

    def __init__(self, words: str, result: process.Completed) -> None:
        """``words`` (the tool and its subcommand) ended with ``result``."""
        super().__init__(f"{words} exited with code {result.code}")
        self.words = words
        self.result = result


class ToolStoppedError(Exception):
    """``stop`` was set before the tool could start, or it was interrupted."""


@dataclass(frozen=True)
class Tools:
    """Runs tools with one run's environment; ``on_line`` gets each output line."""

    env: Mapping[str, str] = field(repr=False)  # may hold a registry token
    stop: threading.Event
    grace: float
    on_line: Callable[[str], None] | None = None

    def which(self, name: str) -> str | None:
        """The absolute path of ``name`` on the environment's ``PATH``, or None."""
        return shutil.which(name, path=self.env.get("PATH", os.defpath))

    def run(
        self, argv: Sequence[str], cwd: Path, extra: Mapping[str, str] | None = None
    ) -> process.Completed:
        """Run ``argv`` in ``cwd`` with the environment (and ``extra`` over it).

        Raises ``ToolFailedError`` on a non-zero exit, ``ToolStoppedError`` when stopped
        (before the start or while it ran), ``OSError`` when it cannot start.
        """
        words = " ".join([Path(argv[0]).name, *argv[1:2]])
        command = process.Command(
            list(argv), cwd=cwd, env={**self.env, **(extra or {})}, grace=self.grace
        )
        output = process.Output(self.on_line, self.on_line)
        try:
            result = process.run(command, stop=self.stop, output=output)
        except process.StoppedError as err:
            raise ToolStoppedError(words) from err
        if result.interrupted:
            raise ToolStoppedError(words)
        if result.code != 0:
            raise ToolFailedError(words, result)
        return result

    def version(self, binary: str, *args: str) -> str:
        """What ``binary args`` prints (first line), asked once per binary version."""
        stat = Path(binary).stat()
        return _version(binary, stat.st_mtime_ns, stat.st_size, tuple(args) or ("--version",))


@functools.cache
def _version(binary: str, mtime: int, size: int, args: tuple[str, ...]) -> str:
    """``binary args``'s first output line; cached by the binary's identity."""
    del mtime, size  # part of the cache key only
    result = process.run(process.Command([binary, *args], timeout=VERSION_TIMEOUT))
    lines = (result.stdout + result.stderr).strip().splitlines()
    return lines[0].strip() if result.code == 0 and lines else f"unknown ({result.code})"
