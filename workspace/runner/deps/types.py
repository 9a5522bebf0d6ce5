"""What installing a program's dependencies takes and makes (``InstallRecord`` is a runner type)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workspace.runner.types import InstallRecord


class Permanence(enum.Enum):
    """Whether a failed install can succeed by itself later."""

    TRANSIENT = "transient"
    """A registry or mirror did not answer, or the cause is unknown: retry with backoff."""
    PERMANENT = "permanent"
    """The manifest, lockfile or toolchain can never work as written: wait for a change."""


class DependencyError(Exception):
    """Installing failed; ``message`` says what ran and the tool's own last lines.

    ``permanence`` decides between a retry and a stall; ``record`` is the failed install
    (for the metrics), None when nothing was installed yet (a missing tool, a bad option).
    """

    def __init__(
        self, message: str, permanence: Permanence, record: InstallRecord | None = None
    ) -> None:
        """A failure saying ``message``."""
        super().__init__(message)
        self.message = message
        self.permanence = permanence
        self.record = record


@dataclass(frozen=True, slots=True)
class Activation:
    """What makes a program use an installed environment.

    ``links``: symlinks to make in the program's directory (name → target in the
    environment); ``env``: variables for the CLI, the language host and the program;
    ``path``: directories to put first on their ``PATH``.
    """

    links: Mapping[str, Path] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()
