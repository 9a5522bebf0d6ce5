"""The runner's words its work is counted by: what the metrics are labelled with.

Role: named here, beside the runner that produces them, and given to the status layer's
metrics by the composition root (``status.metrics.Vocabulary``), which may not import the
runner. ``INSTALL_KINDS`` are the runtimes whose dependencies are installed (the
installer's planners) and the plugin step; ``CACHES`` the parts of the dependency cache
whose bytes an install reports; ``POD_FAILURE_REASONS`` the common reasons a run pod ends
without an outcome or cannot start (the kubelet's, and the runner's own ``Deleted`` and
``NotStarted``).
"""

from __future__ import annotations

from typing import Final

from workspace.runner.deps.installer import PLANNERS
from workspace.runner.deps.store import DOWNLOADS

PLUGINS: Final = "plugins"
"""The plugin step's kind, and the plugin store's part of the cache."""
ENVIRONMENTS: Final = "environments"
"""The installed dependency environments' part of the cache."""
INSTALL_KINDS: Final = (*PLANNERS, PLUGINS)
CACHES: Final = (ENVIRONMENTS, DOWNLOADS, PLUGINS)
POD_FAILURE_REASONS: Final = (
    "Deleted",
    "Evicted",
    "OOMKilled",
    "DeadlineExceeded",
    "Error",
    "NotStarted",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
)
