"""Running Pulumi operations for the reconciler: the ``Runner`` seam and its implementations.

The reconciler sees only what this package exports: the request and outcome types and the
``Runner`` interface. Which runner it gets is the composition root's choice.

Modules, one job each: ``types`` (what goes in and out), ``base`` (the ``Runner``
interface), ``local`` (``LocalRunner``: the operations), ``attempt`` (one operation's
phases and outcome), ``cli`` (``pulumi`` command lines and their environment), ``engine``
(the event log and what its events say), ``failures`` (``ErrorKind`` of a failure),
``scrub`` (secrets out of messages and outputs), ``project`` (Pulumi.yaml and the stack
settings file), ``home`` (a Stack's PULUMI_HOME), ``locks`` (file-backend locks);
``pod`` (``PodRunner``: each operation in a pod), ``podspec`` (the run pod's manifest),
``job`` (what a run pod is given), ``channel`` (the reports a run pod prints);
``deps`` (the program's dependencies and plugins, installed and cached before a run).
"""

from __future__ import annotations

from workspace.runner.base import Runner
from workspace.runner.job import RunJob, SecretEnv, SecretEnvNames
from workspace.runner.local import LocalRunner
from workspace.runner.pod import PodRunner
from workspace.runner.podspec import RunCaching
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    ErrorKind,
    InstallRecord,
    LockInfo,
    Outcome,
    Progress,
    ProgressCallback,
    StopSignal,
    UpdateRequest,
)

__all__ = [
    "DEFAULT_INTERRUPT_GRACE",
    "ErrorKind",
    "InstallRecord",
    "LocalRunner",
    "LockInfo",
    "Outcome",
    "PodRunner",
    "Progress",
    "ProgressCallback",
    "RunCaching",
    "RunJob",
    "Runner",
    "SecretEnv",
    "SecretEnvNames",
    "StopSignal",
    "UpdateRequest",
]
