"""Rendering manifests/ with the test bed's kubectl (its built-in kustomize)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.assets import find_kube_binary
from tests.tiers import record_use

MANIFESTS = Path(__file__).parents[2] / "manifests"
KUSTOMIZATIONS = sorted(
    str(path.parent.relative_to(MANIFESTS)) for path in MANIFESTS.rglob("kustomization.yaml")
)

Manifest = dict[str, Any]


@functools.cache
def kustomize(directory: Path) -> str:
    """``kubectl kustomize directory`` (once per directory and process)."""
    kubectl = find_kube_binary("kubectl")
    return subprocess.run(
        [str(kubectl), "kustomize", str(directory)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip


def render(directory: str | Path) -> list[Manifest]:
    """The objects ``manifests/<directory>`` (or an absolute path) renders, freshly parsed.

    Every call counts as running kubectl (``tests.tiers.record_use``), cached or not.
    """
    record_use("kubectl")
    return [doc for doc in yaml.safe_load_all(kustomize(MANIFESTS / directory)) if doc]


def pick(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The one object of ``kind`` (and ``name``, if given) among ``objects``."""
    found = [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """The test bed's kubectl (v1.36, kustomize v5 built in)."""
    return find_kube_binary("kubectl")
