"""``kubectl get stacks``: the default and wide printer columns, and the category."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.control_plane import ControlPlane
from tests.reconcile.crd.helpers import (
    MINIMAL_SPEC,
    apply_stack,
    condition,
    patch_status,
    table,
)

pytestmark = pytest.mark.integration

DEFAULT_COLUMNS = ["NAME", "READY", "REASON", "LAST UPDATE", "COMMIT", "AGE"]
WIDE_COLUMNS = [
    *DEFAULT_COLUMNS,
    *("STACK", "RECONCILING", "STALLED", "SUSPENDED", "OBSERVED", "GENERATION", "MESSAGE"),
]


# -- printer columns and category -----------------------------------------------------------


@pytest.fixture
def two_stacks(plane: ControlPlane, tmp_path: Path, namespace: str) -> None:
    """A Stack failing with retries ("retrying") and a suspended, stalled one ("stalled")."""
    apply_stack(plane, tmp_path, namespace, MINIMAL_SPEC, "retrying").check_returncode()
    stalled_spec = {**MINIMAL_SPEC, "stack": "org/proj/prod", "suspend": True}
    apply_stack(plane, tmp_path, namespace, stalled_spec, "stalled").check_returncode()
    retrying = {
        "observedGeneration": 1,
        "conditions": [
            condition("Ready", "False", reason="UpdateFailed", message="pulumi up failed: boom"),
            condition("Reconciling", "True", reason="ProgressingWithRetry", message="attempt 2"),
        ],
        "lastUpdate": {"state": "failed", "shortCommit": "2b08897"},
    }
    stalled = {
        "conditions": [
            condition("Ready", "False", reason="InvalidSpec", message="spec.stack: bad"),
            condition("Stalled", "True", reason="InvalidSpec", message="spec.stack: bad"),
        ],
    }
    patch_status(plane, namespace, "retrying", retrying).check_returncode()
    patch_status(plane, namespace, "stalled", stalled).check_returncode()


@pytest.mark.usefixtures("two_stacks")
def test_default_columns(plane: ControlPlane, namespace: str) -> None:
    """``kubectl get stacks`` shows Ready, its reason, the last update, commit and age."""
    header, *rows = table(plane.kubectl("get", "stacks", "-n", namespace).stdout)
    assert header == DEFAULT_COLUMNS
    by_name = {row[0]: row[1:] for row in rows}
    retrying_age = by_name["retrying"].pop()
    stalled_age = by_name["stalled"].pop()
    assert by_name == {
        "retrying": ["False", "UpdateFailed", "failed", "2b08897"],
        "stalled": ["False", "InvalidSpec", "", ""],
    }
    assert re.fullmatch(r"\d+[smhd]\S*", retrying_age)
    assert re.fullmatch(r"\d+[smhd]\S*", stalled_age)


@pytest.mark.usefixtures("two_stacks")
def test_wide_columns(plane: ControlPlane, namespace: str) -> None:
    """-o wide adds the stack, Reconciling/Stalled reasons, suspend, generations, message."""
    header, *rows = table(plane.kubectl("get", "stacks", "-n", namespace, "-o", "wide").stdout)
    assert header == WIDE_COLUMNS
    by_name = {row[0]: row[1:5] + row[6:] for row in rows}  # without AGE
    assert by_name == {
        "retrying": [
            *("False", "UpdateFailed", "failed", "2b08897"),
            *("org/proj/dev", "ProgressingWithRetry", "", "", "1", "1"),
            "pulumi up failed: boom",
        ],
        "stalled": [
            *("False", "InvalidSpec", "", ""),
            *("org/proj/prod", "", "InvalidSpec", "true", "0", "1"),  # the defaulted status
            "spec.stack: bad",
        ],
    }


@pytest.mark.usefixtures("two_stacks")
def test_category_lists_stacks(plane: ControlPlane, namespace: str) -> None:
    """``kubectl get pulumi`` lists Stacks (the CRD is in category pulumi)."""
    names = plane.kubectl("get", "pulumi", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(names) == ["stack.pulumi.com/retrying", "stack.pulumi.com/stalled"]
