"""``testbed.node.image_store``: seeds built once, planted as hard links, databases copied.

The planting, the archives' identities and the pruning need no containerd; one test
seeds a real containerd root from a small OCI archive and starts containerd on a planted
copy (root, containerd: the node tier).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.node import image_store
from testbed.node.image_store import Archive, Seed
from testbed.node.member import mounts_of
from testbed.node.oci import make_oci_archive
from testbed.process import ProcessError


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A seed store of the test's own."""
    path = tmp_path / "store"
    monkeypatch.setattr(image_store, "store", lambda: path)
    return path


def seed_tree(root: Path) -> None:
    """A containerd-like root: two bolt databases, a blob, a snapshot with a subdirectory."""
    for name in ("io.containerd.metadata.v1.bolt/meta.db", "snap/metadata.db"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"bolt")
    blob = root / "content/blobs/sha256/abc"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"layer")
    (root / "snap/1/fs/etc").mkdir(parents=True)
    (root / "snap/1/fs/etc").chmod(0o750)
    (root / "snap/1/fs/etc/passwd").write_text("root:x:0:0")


def test_a_planted_root_links_every_file_but_copies_the_databases(
    store: Path, tmp_path: Path
) -> None:
    """Files share the seed's inodes; a database written in a node leaves the seed alone."""
    seed = Seed(store / "k" / "root", {})
    seed_tree(seed.root)
    planted = tmp_path / "node" / "root"
    image_store.plant(seed, planted)
    for name in ("content/blobs/sha256/abc", "snap/1/fs/etc/passwd"):
        assert (planted / name).stat().st_ino == (seed.root / name).stat().st_ino
    for name in ("io.containerd.metadata.v1.bolt/meta.db", "snap/metadata.db"):
        assert (planted / name).stat().st_ino != (seed.root / name).stat().st_ino
        (planted / name).write_bytes(b"changed by the node")
        assert (seed.root / name).read_bytes() == b"bolt"
    assert (planted / "snap/1/fs/etc").stat().st_mode & 0o777 == 0o750


def test_planting_a_pruned_seed_fails_saying_so(store: Path, tmp_path: Path) -> None:
    """A seed removed since it was found is an error, not an empty containerd."""
    with pytest.raises(ProcessError, match="is gone"):
        image_store.plant(Seed(store / "gone" / "root", {}), tmp_path / "root")


def test_an_archive_is_known_by_content_or_by_name_size_and_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small archive's identity is its content's; a large one's changes when rewritten."""
    small = tmp_path / "small.tar"
    small.write_bytes(b"a")
    first = Archive(small, "r").identity()
    os.utime(small, ns=(1, 1))
    assert Archive(small, "r").identity() == first  # content, not time
    small.write_bytes(b"b")
    assert Archive(small, "r").identity() != first
    monkeypatch.setattr(image_store, "HASHED_UP_TO", 0)
    large = Archive(small, "r")
    before = large.identity()
    os.utime(small, ns=(2, 2))
    assert large.identity() != before
    assert Seed(tmp_path, {"r": large.identity()}).holds(large)
    assert not Seed(tmp_path, {"r": large.identity()}).holds(Archive(small, "other"))
    assert not Seed(tmp_path, {"r": before}).holds(large)


def test_pruning_keeps_the_newest_seeds_and_drops_partials(store: Path) -> None:
    """``KEPT`` seeds stay (the one in use among them); older ones and partials go."""
    store.mkdir()
    for age, name in enumerate(["new", "mid", "old", "oldest"]):
        (store / name).mkdir()
        os.utime(store / name, (1_000_000 - age, 1_000_000 - age))
    (store / "x.tmp.123").mkdir()
    (store / "current").mkdir()
    image_store.prune(keep=store / "current")
    kept = sorted(p.name for p in store.iterdir())
    assert kept == sorted(["current", *["new", "mid", "old", "oldest"][: image_store.KEPT - 1]])


@pytest.mark.node  # a containerd of its own (root)
@pytest.mark.usefixtures("store")
def test_a_seed_is_built_once_and_a_planted_root_has_its_image(tmp_path: Path) -> None:
    """The first ``seed`` imports; the second finds it; containerd on a planted copy lists it."""
    payload = tmp_path / "hello"
    payload.write_text("hello")
    ref = "localhost/pulumi-stack-operator/seed-test:testbed"
    archive = Archive(make_oci_archive(tmp_path / "image.tar", ref, {"hello": payload}, []), ref)
    found = image_store.seed([archive])
    built = found.root.stat().st_ino
    assert image_store.seed([archive]) == found
    assert found.root.stat().st_ino == built  # not built again
    assert found.holds(archive)
    planted = tmp_path / "node-root"
    image_store.plant(found, planted)
    with image_store.containerd_on(planted, tmp_path / "work") as ctr:
        assert ref in ctr("images", "ls", "--quiet").split()
    assert mounts_of(planted) == []  # its mounts stayed in its namespace
