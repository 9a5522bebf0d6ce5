"""Bare git repositories served on loopback by ``git daemon``.

``GitServer.create_repo(name)`` makes a bare repository that anyone can clone from and
push to at ``git://<host>:<port>/<name>.git`` (``host`` is loopback unless another local
address is given, e.g. the host end of the test node's network, for pods to clone from).
``Checkout`` is a working copy used by tests to commit and push, the way a user's CI would.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from testbed.process import Process, free_port

# Commits made by tests carry a fixed identity and no user configuration.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Bed",
    "GIT_AUTHOR_EMAIL": "testbed@example.invalid",
    "GIT_COMMITTER_NAME": "Test Bed",
    "GIT_COMMITTER_EMAIL": "testbed@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git with the test identity; returns stdout."""
    env = {**os.environ, **GIT_ENV, "HOME": os.environ.get("HOME", "/nonexistent")}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=60
    )
    if proc.returncode != 0:
        msg = f"git {' '.join(args)} failed: {proc.stderr.strip()}"
        raise RuntimeError(msg)
    return proc.stdout


class GitServer:
    """``git daemon`` exporting every repository under ``root``."""

    def __init__(self, root: Path, host: str = "127.0.0.1", *, verbose: bool = False) -> None:
        """Prepare (not start) a server for ``root`` listening on ``host`` (an address).

        ``verbose`` makes the daemon log every request (see ``requests``).
        """
        self.root, self.host, self.verbose = root, host, verbose
        self.repos = root / "repos"
        self.port = free_port()
        self._process: Process | None = None

    def start(self) -> None:
        """Start the daemon and wait until it accepts connections."""
        self.repos.mkdir(parents=True, exist_ok=True)
        argv = [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",  # tests push over git://
            "--informative-errors",
            f"--base-path={self.repos}",
            f"--listen={self.host}",
            f"--port={self.port}",
            *(["--verbose"] if self.verbose else []),
            str(self.repos),
        ]
        self._process = Process("git-daemon", argv, self.root / "logs", env={**os.environ})
        self._process.start(self._accepting)

    def stop(self) -> None:
        """Stop the daemon."""
        if self._process is not None:
            self._process.stop()

    def requests(self, service: str = "upload-pack") -> int:
        """How many ``service`` requests (fetches, clones, ls-remotes) the daemon has served.

        Counted from its log, so only with ``verbose``; 0 before the first.
        """
        if self._process is None or not self._process.log_path.exists():
            return 0
        text = self._process.log_path.read_text(errors="replace")
        return text.count(f"Request {service} for ")

    def _accepting(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=1):
            return True

    def url(self, name: str) -> str:
        """The clone URL of repository ``name``."""
        return f"git://{self.host}:{self.port}/{name}.git"

    def create_repo(self, name: str, branch: str = "main") -> str:
        """Create an empty bare repository whose default branch is ``branch``; returns its URL."""
        path = self.repos / f"{name}.git"
        git("init", "--bare", f"--initial-branch={branch}", str(path))
        return self.url(name)


class Checkout:
    """A working copy of a served repository, for committing and pushing."""

    def __init__(self, url: str, path: Path, branch: str = "main") -> None:
        """Initialise a working copy at ``path`` whose origin is ``url``."""
        self.url, self.path, self.branch = url, path, branch
        path.mkdir(parents=True, exist_ok=True)
        git("init", f"--initial-branch={branch}", cwd=path)
        git("remote", "add", "origin", url, cwd=path)

    def commit(self, files: Mapping[str, str], message: str = "change") -> str:
        """Write ``files`` (path → text), commit them, push; returns the commit SHA."""
        for relative, text in files.items():
            target = self.path / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        git("add", "--all", cwd=self.path)
        git("commit", "--quiet", "--message", message, cwd=self.path)
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{self.branch}", cwd=self.path)
        return git("rev-parse", "HEAD", cwd=self.path).strip()
