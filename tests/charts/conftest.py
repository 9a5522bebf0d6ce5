"""The chart, rendered with the test bed's helm (skipped, with the reason, when helm is missing)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.assets import AssetError
from testbed.helm import Helm, find_helm
from tests.node.fixtures import (  # noqa: F401 - the chart-on-node test's fixtures
    sentinels,
    state,
)

CHART = Path(__file__).parents[2] / "charts" / "pulumi-stack-operator"
RELEASE = "pulumi-stack-operator"
SYSTEM_NAMESPACE = "pulumi-stack-operator-system"

Manifest = dict[str, Any]


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """The test bed's helm, built from its Go module if missing; skip if it cannot be had."""
    try:
        return find_helm()
    except AssetError as err:
        pytest.skip(f"helm is unavailable: {err}")


@pytest.fixture(scope="session")
def helm(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The helm wrapper for offline commands (lint, template), its home a session temp dir."""
    return Helm(helm_binary, None, tmp_path_factory.mktemp("helm-home"))


def render_chart(
    helm: Helm,
    values: Mapping[str, Any] | None = None,
    *,
    namespace: str = SYSTEM_NAMESPACE,
    release: str = RELEASE,
) -> list[Manifest]:
    """The chart's templated objects (no CRDs) for ``values`` in ``namespace``."""
    return helm.template(release, CHART, namespace, values)


@contextlib.contextmanager
def labelled_namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace that warns on the restricted Pod Security Standard; deleted after."""
    name = f"chart-{secrets.token_hex(4)}"
    labels = {"pod-security.kubernetes.io/warn": "restricted"}
    core = client.CoreV1Api(api)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)
