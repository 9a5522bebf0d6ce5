"""Pieces of ``testbed.image`` that need no container engine: context, digest, release, CLI.

Also the Node.js stage's layout, made from a fake Node.js install.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from testbed.assets import PULUMI_BINARIES, PULUMI_VERSION
from testbed.image import ImageError, base, build, engine, nodejs, release
from testbed.image.__main__ import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["controller", "workspace", "reconcile", "status", "pulumi_stack_operator"]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache directory for each test."""
    monkeypatch.setenv("PULUMI_STACK_OPERATOR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_pulumi(directory: Path) -> Path:
    """A directory with a small executable file for each of the CLI's binaries."""
    directory.mkdir()
    for binary in PULUMI_BINARIES:
        (directory / binary).write_text(f"#!/bin/sh\necho {binary}\n")
        (directory / binary).chmod(0o755)
    return directory


def test_copied_paths_are_the_dockerfiles_context_copies() -> None:
    """The digest covers exactly what the Dockerfile copies from the context."""
    assert sorted(build.copied_paths(REPO / "Dockerfile")) == sorted(
        ["pyproject.toml", "README.md", *SHIPPED]
    )


def small_repo(root: Path) -> Path:
    """A context with the Dockerfile, .dockerignore and one shipped package."""
    root.mkdir()
    (root / "Dockerfile").write_text("FROM x\nCOPY pyproject.toml ./\nCOPY pkg/ pkg/\n")
    (root / ".dockerignore").write_text("*\n")
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "tests").mkdir()
    return root


def test_digest_follows_copied_content_and_args_only(tmp_path: Path) -> None:
    """Copied files and build args change the digest; caches and other files do not."""
    repo = small_repo(tmp_path / "repo")
    first = build.content_digest(repo, {"A": "1"})
    (repo / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (repo / "pkg" / "stale.pyc").write_bytes(b"\0")
    (repo / "tests" / "test_x.py").write_text("")
    assert build.content_digest(repo, {"A": "1"}) == first
    assert build.content_digest(repo, {"A": "2"}) != first
    (repo / "pkg" / "mod.py").write_text("X = 2\n")
    assert build.content_digest(repo, {"A": "1"}) != first


def test_release_archive_passes_the_dockerfiles_check(tmp_path: Path) -> None:
    """The checksums file verifies the archive with the Dockerfile's own awk | sha256sum."""
    directory = release.release_dir(fake_pulumi(tmp_path / "bin"))
    archive = directory / release.archive_name()
    assert archive.name == f"pulumi-v{PULUMI_VERSION}-linux-{release.arch()}.tar.gz"
    with tarfile.open(archive) as tar:
        members = {m.name: m.mode for m in tar.getmembers()}
    assert members == {f"pulumi/{b}": 0o755 for b in PULUMI_BINARIES}
    line = (directory / release.checksums_name()).read_text()
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert line == f"{digest}  {archive.name}\n"
    run = re.search(r"RUN (awk .*?--strict)", (REPO / "Dockerfile").read_text(), re.DOTALL)
    assert run is not None
    check = run.group(1).replace("\\\n", " ")
    (directory / "pulumi.tar.gz").symlink_to(archive)
    (directory / "checksums.txt").symlink_to(directory / release.checksums_name())
    env = {"PULUMI_VERSION": PULUMI_VERSION, "PULUMI_ARCH": release.arch(), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", check],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_release_dir_is_cached_by_the_binaries_identity(tmp_path: Path) -> None:
    """Unchanged binaries reuse the archive; a changed binary makes a new one."""
    pulumi_bin = fake_pulumi(tmp_path / "bin")
    first = release.release_dir(pulumi_bin)
    assert release.release_dir(pulumi_bin) == first
    (pulumi_bin / "pulumi").write_text("#!/bin/sh\necho changed binary\n")
    assert release.release_dir(pulumi_bin) != first


def test_serve_answers_on_loopback_until_closed(tmp_path: Path) -> None:
    """The release server serves the directory on 127.0.0.1 and stops on exit."""
    (tmp_path / "file.txt").write_text("served")
    with release.serve(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}/file.txt", timeout=10) as response:  # noqa: S310
            assert response.read() == b"served"
    with pytest.raises(OSError, match="refused"):
        urllib.request.urlopen(f"{url}/file.txt", timeout=10)  # noqa: S310


def test_base_key_and_builder_containerfile() -> None:
    """The base key names the suite; the builder base puts the CA bundle where apt and pip look."""
    key = base.base_key()
    assert key.startswith(f"{base.SUITE}-")
    assert key == base.base_key()
    text = base.builder_containerfile("localhost/pso-base:k")
    assert text.startswith("FROM localhost/pso-base:k\n")
    assert f"COPY ca-certificates.crt {base.IMAGE_CA_BUNDLE}\n" in text
    assert f"PIP_CERT={base.IMAGE_CA_BUNDLE}" in text


def test_without_a_ca_bundle_the_builder_base_is_the_base(tmp_path: Path) -> None:
    """No host CA bundle: no extra image (the engine is not called)."""
    nothing = engine.Engine("none", ("false",), {})
    assert base.ensure_builder_base(nothing, "b:1", tmp_path / "absent.crt") == "b:1"


def test_missing_tools_name_the_install_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: find_engine refuses and points at hack/install-image-tools."""
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert any(reason.startswith("root") for reason in engine.missing_tools())
    with pytest.raises(ImageError, match="hack/install-image-tools"):
        engine.find_engine()


def test_cli_refuses_half_a_pulumi_source(capsys: pytest.CaptureFixture[str]) -> None:
    """--pulumi-url needs --pulumi-checksums-url."""
    with pytest.raises(SystemExit) as exited:
        main(["--pulumi-url", "http://example.invalid/p.tar.gz"])
    assert exited.value.code == 2
    assert "go together" in capsys.readouterr().err


def fake_node(prefix: Path, version: str = "v20.1.0") -> Path:
    """A Node.js install under ``prefix`` as a .deb lays it out; its ``bin`` directory."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "node").write_text(f"#!/bin/sh\necho {version}\n")
    (prefix / "bin" / "node").chmod(0o755)
    modules = prefix / "lib" / "node_modules"
    for module, script in (("npm", "bin/npm-cli.js"), ("corepack", "dist/corepack.js")):
        (modules / module / script).parent.mkdir(parents=True)
        (modules / module / script).write_text("// js\n")
        (modules / module / "package.json").write_text('{"version": "1.2.3"}')
    (modules / "npm" / "bin" / "npx-cli.js").write_text("// js\n")
    (modules / "npm" / "node_modules" / ".bin").mkdir(parents=True)
    (modules / "npm" / "node_modules" / ".bin" / "x").symlink_to("../x/cli.js")
    return prefix / "bin"


@pytest.fixture
def host_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake Node.js 20 first on PATH; its prefix."""
    monkeypatch.setenv("PATH", f"{fake_node(tmp_path / 'prefix')}:/usr/bin:/bin")
    return tmp_path / "prefix"


def test_node_stage_is_laid_out_as_the_official_images(host_node: Path, tmp_path: Path) -> None:
    """node, npm and corepack under usr/local, the links relative, owned by root."""
    found = nodejs.find_host_node()
    assert found.binary == host_node / "bin" / "node"
    assert found.version == "v20.1.0"
    nodejs.write_rootfs(found, tmp_path / "rootfs.tar")
    with tarfile.open(tmp_path / "rootfs.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["usr/local/bin/node"].isfile()
    assert members["usr/local/bin/node"].mode & 0o111
    links = {n: m.linkname for n, m in members.items() if m.issym()}
    assert links == {
        "usr/local/bin/npm": "../lib/node_modules/npm/bin/npm-cli.js",
        "usr/local/bin/npx": "../lib/node_modules/npm/bin/npx-cli.js",
        "usr/local/bin/corepack": "../lib/node_modules/corepack/dist/corepack.js",
        "usr/local/lib/node_modules/npm/node_modules/.bin/x": "../x/cli.js",
    }
    for target in nodejs.LINKS.values():
        assert posixpath.normpath(f"usr/local/bin/{target}") in members
    assert {(m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, "root")}


def test_node_key_follows_the_versions_and_files(host_node: Path) -> None:
    """Unchanged files: the same key; a new npm: another key."""
    first = nodejs.node_key(nodejs.find_host_node())
    assert first.startswith("v20.1.0-")
    assert nodejs.node_key(nodejs.find_host_node()) == first
    (host_node / "lib" / "node_modules" / "npm" / "package.json").write_text('{"version": "9"}')
    assert nodejs.node_key(nodejs.find_host_node()) != first


def test_node_older_than_20_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node.js 18 (Debian bookworm's): an ImageError that says what to install."""
    monkeypatch.setenv("PATH", f"{fake_node(tmp_path / 'prefix', 'v18.19.0')}:/usr/bin:/bin")
    with pytest.raises(ImageError, match=r"Node\.js >= 20"):
        nodejs.find_host_node()
    assert nodejs.problem() == "Node.js >= 20 with npm and corepack"


def test_node_without_corepack_is_refused(host_node: Path) -> None:
    """The Dockerfile copies corepack: a Node.js without it cannot stand in."""
    (host_node / "lib" / "node_modules" / "corepack" / "package.json").unlink()
    with pytest.raises(ImageError, match="corepack is missing"):
        nodejs.find_host_node()
