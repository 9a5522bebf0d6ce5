"""What the source tests share: reading a checkout, running either operation, error texts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.git_server import Checkout, git
from workspace.source import GitCredentials, checkout, resolve_revision

Repo = tuple[str, Checkout]
SSH_KEYGEN = shutil.which("ssh-keygen")
SSH = shutil.which("ssh")

SOME_COMMIT = "0123456789abcdef0123456789abcdef01234567"
"""A full commit id no repository of the tests holds (for calls that fail before a fetch)."""

OPERATIONS = [pytest.param("resolve", id="resolve"), pytest.param("checkout", id="checkout")]


def head(work: Path) -> str:
    """The commit checked out in ``work``."""
    return git("rev-parse", "HEAD", cwd=work).strip()


def tree(work: Path) -> dict[str, str]:
    """Every file under ``work`` outside ``.git``, as relative path → text."""
    return {
        str(path.relative_to(work)): path.read_text()
        for path in sorted(work.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(work).parts
    }


def leftovers(work: Path) -> list[str]:
    """Staging directories of interrupted clones next to ``work``."""
    return [p.name for p in work.parent.glob(f".{work.name}.partial-*")]


def operate(
    operation: str,
    url: str,
    work: Path,
    credentials: GitCredentials | None = None,
    timeout: float = 60,
    commit: str = SOME_COMMIT,
) -> str:
    """Run ``resolve_revision`` of branch ``main`` or ``checkout`` of ``commit``.

    Returns the commit either reports. The reconciler makes exactly these two calls (it
    resolves a branch, then checks the commit out), so a test of a failure runs both.
    """
    if operation == "resolve":
        return resolve_revision(url, "main", credentials, timeout=timeout)
    return checkout(url, work, commit=commit, credentials=credentials, timeout=timeout)


def error_texts(err: BaseException) -> str:
    """Everything an exception (and its chain) would show in a log or a status message."""
    texts = []
    seen: BaseException | None = err
    while seen is not None:
        texts += [str(seen), repr(seen), *map(str, seen.args)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)
