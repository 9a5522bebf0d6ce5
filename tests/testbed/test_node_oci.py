"""``make_oci_archive`` writes a valid single-layer OCI image layout, reproducibly."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

from testbed.node.oci import make_oci_archive


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _blob(members: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    digest = descriptor["digest"].removeprefix("sha256:")
    blob = members[f"blobs/sha256/{digest}"]
    assert hashlib.sha256(blob).hexdigest() == digest
    assert len(blob) == descriptor["size"]
    return blob


def test_archive_is_an_oci_layout_naming_the_image(tmp_path: Path) -> None:
    """index.json -> manifest -> config and layer, every digest and size right."""
    program = tmp_path / "server"
    program.write_bytes(b"\x7fELF not really")
    program.chmod(0o755)
    archive = make_oci_archive(
        tmp_path / "image.tar",
        "localhost/test/server:v1",
        {"server": program, "etc/greeting": b"hello"},
        ["/server", "--flag"],
        user="65532",
    )
    members = _members(archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/test/server:v1"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "v1"
    manifest = json.loads(_blob(members, entry))
    config = json.loads(_blob(members, manifest["config"]))
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"]["Entrypoint"] == ["/server", "--flag"]
    assert config["config"]["User"] == "65532"
    [layer_descriptor] = manifest["layers"]
    layer = _blob(members, layer_descriptor)
    assert config["rootfs"]["diff_ids"] == [layer_descriptor["digest"]]
    layer_path = tmp_path / "layer.tar"
    layer_path.write_bytes(layer)
    with tarfile.open(layer_path) as tar:
        modes = {m.name: (m.type, m.mode, m.uid, m.mtime) for m in tar.getmembers()}
    assert modes == {
        "etc": (tarfile.DIRTYPE, 0o755, 0, 0),
        "etc/greeting": (tarfile.REGTYPE, 0o644, 0, 0),
        "server": (tarfile.REGTYPE, 0o755, 0, 0),
    }


def test_archive_is_reproducible(tmp_path: Path) -> None:
    """The same input gives the same bytes (so the same image id)."""
    first = make_oci_archive(tmp_path / "a.tar", "localhost/x:1", {"f": b"x"}, ["/f"])
    second = make_oci_archive(tmp_path / "b.tar", "localhost/x:1", {"f": b"x"}, ["/f"])
    assert first.read_bytes() == second.read_bytes()
