"""The git server serves bare repositories on loopback that tests commit to."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.git_server import Checkout, GitServer, git

pytestmark = pytest.mark.git


def test_commit_push_then_clone(git_server: GitServer, tmp_path: Path) -> None:
    """A pushed commit is what ls-remote reports and what a fresh clone contains."""
    url = git_server.create_repo("smoke")
    assert url.startswith("git://127.0.0.1:")
    checkout = Checkout(url, tmp_path / "work")
    first = checkout.commit({"README": "one\n"}, "first")
    second = checkout.commit({"README": "two\n"}, "second")

    remote = git("ls-remote", url, "refs/heads/main").split()
    git("clone", "--quiet", url, str(tmp_path / "clone"))

    assert first != second
    assert remote[0] == second
    assert (tmp_path / "clone" / "README").read_text() == "two\n"


def test_a_verbose_server_counts_the_fetches_it_served(tmp_path: Path) -> None:
    """``requests`` counts upload-pack requests (ls-remote, clone), not pushes."""
    server = GitServer(tmp_path / "git", verbose=True)
    server.start()
    try:
        url = server.create_repo("counted")
        Checkout(url, tmp_path / "work").commit({"README": "x\n"})
        assert server.requests() == 0
        git("ls-remote", url)
        git("clone", "--quiet", url, str(tmp_path / "clone"))
        # The daemon logs a request once it has read it; the clients are done by now.
        assert server.requests() == 2
        assert server.requests("receive-pack") == 1
    finally:
        server.stop()
