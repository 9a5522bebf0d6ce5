"""Fixtures for the install tests: fake tools on a PATH of their own, and projects.

A fake tool is a shell script that records its arguments (one line per call in
``calls.log`` beside it), prints a version for ``--version`` / ``version``, and for an
install (``npm ci``, ``yarn install``…) makes what the real tool makes (``node_modules``),
so the install code runs for real without a registry.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from workspace.runner.deps import Tools
from workspace.runner.project import Project, load_project

SCRIPT = """#!/bin/sh
PATH=/usr/bin:/bin
echo "$(basename "$0") $*" >> "{log}"
case "$1" in
  --version|version) echo "{name} {version}"; exit 0 ;;
esac
{body}
"""
MAKES_MODULES = 'mkdir -p node_modules/left-pad && echo "$@" > node_modules/.args'


class FakeBin:
    """A directory of fake tools; ``calls`` are the command lines they got."""

    def __init__(self, directory: Path) -> None:
        """Use ``directory`` (created)."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "calls.log"

    def add(self, name: str, body: str = "exit 0", version: str = "1.0.0") -> Path:
        """A tool ``name`` running ``body`` (sh) for anything but its version."""
        path = self.directory / name
        path.write_text(SCRIPT.format(log=self.log, name=name, version=version, body=body))
        path.chmod(0o755)
        return path

    @property
    def calls(self) -> list[str]:
        """Every call so far, ``<tool> <args>``."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def tools(self, stop: threading.Event | None = None, *, system: bool = False) -> Tools:
        """``Tools`` whose PATH is this directory (then the system's, if ``system``)."""
        path = str(self.directory) + (os.pathsep + os.environ["PATH"] if system else "")
        return Tools({"PATH": path, "HOME": str(self.directory)}, stop or threading.Event(), 5)


@pytest.fixture
def fake_bin(tmp_path: Path) -> FakeBin:
    """An empty directory of fake tools."""
    return FakeBin(tmp_path / "bin")


@pytest.fixture
def node_bin(fake_bin: FakeBin) -> FakeBin:
    """``node``, ``npm``, ``yarn`` and ``pnpm`` that make ``node_modules``."""
    fake_bin.add("node", version="v20.0.0")
    for manager in ("npm", "yarn", "pnpm"):
        fake_bin.add(manager, MAKES_MODULES)
    return fake_bin


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Project]:
    """A program directory with ``Pulumi.yaml`` for ``runtime`` and the given files."""

    def make(runtime: str, options: str = "", **files: str) -> Project:
        directory = tmp_path / "program"
        directory.mkdir(exist_ok=True)
        body = f"name: app\nruntime:\n  name: {runtime}\n"
        if options:
            body += f"  options: {options}\n"
        (directory / "Pulumi.yaml").write_text(body)
        for name, text in files.items():
            (directory / name.replace("__", ".")).write_text(text)
        return load_project(directory)

    return make
