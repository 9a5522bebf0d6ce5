"""Fixtures of the source tests: a silent port and a passphrase-protected SSH key.

The git servers and repositories come from ``tests/reconcile/conftest.py``.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reconcile.source.helpers import SSH_KEYGEN


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
