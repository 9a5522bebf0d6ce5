"""Running the operator's image in a container, for the image tests.

``run_image`` runs it the way a cluster does: the image's user, a read-only root
filesystem, writable mounts on the work dir and /tmp only, no network (unless a test needs
a package registry: then the host's network and CA bundle).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from testbed.image import BuiltImage, Engine

WORK_DIR = "/var/lib/pulumi-stack-operator"
UID = 65532


def writable_dir(path: Path) -> Path:
    """Create ``path`` owned by the image's user (podman 4.3 rejects ``--tmpfs …:uid=``)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, UID, UID)
    return path


@contextlib.contextmanager
def container_name(engine: Engine) -> Iterator[str]:
    """A fresh container name; the container is removed on exit, also after a timeout."""
    name = f"pso-image-test-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        engine.run("rm", "--force", name, check=False, timeout=60)


def run_image(
    engine: Engine,
    image: BuiltImage,
    scratch: Path,
    *args: str,
    entrypoint: str | None = None,
    env_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    network: str = "none",
    read_only: Mapping[Path, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run ``image`` with ``args``: read-only root, ``scratch``/work and /tmp writable.

    ``network`` is podman's ``--network`` (``host`` to reach a package registry);
    ``read_only`` mounts host paths read-only at container paths (e.g. a CA bundle).
    Returns the finished process (stdout and stderr captured), whatever its exit code.
    """
    options = ["--rm", "--network", network, "--read-only", *_mounts(scratch, read_only or {})]
    if entrypoint is not None:
        options += ["--entrypoint", entrypoint]
    if env_file is not None:
        options += ["--env-file", str(env_file)]
    for key, value in (env or {}).items():
        options += ["--env", f"{key}={value}"]
    with container_name(engine) as name:
        return engine.run(
            "run", "--name", name, *options, image.ref, *args, check=False, timeout=timeout
        )


def _mounts(scratch: Path, read_only: Mapping[Path, str]) -> list[str]:
    """``-v`` options: the writable work dir and /tmp under ``scratch``, then ``read_only``."""
    mounts = ["-v", f"{writable_dir(scratch / 'work')}:{WORK_DIR}"]
    mounts += ["-v", f"{writable_dir(scratch / 'tmp')}:/tmp"]
    for source, target in read_only.items():
        mounts += ["-v", f"{source}:{target}:ro"]
    return mounts
