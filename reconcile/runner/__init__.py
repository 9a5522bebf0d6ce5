"""Running Pulumi operations for the reconciler: the ``Runner`` seam and its implementations.

The reconciler sees only what this package exports: the request and outcome types and the
``Runner`` interface. Which runner it gets is the composition root's choice.
"""

from __future__ import annotations

from reconcile.automation import (
    DEFAULT_INTERRUPT_GRACE,
    ErrorKind,
    Outcome,
    Progress,
    UpdateRequest,
)
from reconcile.automation import Runner as LocalRunner
from reconcile.runner.base import Runner

__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "ErrorKind",
    "LocalRunner",
    "Outcome",
    "Progress",
    "Runner",
    "UpdateRequest",
]
