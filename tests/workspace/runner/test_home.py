"""A Stack's PULUMI_HOME: no token one Stack used ever serves another; plugins are shared.

The real CLI runs the ``echo`` test program (no resources; it reports the config and the
environment it sees) on the test bed's ``file://`` backend, or talks to a fake Pulumi
Cloud on loopback that records the access token of every request.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import tarfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from testbed.pulumi_env import PulumiEnv
from tests.conftest import PROGRAMS
from tests.workspace.runner.support import STACK, run, succeeded
from workspace.runner import ErrorKind, LocalRunner, UpdateRequest

pytestmark = pytest.mark.pulumi

TOKEN_A = "tok-A-tenant-a-only"  # noqa: S105 - a fake token the fake cloud records
NO_TOKEN = "<none>"  # noqa: S105 - a label, not a token


class FakeCloud:
    """A Pulumi Cloud on loopback that knows one user and records the token of each request.

    ``GET /api/user`` with ``token`` answers who that is (the CLI's login check, after
    which it saves the token); every other request gets 401 without a valid token, else
    404 (so the CLI never gets further than selecting a stack).
    """

    def __init__(self, token: str) -> None:
        """Accept ``token`` (not yet serving)."""
        self.tokens: Counter[str] = Counter()
        self._lock = threading.Lock()
        cloud = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                sent = cloud.record(self.headers.get("Authorization"))
                status, body = 404, {"code": 404, "message": "Not found: fake cloud"}
                if sent != token:
                    status, body = 401, {"code": 401, "message": "Unauthorized: fake cloud"}
                elif self.path.split("?")[0] == "/api/user":
                    status, body = (
                        200,
                        {"githubLogin": "tenant-a", "name": "A", "organizations": []},
                    )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _answer  # noqa: N815

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The backend URL (``PULUMI_BACKEND_URL``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(self, authorization: str | None) -> str:
        """Count one request by the token it carried (``token <value>``); that token."""
        token = (authorization or "").removeprefix("token ").strip() or NO_TOKEN
        with self._lock:
            self.tokens[token] += 1
        return token

    def seen(self) -> Counter[str]:
        """Requests so far, by token."""
        with self._lock:
            return Counter(self.tokens)

    def __enter__(self) -> Self:
        """Start serving."""
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def fake_cloud() -> Iterator[FakeCloud]:
    """A running fake Pulumi Cloud."""
    with FakeCloud(TOKEN_A) as cloud:
        yield cloud


def echo_program(root: Path, name: str = "echo") -> Path:
    """A private copy of the ``echo`` program."""
    work_dir = root / name
    shutil.copytree(PROGRAMS / "echo", work_dir)
    return work_dir


def cloud_env(pulumi_env: PulumiEnv, cloud: FakeCloud) -> dict[str, str]:
    """The test bed's env with the fake cloud as backend (and no token)."""
    return {**pulumi_env.env, "PULUMI_BACKEND_URL": cloud.url}


@pytest.mark.parametrize("own_homes", [True, False], ids=["own-homes", "shared-home"])
def test_a_token_one_stack_used_is_never_sent_for_another(
    runner: LocalRunner,
    pulumi_env: PulumiEnv,
    fake_cloud: FakeCloud,
    tmp_path: Path,
    own_homes: bool,  # noqa: FBT001 - a test parameter
) -> None:
    """Stack A logs in with its token; Stack B, without one, fails and never sends A's.

    The CLI saves the token it was given in ``PULUMI_HOME/credentials.json`` and reuses
    it when a later command has none. Each Stack has its own home, and no home keeps a
    saved token after an operation (which also covers callers sharing one home).
    """
    home_a = tmp_path / "a" / "home" if own_homes else None
    home_b = tmp_path / "b" / "home" if own_homes else None
    env = cloud_env(pulumi_env, fake_cloud)
    a = UpdateRequest(
        work_dir=echo_program(tmp_path / "a"),
        stack=STACK,
        env={**env, "PULUMI_ACCESS_TOKEN": TOKEN_A},
        pulumi_home=home_a,
    )
    b = UpdateRequest(
        work_dir=echo_program(tmp_path / "b"), stack=STACK, env=env, pulumi_home=home_b
    )

    first = run(runner, a)
    assert first.error is ErrorKind.SETUP_FAILED  # the fake cloud has no stacks
    assert fake_cloud.seen()[TOKEN_A] > 1  # A logged in with its token, and went on
    before = fake_cloud.seen()

    second = run(runner, b)

    assert second.error is ErrorKind.SETUP_FAILED
    assert "PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions" in (
        second.message
    )
    assert fake_cloud.seen() - before == Counter()  # B sent nothing, in particular not A's
    for home in {home_a or pulumi_env.home, home_b or pulumi_env.home}:
        assert not (home / "credentials.json").exists()


def test_stack_homes_share_the_plugin_store_through_a_symlink(
    runner: LocalRunner, pulumi_env: PulumiEnv, tmp_path: Path
) -> None:
    """Each Stack's home links ``plugins`` to the runner's store; the CLI follows the link.

    A plugin installed through one Stack's home lands in the store, and the CLI finds it
    (``plugin ls``, and running it with ``plugin run``) through another Stack's home.
    """
    homes = [tmp_path / name / "home" for name in ("a", "b")]
    for home in homes:
        request = UpdateRequest(
            work_dir=echo_program(home.parent), stack=STACK, env=pulumi_env.env, pulumi_home=home
        )
        assert succeeded(run(runner, request))
    store = pulumi_env.home / "plugins"
    assert [(home / "plugins").readlink() for home in homes] == [store, store]
    archive = fake_plugin(tmp_path, "it-ran")

    pulumi(pulumi_env, homes[0], "plugin", "install", "resource", "fake", "1.0.0", "-f", archive)

    assert (store / "resource-fake-v1.0.0" / "pulumi-resource-fake").is_file()
    assert (homes[0] / "plugins").is_symlink()
    listed = json.loads(pulumi(pulumi_env, homes[1], "plugin", "ls", "--json"))
    assert {(p["name"], p["version"]) for p in listed} >= {("fake", "1.0.0")}
    ran = pulumi(pulumi_env, homes[1], "plugin", "run", "--kind", "resource", "fake@1.0.0")
    assert "it-ran" in ran


def fake_plugin(root: Path, says: str) -> Path:
    """A plugin archive holding ``pulumi-resource-fake``, a script printing ``says``."""
    script = root / "pulumi-resource-fake"
    script.write_text(f"#!/bin/sh\necho {says}\n")
    script.chmod(0o755)
    archive = root / "fake-plugin.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(script, arcname=script.name)
    return archive


def pulumi(pulumi_env: PulumiEnv, home: Path, *args: str | Path) -> str:
    """Run the test bed's CLI with ``PULUMI_HOME=home``; its stdout."""
    return subprocess.run(
        [str(pulumi_env.bin_dir / "pulumi"), "--non-interactive", *map(str, args)],
        env={**os.environ, **pulumi_env.env, "PULUMI_HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
