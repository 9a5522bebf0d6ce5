"""Installing a program's dependencies and plugins before its operation: the workspace.

Modules, one job each: ``types`` (records, errors, activations), ``plan`` (a runtime's
install plan and its content key), ``nodejs``, ``python``, ``golang`` (the runtimes'
plans), ``tools`` (running npm, pip, uv, go), ``store`` (installed environments and
download caches, their locks and eviction), ``downloads`` (the tools' cache variables),
``failures`` (transient or permanent, and the message's tail), ``installer`` (all of it
for one operation), ``plugins`` (when the plugin step can be skipped).
"""

from __future__ import annotations

from workspace.runner.deps.installer import Installer, Prepared
from workspace.runner.deps.store import DependencyStore, Usage
from workspace.runner.deps.tools import Tools, ToolStoppedError
from workspace.runner.deps.types import Activation, DependencyError, Permanence

__all__ = [
    "Activation",
    "DependencyError",
    "DependencyStore",
    "Installer",
    "Permanence",
    "Prepared",
    "ToolStoppedError",
    "Tools",
    "Usage",
]
