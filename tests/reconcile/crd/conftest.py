"""Fixtures for the CRD tests: the control plane serving the CRD, and one minimal Stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.control_plane import ControlPlane
from tests.reconcile.crd.helpers import MINIMAL_SPEC, apply_stack


@pytest.fixture
def plane(control_plane: ControlPlane, stack_crd: Path) -> ControlPlane:
    """The control plane, once the Stack CRD is served."""
    del stack_crd
    return control_plane


@pytest.fixture
def stack(plane: ControlPlane, tmp_path: Path, namespace: str) -> str:
    """A minimal valid Stack named "app" in the test's namespace."""
    apply_stack(plane, tmp_path, namespace, MINIMAL_SPEC).check_returncode()
    return "app"
