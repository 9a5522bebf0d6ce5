"""The package mirror passes npm and PyPI through to real installs and keeps what it fetched.

The install tests reach the real registries through the host, so they stay few and small.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.package_mirror import PackageMirror, Route, env
from testbed.process import free_port

NO_SUCH_PACKAGE = "testbed-package-mirror-no-such-package"


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[PackageMirror]:
    """A started mirror with an empty cache, for one test."""
    with PackageMirror(tmp_path / "mirror-cache") as started:
        yield started


def get(url: str, accept: str = "") -> tuple[int, bytes]:
    """GET ``url`` (with ``accept``); its status and body, error statuses included."""
    headers = {"Accept": accept} if accept else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - our loopback URL
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - as above
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def install_env(mirror: PackageMirror) -> dict[str, str]:
    """This process's environment without npm, pip and uv settings, plus ``env(mirror)``."""
    prefixes = ("PIP_", "UV_", "NPM_CONFIG_")
    kept = {k: v for k, v in os.environ.items() if not k.upper().startswith(prefixes)}
    return {**kept, **env(mirror), "PIP_CONFIG_FILE": os.devnull}


def run(argv: list[str], cwd: Path, environ: dict[str, str]) -> str:
    """Run ``argv`` in ``cwd``; its stdout and stderr, asserting it succeeded."""
    proc = subprocess.run(
        argv, cwd=cwd, env=environ, capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def pip_install(mirror: PackageMirror, venv: Path, requirement: str) -> str:
    """Install ``requirement`` into a new venv at ``venv`` from ``mirror``; pip's output."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    argv = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    argv += ["--no-cache-dir", "--disable-pip-version-check", requirement]
    return run(argv, venv, install_env(mirror))


def test_env_sends_npm_pip_and_uv_to_the_mirror(mirror: PackageMirror) -> None:
    """The npm registry and the pip and uv index are the mirror's plain-HTTP URLs, trusted."""
    base = mirror.url
    assert base.startswith("http://127.0.0.1:")
    assert env(mirror) == {
        "NPM_CONFIG_REGISTRY": f"{base}/npm/",
        "PIP_INDEX_URL": f"{base}/pypi/simple/",
        "PIP_TRUSTED_HOST": "127.0.0.1",
        "UV_DEFAULT_INDEX": f"{base}/pypi/simple/",
        "UV_INSECURE_HOST": "127.0.0.1",
    }


def npm_install(mirror: PackageMirror, project: Path, cache: Path, package: str) -> None:
    """``npm install <package>`` from ``mirror`` in a new directory ``project``, cache ``cache``."""
    project.mkdir()
    argv = ["npm", "install", "--no-audit", "--no-fund", "--no-update-notifier"]
    run([*argv, "--cache", str(cache), package], project, install_env(mirror))


def test_npm_install_fetches_metadata_and_tarball_through_the_mirror(
    mirror: PackageMirror, tmp_path: Path
) -> None:
    """``npm install is-number@7.0.0`` with the mirror as registry asks it for both."""
    npm_install(mirror, tmp_path / "project", tmp_path / "npm-cache", "is-number@7.0.0")

    installed = json.loads((tmp_path / "project/node_modules/is-number/package.json").read_text())
    assert installed["version"] == "7.0.0"
    assert mirror.requests() == ["/npm/is-number", "/npm/is-number/-/is-number-7.0.0.tgz"]


def test_a_second_npm_install_is_served_from_npm_own_cache(
    mirror: PackageMirror, tmp_path: Path
) -> None:
    """The mirror's answers may be kept: npm, with its cache warm, does not ask it again."""
    npm_install(mirror, tmp_path / "first", tmp_path / "npm-cache", "is-number@7.0.0")
    asked = len(mirror.requests())

    npm_install(mirror, tmp_path / "second", tmp_path / "npm-cache", "is-number@7.0.0")

    assert asked == 2
    assert len(mirror.requests()) == asked
    assert (tmp_path / "second/node_modules/is-number/package.json").is_file()


def test_pip_installs_through_the_mirror_and_a_rerun_needs_no_upstream(tmp_path: Path) -> None:
    """A second mirror on the same cache serves the same install without fetching anything."""
    with PackageMirror(tmp_path / "mirror-cache") as first:
        printed = pip_install(first, tmp_path / "first", "six==1.16.0")
    with PackageMirror(tmp_path / "mirror-cache") as second:
        pip_install(second, tmp_path / "second", "six==1.16.0")

    assert f"Looking in indexes: {first.pypi_index}" in printed
    assert "/pypi/simple/six/" in first.requests()
    assert any(p.endswith("/six-1.16.0-py2.py3-none-any.whl") for p in first.requests())
    assert first.upstream_fetches() > 0
    assert second.requests() == first.requests()
    assert second.upstream_fetches() == 0
    python = tmp_path / "second" / "bin" / "python"
    imported = run([str(python), "-c", "import six; print(six.__version__)"], tmp_path, {})
    assert imported.strip() == "1.16.0"


@pytest.mark.parametrize(
    "accept", ["text/html", "application/vnd.pypi.simple.v1+json"], ids=["html", "json"]
)
def test_index_pages_point_downloads_at_the_mirror(mirror: PackageMirror, accept: str) -> None:
    """Both simple-API formats link to the mirror's ``/pypi-files/``, not to PyPI's host."""
    status, body = get(f"{mirror.pypi_index}six/", accept)

    assert status == 200
    assert f"{mirror.url}/pypi-files/packages/".encode() in body
    assert b"files.pythonhosted.org" not in body


def test_head_is_get_without_the_body(mirror: PackageMirror) -> None:
    """A HEAD tells a GET's status, length and caching; archives may be kept for good."""
    index = f"{mirror.pypi_index}six/"
    archive = get(index, "text/html")[1].split(b'href="', 2)[1].split(b"#", 1)[0].decode()
    for url, caching in [(index, "public, max-age=300"), (archive, "immutable")]:
        request = urllib.request.Request(url, method="HEAD")  # noqa: S310 - our loopback URL
        with urllib.request.urlopen(request, timeout=60) as head:  # noqa: S310 - as above
            assert head.status == 200
            assert head.read() == b""
            length = int(head.headers["Content-Length"])
            assert caching in head.headers["Cache-Control"]
        assert length == len(get(url)[1]) > 0


def test_unknown_packages_and_paths_are_404s(mirror: PackageMirror) -> None:
    """Upstream's 404 reaches the client; a path no route serves is a 404 without upstream."""
    assert get(f"{mirror.npm_registry}{NO_SUCH_PACKAGE}")[0] == 404
    assert get(f"{mirror.pypi_index}{NO_SUCH_PACKAGE}/")[0] == 404
    fetches = mirror.upstream_fetches()
    assert get(f"{mirror.url}/elsewhere/")[0] == 404
    assert mirror.upstream_fetches() == fetches == 2


def test_an_unreachable_upstream_is_a_502_and_not_cached(tmp_path: Path) -> None:
    """No answer from upstream is a 502 naming it, and the next request tries again."""
    upstream = f"http://127.0.0.1:{free_port()}/"  # nothing listens there
    with PackageMirror(tmp_path / "cache", routes=(Route("/npm/", upstream),)) as mirror:
        status, body = get(f"{mirror.npm_registry}left-pad")
        again = get(f"{mirror.npm_registry}left-pad")[0]

    assert status == again == 502
    assert f"upstream {upstream}left-pad unreachable".encode() in body
    assert mirror.upstream_fetches() == 2


def test_stop_closes_the_port_and_ends_the_thread(tmp_path: Path) -> None:
    """After the ``with`` block nothing listens on the port and no mirror thread runs."""
    with PackageMirror(tmp_path / "cache") as mirror:
        port = int(mirror.url.rsplit(":", 1)[1])
        assert get(f"{mirror.url}/elsewhere/")[0] == 404

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert f"package-mirror-{port}" not in {t.name for t in threading.enumerate()}
