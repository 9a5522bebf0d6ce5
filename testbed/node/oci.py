"""Tiny single-layer OCI image archives, written without a registry or a container engine.

``make_oci_archive`` packs files into one uncompressed layer and writes an OCI image
layout tarball (``oci-layout``, ``index.json``, ``blobs/sha256/...``) whose index names
the image (``io.containerd.image.name``), so ``ctr -n k8s.io images import`` tags it as
given. The node uses it for its sandbox (pause) image; tests use it for small static
programs. Archives are byte-for-byte reproducible (fixed owners and times).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath

_LAYER = "application/vnd.oci.image.layer.v1.tar"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def make_oci_archive(
    dest: Path,
    name: str,
    files: Mapping[str, Path | bytes],
    entrypoint: Sequence[str],
    *,
    env: Sequence[str] = ("PATH=/",),
    user: str = "",
) -> Path:
    """Write an OCI archive of a linux/amd64 image ``name`` (``host/repo:tag``) to ``dest``.

    ``files`` maps paths inside the image to a host file (its mode is kept) or to
    content (mode 0644). Returns ``dest``.
    """
    layer = _layer(files)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": list(entrypoint), "Env": list(env), "User": user},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": _MANIFEST,
            "config": _descriptor(_CONFIG, config),
            "layers": [_descriptor(_LAYER, layer)],
        }
    )
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    annotations = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
    index = _json(
        {
            "schemaVersion": 2,
            "manifests": [{**_descriptor(_MANIFEST, manifest), "annotations": annotations}],
        }
    )
    entries = {
        "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
        "index.json": index,
        **{_blob_path(blob): blob for blob in (layer, config, manifest)},
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_tar(entries.items()))
    return dest


def _layer(files: Mapping[str, Path | bytes]) -> bytes:
    entries: dict[str, tuple[bytes | None, int]] = {}
    for target, source in sorted(files.items()):
        path = PurePosixPath(target.lstrip("/"))
        for parent in reversed(path.parents[:-1]):
            entries.setdefault(f"{parent}/", (None, 0o755))
        if isinstance(source, Path):
            entries[str(path)] = (source.read_bytes(), source.stat().st_mode & 0o7777)
        else:
            entries[str(path)] = (source, 0o644)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member_name, (data, mode) in entries.items():
            info = tarfile.TarInfo(member_name.rstrip("/"))
            info.mode, info.mtime = mode, 0
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _tar(entries: Iterable[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member_name, data in entries:
            info = tarfile.TarInfo(member_name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {"mediaType": media_type, "digest": _digest(blob), "size": len(blob)}


def _blob_path(blob: bytes) -> str:
    return "blobs/sha256/" + hashlib.sha256(blob).hexdigest()
