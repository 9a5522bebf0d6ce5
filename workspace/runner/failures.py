"""Which ``ErrorKind`` a failed phase of an operation is, from where it failed and what it said.

The texts matched here are the Pulumi CLI's own (its stderr, the engine's error
diagnostics, a language host's report of a program that does not compile), as plain text
(``Cli`` strips terminal codes); the runner's tests pin them against the real CLI.
"""

from __future__ import annotations

import re
from typing import Literal

from workspace.runner.types import ErrorKind

# Where a failure happened; decides how an ambiguous CLI error is classified.
Phase = Literal[
    "project",
    "install",
    "plugins",
    "select",
    "config",
    "environment",
    "refresh",
    "update",
    "preview",
    "destroy",
    "cancel",
]

# Another update holds the stack: Pulumi Cloud answers 409, self-managed backends name the lock.
_CONFLICT = re.compile(
    r"\[409\] Conflict: Another update is currently in progress|the stack is currently locked by"
)
_NOT_FOUND = re.compile(r"no stack named.*found")
_REFRESH_DRIFT = "no changes were expected"  # the CLI's --expect-no-changes failure
# Source problems: a project or stack file the CLI cannot use (while setting up), or a
# program that does not compile (Python reports it when the language host imports it;
# other language hosts print these on stdout).
_BAD_PROJECT = re.compile(r"Pulumi(\.[\w-]+)?\.(ya?ml|json)|project file")
_BAD_SYNTAX = re.compile(r"^\s*(SyntaxError|IndentationError|TabError): ", re.MULTILINE)
_NOT_COMPILED = re.compile(
    r"Build FAILED\.|Unable to compile TypeScript|: syntax error:|: undefined:"
)
# A language host that checked the program, printed its own "Error:" lines and bailed, so
# that neither the engine nor the CLI said anything more (YAML's type errors).
_HOST_REFUSED = re.compile(r"^\s*Error: ", re.MULTILINE)


class StepFailedError(Exception):
    """A phase failed; carries the classification and, if the runner made it, the message."""

    def __init__(self, phase: Phase, kind: ErrorKind, detail: str = "") -> None:
        """A failure of ``phase``, of ``kind``; ``detail`` is the message when not the CLI's."""
        super().__init__(f"{phase}: {kind}")
        self.phase = phase
        self.kind = kind
        self.detail = detail


def stack_missing(stderr: str) -> bool:
    """The CLI said the stack it was given does not exist (any command, any phase)."""
    return bool(_NOT_FOUND.search(stderr))


def _program_invalid(phase: Phase, stdout: str, stderr: str) -> bool:
    """The program or its project file cannot run as written: a change of source is needed."""
    if _NOT_COMPILED.search(stdout) or _BAD_SYNTAX.search(stderr):
        return True
    if phase in ("update", "preview") and not stderr.strip() and _HOST_REFUSED.search(stdout):
        return True
    return phase in ("select", "config") and bool(_BAD_PROJECT.search(stderr))


def classify(phase: Phase, stdout: str, stderr: str) -> ErrorKind:
    """The kind of a CLI failure in ``phase``; ``stderr`` includes the engine's diagnostics."""
    if _CONFLICT.search(stderr):
        return ErrorKind.CONFLICT
    if phase == "select" and stack_missing(stderr):
        return ErrorKind.STACK_NOT_FOUND
    if _program_invalid(phase, stdout, stderr):
        return ErrorKind.PROGRAM_INVALID
    if phase == "refresh" and _REFRESH_DRIFT in stderr:
        return ErrorKind.REFRESH_CHANGES
    setup = phase in ("select", "config", "environment")
    return ErrorKind.SETUP_FAILED if setup else ErrorKind.UPDATE_FAILED
