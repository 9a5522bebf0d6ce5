"""What both operators of the side-by-side get alike: git daemon, program, CLI, backend kind.

``PeerBed`` (under the bench's root) starts one ``git daemon`` that logs every request
(``GitServer.requests``), pushes ``bench/peer/program`` (a Pulumi YAML program: no
resources, no plugins) as one commit, and lays out a ``bin`` directory whose ``pulumi``
is a two-line script that appends its arguments to ``pulumi-calls.log`` and execs the
real CLI, so every CLI run of either operator is counted. ``path`` puts that script first,
then the real CLI's directory (where the YAML language host and its other plugins sit).

``cluster(name, crd)`` starts a control plane of its own for one operator (the two
operators' CRDs are both ``stacks.pulumi.com``) with ``crd`` applied. ``stack_spec`` is
the one spec both are given: the pinned commit, a ``file://`` backend of the operator's
own, the passphrase from the namespace's Secret.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.running import Running
from bench.testbed import PASSPHRASE_SECRET
from testbed.assets import find_kube_binary
from testbed.control_plane import Binaries, ControlPlane
from testbed.git_server import Checkout, GitServer

PROGRAM = Path(__file__).resolve().parent / "program"
CALLS_LOG = "pulumi-calls.log"


class PeerBed(Running):
    """The shared parts of the comparison (``with`` starts and stops it); see the docstring."""

    def __init__(self, root: Path, pulumi_bin: Path) -> None:
        """Prepare (not start) under ``root``; ``pulumi_bin`` is the real CLI's directory."""
        self.root, self.pulumi_bin = root, pulumi_bin
        self.git = GitServer(root / "git", verbose=True)
        self.bin = root / "bin"
        self.repo_url = ""
        self.commit = ""

    def start(self) -> None:
        """Start the git daemon, push the program, write the counting ``pulumi``."""
        self.git.start()
        self.repo_url = self.git.create_repo("peer")
        checkout = Checkout(self.repo_url, self.root / "program")
        sources = {p.name: p.read_text() for p in PROGRAM.iterdir() if p.is_file()}
        self.commit = checkout.commit(sources, "the peer program")
        self.bin.mkdir(parents=True, exist_ok=True)
        script = self.bin / "pulumi"
        script.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "$*" >> "{self.root / CALLS_LOG}"\n'
            f'exec "{self.pulumi_bin / "pulumi"}" "$@"\n'
        )
        script.chmod(0o755)

    def stop(self) -> None:
        """Stop the git daemon."""
        self.git.stop()

    @property
    def path(self) -> str:
        """``PATH`` for an operator: the counting CLI, then the real CLI's plugins and hosts."""
        return os.pathsep.join([str(self.bin), str(self.pulumi_bin), os.environ["PATH"]])

    def pulumi_calls(self) -> list[str]:
        """The subcommand of every CLI run so far (``up``, ``stack``, ``version``, ...).

        That is the first argument that is not a flag (both operators put their global
        flags, which take no value, first).
        """
        log = self.root / CALLS_LOG
        lines = log.read_text().splitlines() if log.exists() else []
        return [next((w for w in line.split() if not w.startswith("-")), "") for line in lines]

    @contextmanager
    def cluster(self, name: str, crd: Path) -> Iterator[ControlPlane]:
        """A control plane of its own with ``crd`` applied; stopped on exit."""
        binaries = Binaries(*(find_kube_binary(b) for b in ("etcd", "kube-apiserver", "kubectl")))
        plane = ControlPlane(binaries, self.root / f"{name}-control-plane")
        try:
            plane.start()
            plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
            plane.kubectl(
                "wait", "--for=condition=Established", "--timeout=60s", "crd/stacks.pulumi.com"
            )
            yield plane
        finally:
            plane.stop()

    def backend(self, name: str) -> Path:
        """The ``file://`` backend directory of operator ``name``."""
        path = self.root / f"{name}-backend"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def stack_spec(self, name: str, backend: Path, **config: str) -> dict[str, Any]:
        """The spec both operators are given for Stack ``name``."""
        return {
            "stack": name,
            "backend": f"file://{backend}",
            "projectRepo": self.repo_url,
            "commit": self.commit,
            "config": {"message": name, **config},
            "envRefs": {
                "PULUMI_CONFIG_PASSPHRASE": {
                    "type": "Secret",
                    "secret": {"name": PASSPHRASE_SECRET, "key": "passphrase"},
                }
            },
        }
