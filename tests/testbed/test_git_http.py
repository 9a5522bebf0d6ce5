"""``GitHttpServer``: private by default (401 without an account), public on request."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout

pytestmark = pytest.mark.git

ACCOUNT = Account("reader", "s3cret-reader-pass")


def clone(url: str, into: Path) -> subprocess.CompletedProcess[str]:
    """``git clone`` without any credential helper or prompt."""
    return subprocess.run(
        ["git", "-c", "credential.helper=", "clone", "--quiet", url, str(into)],
        capture_output=True,
        text=True,
        check=False,
        env={"GIT_TERMINAL_PROMPT": "0", "HOME": str(into.parent), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("visibility", ["private", "public"])
def test_an_anonymous_clone_is_refused_unless_the_server_is_public(
    tmp_path: Path, visibility: str
) -> None:
    """Private: 401 and nothing cloned; public: the clone has the pushed file."""
    public = visibility == "public"
    server = GitHttpServer(tmp_path / "server", [ACCOUNT], public=public)
    server.start()
    try:
        server.create_repo("app")
        Checkout(server.push_url("app"), tmp_path / "push", "main").commit({"a.txt": "A"}, "a")
        result = clone(server.url("app"), tmp_path / "clone")
        assert (result.returncode == 0) is public, result.stderr
        assert (tmp_path / "clone" / "a.txt").exists() is public
        assert [r.user for r in server.requests][:1] == ["" if public else None]
    finally:
        server.stop()
