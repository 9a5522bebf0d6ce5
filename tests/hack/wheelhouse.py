"""Wheels repacked from the distributions installed in this interpreter, for offline installs.

``repack_requirements(requirements, dest)`` writes one wheel per distribution that
``requirements`` need (transitively, markers evaluated for this interpreter), each made
from the files its installed ``RECORD`` lists inside site-packages plus its ``.dist-info``.
``pip install --no-index --find-links dest`` then installs them into a fresh virtualenv
without a package index: the same resolution pip does from PyPI, against the versions this
project's virtualenv already holds. Scripts are left out; pip writes them again from
``entry_points.txt``.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Written by the installer, not part of a wheel.
_INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"})


def closure(requirements: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``requirements`` need, transitively."""
    found: dict[str, metadata.Distribution] = {}
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        dist = metadata.distribution(requirement.name)
        found[name] = dist
        pending += [Requirement(r) for r in dist.requires or []]
    return list(found.values())


def repack(dist: metadata.Distribution, dest: Path) -> Path:
    """Write ``dist`` as a wheel into ``dest``; returns its path."""
    root = Path(str(dist.locate_file("")))
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    info = next(f for f in files if f.parent.name.endswith(".dist-info")).parent
    tag = _compressed_tag(root / info / "WHEEL")
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel = dest / f"{name}-{dist.version}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            path = root / file
            if file.name in _INSTALLER_FILES or "__pycache__" in file.parts or not path.is_file():
                continue
            data = path.read_bytes()
            archive.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{file},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def _compressed_tag(wheel_file: Path) -> str:
    """The WHEEL file's tags as one compressed tag set (``py2.py3-none-any``)."""
    tags = [
        line.split(":", 1)[1].strip().split("-")
        for line in wheel_file.read_text().splitlines()
        if line.startswith("Tag:")
    ]
    parts = [list(dict.fromkeys(tag[i] for tag in tags)) for i in range(3)]
    return "-".join(".".join(part) for part in parts) if tags else "py3-none-any"


def repack_requirements(requirements: Iterable[str], dest: Path) -> list[Path]:
    """Repack every installed distribution ``requirements`` need into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    return [repack(dist, dest) for dist in closure(requirements)]
