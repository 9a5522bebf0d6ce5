"""A plan to install one program's dependencies, and the content key of its environment.

A runtime module (``nodejs``, ``python``, ``golang``) looks at the program and returns an
``InstallPlan``: what the status shows (``tool``), the key of the environment it makes, how
to make it in an empty directory and how to make the program use it. The key hashes every
input that can change what gets installed: the dependency files' content, the tool's and
the runtime's versions, the options, the platform; an unchanged program finds its
environment and installs nothing.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from workspace.runner.deps.types import Activation

KEY_REVISION = "1"  # bump when an install recipe changes what it makes
KEY_LENGTH = 24  # hex digits of the key in an environment's name


@dataclass(frozen=True)
class InstallPlan:
    """How to install a program's dependencies (see the module docstring).

    ``install`` builds the environment into the empty directory it is given (raising
    ``ToolFailedError``/``ToolStoppedError``/``DependencyError``); ``activation`` says how
    the program uses the environment in that directory.
    """

    kind: str
    tool: str
    key: str
    install: Callable[[Path], None]
    activation: Callable[[Path], Activation]


def content_key(kind: str, tool: str, versions: Iterable[str], files: Iterable[Path]) -> str:
    """The key of an environment made by ``tool`` from ``files`` with these ``versions``."""
    digest = hashlib.sha256()
    for part in (KEY_REVISION, kind, tool, sys.platform, platform.machine(), *versions):
        digest.update(part.encode() + b"\0")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:KEY_LENGTH]


def present(directory: Path, names: Iterable[str]) -> list[Path]:
    """The files among ``names`` that exist in ``directory``, in that order."""
    return [directory / name for name in names if (directory / name).is_file()]
