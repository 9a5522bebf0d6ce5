"""Running Pulumi operations: the ``Runner`` seam and its implementations.

The reconciler sees only what this package exports: the request and outcome types and the
``Runner`` interface. Which runner it gets is the composition root's choice.

Modules, one job each: ``types`` (what goes in and out), ``base`` (the ``Runner``
interface and its traits), ``local`` (``LocalRunner``: the operations as child processes),
``attempt`` (one operation's phases and outcome), ``cli`` (``pulumi`` command lines and
their environment), ``engine`` (the event log and what its events say), ``failures``
(``ErrorKind`` of a failure), ``display`` (a failure's error text, out of the CLI's
display), ``scrub`` (secrets and terminal codes out of messages and outputs), ``project``
(Pulumi.yaml and the stack settings file), ``home`` (a Stack's PULUMI_HOME), ``locks``
(file-backend locks), ``lease`` (a run pod's lock as its lease: renewed while its CLI runs,
taken over once lapsed); ``pod`` (``PodRunner`` and the run pod: its manifest, API calls,
states and node), ``agent`` (``AgentRunner``: a run pod's job as child processes, for the
test bed), ``job`` and ``document`` (what a run that lays its own source out is given),
``layout`` (laying that source out), ``channel`` (the reports a run pod prints);
``deps`` (the program's dependencies and plugins, installed and cached before a run).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from workspace.runner.base import Runner, RunnerTraits
from workspace.runner.channel import fitted, job_line, outcome_line, parse_line, progress_line
from workspace.runner.job import (
    ENV_SOURCES,
    GIT_ENV_PREFIX,
    SECRET_ENV_PREFIX,
    EnvSources,
    RunJob,
    SecretEnv,
    SecretEnvNames,
)
from workspace.runner.local.runner import DEFAULT_CACHE_LIMIT, LocalRunner
from workspace.runner.types import (
    DEFAULT_INTERRUPT_GRACE,
    Detached,
    ErrorKind,
    InstallRecord,
    LockInfo,
    Outcome,
    Progress,
    ProgressCallback,
    ProjectInfo,
    RunResult,
    SourceFault,
    StopSignal,
    UpdateRequest,
    failed_outcome,
)

if TYPE_CHECKING:
    from workspace.runner.pod.runner import PodRunner
    from workspace.runner.pod.spec import RunCaching

# Imported when first asked for: they need the Kubernetes client (a quarter of a second to
# import), which the run pod's agent, importing this package, never uses.
_LAZY = {"PodRunner": "workspace.runner.pod.runner", "RunCaching": "workspace.runner.pod.spec"}


def __getattr__(name: str) -> object:
    """``PodRunner`` and ``RunCaching``, imported on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "DEFAULT_CACHE_LIMIT",
    "DEFAULT_INTERRUPT_GRACE",
    "ENV_SOURCES",
    "GIT_ENV_PREFIX",
    "SECRET_ENV_PREFIX",
    "Detached",
    "EnvSources",
    "ErrorKind",
    "InstallRecord",
    "LocalRunner",
    "LockInfo",
    "Outcome",
    "PodRunner",
    "Progress",
    "ProgressCallback",
    "ProjectInfo",
    "RunCaching",
    "RunJob",
    "RunResult",
    "Runner",
    "RunnerTraits",
    "SecretEnv",
    "SecretEnvNames",
    "SourceFault",
    "StopSignal",
    "UpdateRequest",
    "failed_outcome",
    "fitted",
    "job_line",
    "outcome_line",
    "parse_line",
    "progress_line",
]
