"""When a program's plugins are known to be installed, so the plugin step can be skipped.

The plugin step (``pulumi install --no-dependencies``) asks the language host which
plugins the program needs and installs the missing ones; even with nothing to install it
costs a CLI start and the host's own lookup. After it succeeds, the plugins present in the
store are recorded under the program's key (its environment's, or its project files' for
a runtime without dependencies, such as YAML); a later run of the same program skips the
step while every recorded plugin is still there. A plugin removed since is noticed and the
step runs again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from workspace.runner.project import Project

TOOL = "pulumi install"
_SKIPPED_SUFFIXES = (".partial", ".lock", ".tmp")


class PluginChecks:
    """Markers in ``root`` for the plugin store ``plugins`` (see the module docstring)."""

    def __init__(self, root: Path, plugins: Path) -> None:
        """Keep markers in ``root`` about the plugin store at ``plugins``."""
        self.root, self.plugins = root, plugins

    def satisfied(self, key: str) -> bool:
        """Whether the step ran for ``key`` and every plugin it left is still installed."""
        try:
            names = json.loads(self._marker(key).read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(names, list):
            return False
        return all(isinstance(n, str) and (self.plugins / n).is_dir() for n in names)

    def record(self, key: str) -> None:
        """Remember the plugins installed now as what ``key`` needs."""
        names = sorted(
            p.name
            for p in (self.plugins.iterdir() if self.plugins.is_dir() else ())
            if p.is_dir() and not p.name.endswith(_SKIPPED_SUFFIXES)
        )
        marker = self._marker(key)
        marker.parent.mkdir(parents=True, exist_ok=True)
        partial = marker.with_suffix(".partial")
        partial.write_text(json.dumps(names) + "\n")
        partial.replace(marker)

    def _marker(self, key: str) -> Path:
        digest = hashlib.sha256(f"{key}\0{self.plugins}".encode()).hexdigest()[:24]
        return self.root / f"{digest}.json"


def project_key(project: Project) -> str:
    """A key for a program without dependencies: its runtime and its project's YAML files.

    A YAML program names its plugins (and their versions) in these files; stack settings
    files (``Pulumi.<stack>.yaml``, config only) are left out.
    """
    digest = hashlib.sha256(project.runtime.encode() + b"\0")
    for path in sorted(project.directory.glob("*.y*ml")):
        settings = path.name.startswith("Pulumi.") and path.name.count(".") > 1
        if path.is_file() and not settings:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]
