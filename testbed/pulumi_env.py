"""An offline Pulumi environment: the real CLI, a ``file://`` backend, passphrase secrets.

Everything a Pulumi command needs is in ``PulumiEnv.env``: its own ``PULUMI_HOME``
(plugins, credentials, selected stacks), ``PULUMI_BACKEND_URL`` pointing at an absolute
directory (relative ones resolve against the program's directory), a passphrase for the
secrets provider (needed even for dynamic providers, whose state is stored as a secret),
no update checks, and no plugin downloads. ``PULUMI_PYTHON_CMD`` is this interpreter, so
that the language host and the dynamic-provider shim find the ``pulumi`` package.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from pulumi import automation as auto

# A test passphrase, not a secret: it protects throw-away stacks in a temp directory.
TEST_PASSPHRASE = "test-passphrase-not-secret"  # noqa: S105


@dataclasses.dataclass(frozen=True)
class PulumiEnv:
    """Paths and variables for running the real Pulumi CLI offline."""

    bin_dir: Path  # holds pulumi, pulumi-language-python(-exec), pulumi-resource-pulumi-python
    home: Path
    backend_dir: Path

    @classmethod
    def create(cls, bin_dir: Path, root: Path) -> PulumiEnv:
        """Lay out ``PULUMI_HOME`` and the backend directory under ``root``."""
        home, backend = root / "pulumi-home", root / "backend"
        home.mkdir(parents=True, exist_ok=True)
        backend.mkdir(parents=True, exist_ok=True)  # the file backend does not create it
        return cls(bin_dir=bin_dir, home=home, backend_dir=backend)

    @property
    def backend_url(self) -> str:
        """The ``file://`` URL of the backend."""
        return f"file://{self.backend_dir}"

    @property
    def env(self) -> dict[str, str]:
        """Variables for every Pulumi process (the CLI and the programs it runs)."""
        return {
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": self.backend_url,
            "PULUMI_CONFIG_PASSPHRASE": TEST_PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_PYTHON_CMD": sys.executable,
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def command(self) -> auto.PulumiCommand:
        """A ``PulumiCommand`` running the CLI in ``bin_dir`` (version-checked)."""
        # PulumiCommand runs <root>/bin/pulumi; point root at bin_dir's parent when the
        # directory is called "bin", else rely on PATH (env above puts bin_dir first).
        if self.bin_dir.name == "bin":
            return auto.PulumiCommand(root=str(self.bin_dir.parent))
        return auto.PulumiCommand()

    def workspace_options(self, work_dir: Path | None = None) -> auto.LocalWorkspaceOptions:
        """Options for a ``LocalWorkspace`` in this environment."""
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir) if work_dir else None,
            pulumi_home=str(self.home),
            pulumi_command=self.command(),
            env_vars=self.env,
        )
