"""Pieces of ``testbed.image`` that need no container engine: context, digest, release, CLI."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest

from testbed.assets import PULUMI_BINARIES, PULUMI_VERSION
from testbed.image import ImageError, base, build, engine, release
from testbed.image.__main__ import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["controller", "reconcile", "status", "pulumi_stack_operator"]


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
