"""The container engine that builds and runs the image: docker with a running engine, else podman.

podman is run as this machine needs it: the ``runc`` runtime (crun cannot handle a cgroup
v1/v2 hybrid), the ``cgroupfs`` cgroup manager, and a ``containers.conf`` of our own (in
the cache, named by ``CONTAINERS_CONF``) without default ulimits, which fail with EPERM
without ``CAP_SYS_RESOURCE``. /etc is never edited; podman's root storage is its default.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from testbed.image import nodejs
from testbed.image.cache import ImageError, image_cache

INSTALL_HINT = "run hack/install-image-tools (as root: apt-get install podman mmdebstrap runc)"
CONTAINERS_CONF = "[containers]\ndefault_ulimits = []\n"


@dataclasses.dataclass(frozen=True)
class Engine:
    """One container engine: its command line prefix and environment."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]

    def command(self, *args: str) -> list[str]:
        """The full argv of ``<engine> args…``."""
        return [*self.argv, *args]

    def run(
        self, *args: str, timeout: float = 600, check: bool = True, output: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``<engine> args…``; stdout and stderr go to ``output`` when given.

        Raises ImageError (with the output's tail) when ``check`` and the command fails.
        """
        argv = self.command(*args)
        if output is None:
            proc = subprocess.run(
                argv,
                check=False,
                env=dict(self.env),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            text = proc.stdout + proc.stderr
        else:
            with output.open("w") as sink:
                proc = subprocess.run(
                    argv,
                    check=False,
                    env=dict(self.env),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=timeout,
                )
            text = output.read_text(errors="replace")
        if check and proc.returncode != 0:
            where = f" (log: {output})" if output else ""
            msg = f"{' '.join(argv[:4])}… failed{where}:\n{text[-3000:]}"
            raise ImageError(msg)
        return proc

    def image_id(self, ref: str) -> str | None:
        """The id of the local image ``ref``, or None when there is none."""
        proc = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False, timeout=60)
        return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def missing_tools() -> list[str]:
    """What building the image here lacks (empty when it can): root, an engine, mmdebstrap.

    Also a Node.js >= 20: the image's Node.js stage is made from this machine's.
    """
    missing = []
    if os.geteuid() != 0:
        missing.append("root (podman's root storage and mmdebstrap need it)")
    if shutil.which("podman") is None and not _docker_runs():
        missing.append("podman (or a running docker engine)")
    if shutil.which("mmdebstrap") is None:
        missing.append("mmdebstrap")
    node = nodejs.problem()
    if node is not None:
        missing.append(node)
    return missing


def find_engine() -> Engine:
    """Docker when ``docker info`` succeeds (a real engine), else podman set up for here.

    Raises ImageError naming hack/install-image-tools when something is missing.
    """
    missing = missing_tools()
    if missing:
        msg = f"cannot build the image: missing {', '.join(missing)}; {INSTALL_HINT}"
        raise ImageError(msg)
    if _docker_runs():
        return Engine("docker", ("docker",), dict(os.environ))
    argv = ["podman", "--cgroup-manager", "cgroupfs"]
    if shutil.which("runc"):
        argv[1:1] = ["--runtime", "runc"]
    return Engine("podman", tuple(argv), {**os.environ, "CONTAINERS_CONF": str(_podman_conf())})


def _docker_runs() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _podman_conf() -> Path:
    conf = image_cache() / "containers.conf"
    if not conf.is_file() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return conf
