"""Running Pulumi operations for the reconciler: the ``Runner`` seam and its implementations.

The reconciler sees only what this package exports: the request and outcome types and the
``Runner`` interface. Which runner it gets is the composition root's choice.

Modules, one job each: ``types`` (what goes in and out), ``base`` (the ``Runner``
interface), ``local`` (``LocalRunner``: the operations), ``attempt`` (one operation's
phases and outcome), ``cli`` (``pulumi`` command lines and their environment), ``engine``
(the event log and what its events say), ``failures`` (``ErrorKind`` of a failure),
``scrub`` (secrets out of messages and outputs), ``project`` (Pulumi.yaml and the stack
settings file), ``home`` (a Stack's PULUMI_HOME), ``locks`` (file-backend locks).
"""

from __future__ import annotations

from reconcile.runner.base import Runner
from reconcile.runner.local import LocalRunner
from reconcile.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    ErrorKind,
    LockInfo,
    Outcome,
    Progress,
    ProgressCallback,
    UpdateRequest,
)

__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "ErrorKind",
    "LocalRunner",
    "LockInfo",
    "Outcome",
    "Progress",
    "ProgressCallback",
    "Runner",
    "UpdateRequest",
]
