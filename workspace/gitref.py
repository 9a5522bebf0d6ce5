"""What git accepts as a commit id and as a branch name: one definition for spec and source."""

from __future__ import annotations

import re

# An abbreviated or full object name: git resolves no fewer than 4 hex digits; 64 is SHA-256.
_COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")
# `git check-ref-format --branch` rules: no control characters, space, ~ ^ : ? * [ or \;
# no leading "-" or "/", no "..", "@{", "//" or "/." anywhere, no trailing "/" or ".".
_BRANCH = re.compile(r"(?!-)(?!/)[^\x00-\x20\x7f~^:?*\[\\]+(?<![/.])")
_BRANCH_FORBIDDEN = ("..", "//", "/.", "@{")


def is_commit(text: str) -> bool:
    """Whether ``text`` is a commit id git can resolve (4 to 64 hex digits)."""
    return _COMMIT.fullmatch(text) is not None


def branch_name(branch: str) -> str | None:
    """The short name of ``branch`` (``main`` or ``refs/heads/main``), or None if invalid.

    A ref outside ``refs/heads/`` (a tag, say) is not a branch and gives None.
    """
    name = branch.removeprefix("refs/heads/")
    if name.startswith("refs/") or not _BRANCH.fullmatch(name):
        return None
    if name.startswith(".") or name.endswith(".lock") or any(s in name for s in _BRANCH_FORBIDDEN):
        return None
    return name
