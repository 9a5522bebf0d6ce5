"""Fixtures for the reconciler tests.

``h`` is a Stack reconciler on fakes and a fake clock (``tests/reconcile/stack_harness.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reconcile.stack_harness import Harness


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    """A Stack reconciler on fakes and a fake clock, with the default settings."""
    return Harness(tmp_path)
