"""The operator's image, built here with ``testbed.image`` and run with the real engine.

Each test runs the image as a cluster would: its own user (65532), a read-only root
filesystem, writable mounts on the work dir and /tmp, no network. The Python program test
is the one that failed while the venv had no pip: the Python language host runs
``python -m pip list`` in the interpreter it finds on PATH.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.assets import PULUMI_VERSION
from testbed.image import BuiltImage, Engine, build_image, save_archive
from testbed.node.image_store import containerd_on
from tests.image.container import UID, WORK_DIR, run_image

pytestmark = [pytest.mark.image]

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "testbed" / "programs" / "files"


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that must have succeeded."""
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_entry_point_runs_as_nonroot_on_a_read_only_root(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """``--help`` exits 0 as uid 65532; the root is read-only, the work dir writable."""
    assert "usage: pulumi-stack-operator" in ok(
        run_image(image_engine, operator_image, tmp_path, "--help")
    )
    script = f"id -u; touch {WORK_DIR}/w /tmp/w; touch /opt/venv/x 2>/dev/null || echo ro"
    out = ok(run_image(image_engine, operator_image, tmp_path, "-c", script, entrypoint="sh"))
    assert out.split() == [str(UID), "ro"]
    assert (tmp_path / "work" / "w").stat().st_uid == UID


def test_python_program_runs_in_the_image(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """A Python program with a dynamic provider goes up, and ``pip list`` works, as 65532.

    The program is found the way a user's program is: ``runtime: python``, the image's
    interpreter (its virtualenv first on PATH). The passphrase reaches the CLI from an
    env file, never a command line.
    """
    work = tmp_path / "work"
    shutil.copytree(PROGRAM, work / "program")
    for path in (work / "program", *(work / "program").iterdir()):
        shutil.chown(path, UID, UID)
    env_file = tmp_path / "env"
    env_file.write_text("PULUMI_CONFIG_PASSPHRASE=image-test-passphrase\n")
    env_file.chmod(0o600)
    up = (
        f"cd {WORK_DIR}/program && pulumi stack select --create dev && "
        f"pulumi up --yes --skip-preview --non-interactive "
        f"--config path={WORK_DIR}/hello.txt --config content=from-the-image"
    )
    env = {"PULUMI_BACKEND_URL": f"file://{WORK_DIR}"}
    proc = run_image(
        image_engine,
        operator_image,
        tmp_path,
        "-c",
        up,
        entrypoint="sh",
        env_file=env_file,
        env=env,
        timeout=300,
    )
    ok(proc)
    assert (work / "hello.txt").read_text() == "from-the-image"
    listed = ok(
        run_image(
            image_engine,
            operator_image,
            tmp_path,
            "-m",
            "pip",
            "list",
            "-v",
            "--format",
            "json",
            entrypoint="python",
        )
    )
    names = {package["name"] for package in json.loads(listed)}
    assert "pulumi" in names
    # No "pulumi-<x>" the Python language host would take for plugin <x>'s SDK (and try
    # to download <x> before each operation of every program on this interpreter).
    assert not {name for name in names if name.startswith("pulumi-")}


def labels(engine: Engine, image: BuiltImage) -> dict[str, str]:
    """The image's labels, as the engine reports them."""
    found = engine.run("image", "inspect", "--format", "{{json .Config.Labels}}", image.ref)
    return dict(json.loads(found.stdout))


def release_file(engine: Engine, image: BuiltImage, tmp_path: Path) -> dict[str, str]:
    """``/etc/pulumi-stack-operator-release`` in the image, as a dict."""
    out = ok(
        run_image(engine, image, tmp_path, "/etc/pulumi-stack-operator-release", entrypoint="cat")
    )
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.mark.git  # the revision label comes from git
def test_labels_name_the_base_version_and_cli(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """The OCI labels: the real base, the project's version, the revision, the CLI version."""
    found = labels(image_engine, operator_image)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found["org.opencontainers.image.base.name"] == operator_image.base
    assert found["org.opencontainers.image.version"] == version
    assert found["org.opencontainers.image.revision"] == head
    assert found["com.pulumi.cli.version"] == PULUMI_VERSION
    assert release_file(image_engine, operator_image, tmp_path) == {
        "VERSION": version,
        "REVISION": head,
        "PULUMI_VERSION": PULUMI_VERSION,
        "BASE": operator_image.base,
    }


@pytest.fixture
def other_revision(image_engine: Engine, operator_image: BuiltImage) -> Iterator[BuiltImage]:
    """The session's tree built again as another revision; removed afterwards.

    As after a commit that changed nothing the image copies.
    """
    del operator_image  # built first, so that this build finds every layer cached
    image = build_image(revision="0" * 40)
    try:
        yield image
    finally:
        image_engine.run("rmi", image.ref, check=False)


def test_another_revision_of_the_same_tree_is_an_image_of_its_own(
    image_engine: Engine, operator_image: BuiltImage, other_revision: BuiltImage, tmp_path: Path
) -> None:
    """Its own tag, id, revision label and release file, not the cached build's.

    buildah's layer cache keys a LABEL step on its text, not on the build arguments it
    expands: without a RUN that uses them, this build returned the first one's image,
    revision label and all.
    """
    assert other_revision.ref != operator_image.ref
    assert other_revision.id != operator_image.id
    assert labels(image_engine, other_revision)["org.opencontainers.image.revision"] == "0" * 40
    assert release_file(image_engine, other_revision, tmp_path)["REVISION"] == "0" * 40


def test_the_image_carries_no_package_caches_nor_the_unused_async_client(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """No apt package or cache file, and no ``kubernetes.aio``, is left in the image."""
    script = (
        "find /var/cache/apt /var/lib/apt/lists -type f ! -name lock; "
        "python -c 'import importlib.util as u; print(u.find_spec(\"kubernetes.aio\"))'"
    )
    out = ok(run_image(image_engine, operator_image, tmp_path, "-c", script, entrypoint="sh"))
    assert out.split() == ["None"], out


def test_pulumi_cli_is_the_test_beds_version(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """``pulumi version`` in the image prints the version the tests run."""
    out = ok(run_image(image_engine, operator_image, tmp_path, "version", entrypoint="pulumi"))
    assert out.strip() == f"v{PULUMI_VERSION}"


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[Path]:
    """A private containerd (its own root, state and socket); yields its socket.

    Its root (the image imported, 1.7 GB) is removed afterwards: pytest keeps the temporary
    directories of the last three sessions.
    """
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        pytest.skip("containerd and ctr are not installed (hack/install-node installs them)")
    root = tmp_path / "containerd"
    with containerd_on(root / "root", root) as ctr:
        yield ctr.socket
    assert str(root) not in Path("/proc/self/mounts").read_text()
    shutil.rmtree(root)


@pytest.fixture
def alias(image_engine: Engine, operator_image: BuiltImage) -> Iterator[BuiltImage]:
    """The session's image under a second ref (one image id, two names); untagged after."""
    image = dataclasses.replace(operator_image, ref=f"{operator_image.ref}-alias")
    image_engine.run("tag", operator_image.ref, image.ref)
    try:
        yield image
    finally:
        image_engine.run("rmi", image.ref, check=False)  # untags: the id keeps the first ref


@pytest.mark.node  # a containerd of its own imports the archive
def test_archive_imports_into_containerd(
    operator_image: BuiltImage, alias: BuiltImage, containerd: Path
) -> None:
    """``save_archive`` gives an archive ``ctr images import`` loads under the image's ref.

    Also for a second ref of the same image id: an archive is saved per ref, since it
    names the ref it was saved under (one keyed by id alone gave the other ref's name).
    """
    archive = save_archive(operator_image)
    assert save_archive(operator_image) == archive  # cached by ref and id
    assert save_archive(alias) != archive
    ctr = ["ctr", "--address", str(containerd), "--namespace", "k8s.io"]
    for image in (operator_image, alias):
        subprocess.run(
            [*ctr, "images", "import", str(save_archive(image))], check=True, timeout=300
        )
        listed = subprocess.run(
            [*ctr, "images", "ls", "--quiet"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert image.ref in listed.stdout.split()
