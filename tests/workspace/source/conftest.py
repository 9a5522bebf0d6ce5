"""Fixtures of the source tests: git servers with and without authentication, and more.

``git_server`` (anonymous ``git://``, from ``tests/conftest.py``) and ``git_http`` (smart
HTTP behind basic authentication) serve bare repositories on loopback. ``git_repo`` and
``http_repo`` give a test a fresh repository: its clone URL and a ``Checkout`` to commit
and push to. ``git_argv`` records the argv of every process started during a test.
``silent_port`` never answers; ``ssh_key`` is a passphrase-protected SSH key.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout, GitServer
from tests.workspace.source.helpers import SSH_KEYGEN
from workspace.source import GitCredentials


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) but never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


@pytest.fixture
def ssh_key(tmp_path: Path) -> tuple[str, str]:
    """An ed25519 private key protected by a passphrase: (key text, passphrase)."""
    if SSH_KEYGEN is None:
        pytest.skip("ssh-keygen (OpenSSH client) is not installed")
    passphrase = secrets.token_urlsafe(12)
    key = tmp_path / "id_test"
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", passphrase, "-C", "test", "-f", str(key)],
        check=True,
        timeout=60,
    )
    return key.read_text(), passphrase


@pytest.fixture(scope="session")
def http_account() -> Account:
    """A random username and password the HTTP server accepts."""
    return Account.random()


@pytest.fixture(scope="session")
def http_token() -> Account:
    """A random token the HTTP server accepts as the password of user ``git``."""
    return Account("git", f"tok_{secrets.token_hex(20)}")


def _start_http(root: Path, accounts: list[Account], *, protocol_v2: bool) -> GitHttpServer:
    server = GitHttpServer(root, accounts, protocol_v2=protocol_v2)
    server.start()
    return server


@pytest.fixture(scope="session")
def git_http(
    tmp_path_factory: pytest.TempPathFactory, http_account: Account, http_token: Account
) -> Iterator[GitHttpServer]:
    """Smart HTTP with basic authentication, protocol v2 (commits fetchable by id)."""
    server = _start_http(
        tmp_path_factory.mktemp("git-http"), [http_account, http_token], protocol_v2=True
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def git_http_v0(
    tmp_path_factory: pytest.TempPathFactory, http_account: Account
) -> Iterator[GitHttpServer]:
    """Smart HTTP that speaks protocol v0 only, so it refuses to send a commit by id."""
    server = _start_http(tmp_path_factory.mktemp("git-http-v0"), [http_account], protocol_v2=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def basic_auth(http_account: Account) -> GitCredentials:
    """Username + password credentials the HTTP server accepts."""
    return GitCredentials(username=http_account.username, password=http_account.password)


@pytest.fixture
def token_auth(http_token: Account) -> GitCredentials:
    """Token credentials the HTTP server accepts (default username ``git``)."""
    return GitCredentials(token=http_token.password)


@pytest.fixture
def repo_name() -> str:
    """A repository name no other test uses."""
    return f"repo-{secrets.token_hex(4)}"


@pytest.fixture
def git_repo(git_server: GitServer, repo_name: str, tmp_path: Path) -> tuple[str, Checkout]:
    """A fresh anonymous ``git://`` repository: (clone URL, upstream working copy)."""
    url = git_server.create_repo(repo_name)
    return url, Checkout(url, tmp_path / "upstream")


@pytest.fixture
def http_repo(git_http: GitHttpServer, repo_name: str, tmp_path: Path) -> tuple[str, Checkout]:
    """A fresh repository behind basic auth: (clone URL, upstream working copy via file://)."""
    url = git_http.create_repo(repo_name)
    return url, Checkout(git_http.push_url(repo_name), tmp_path / "upstream")


@pytest.fixture
def git_argv(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every process started through ``subprocess.Popen`` during the test."""
    recorded: list[list[str]] = []

    class RecordingPopen(subprocess.Popen[Any]):
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            recorded.append([str(a) for a in args])
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", RecordingPopen)
    return recorded
