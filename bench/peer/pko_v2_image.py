"""PKO v2's own image for the node cluster, written as an OCI archive (no registry, no engine).

PKO v2 runs its manager from this image, and every workspace pod's init containers too
(``AGENT_IMAGE``): ``bootstrap`` runs ``cp /agent /tini /share/`` and ``fetch`` runs
``sh -c '/share/agent init … && ln -s …'``, both through the image's entrypoint. Its
released image is distroless with busybox and a static tini, as user 65532; this one is
the same shape, one layer made by ``testbed.node.oci.make_oci_archive``:

- ``/manager`` and ``/agent`` from ``bench.peer.pko_v2_build``;
- ``/tini``: Debian bookworm's ``tini-static``; ``/bin/sh``, ``/bin/cp``, ``/bin/ln``:
  Debian's ``busybox-static`` (busybox picks the applet by its name). Both ``.deb`` files
  are fetched once with ``apt-get download`` into the cache and unpacked with ``dpkg-deb``;
- ``/etc/ssl/certs/ca-certificates.crt``: the CA bundle given (the bench's git server's
  CA, which Go's TLS trusts there: the ``fetch`` init container clones over HTTPS);
- entrypoint ``/tini --``, ``PATH=/bin``, user 65532 (the uid of our image, which PKO's
  workspace pods then run as their ``pulumi`` container: the files the init containers
  write into the shared volume are that user's).

``image_archive(built, dest, ca_pem)`` writes it as ``IMAGE`` and returns the archive's path.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from bench.peer.pko_v2_build import BuildError, Built
from testbed.assets import cache_root
from testbed.node.oci import make_oci_archive

IMAGE = "localhost/pko-v2/operator:bench"
USER = "65532"
DEBS = {"tini": "usr/bin/tini-static", "busybox-static": "bin/busybox"}
APPLETS = ("sh", "cp", "ln")


def image_archive(built: Built, dest: Path, ca_pem: bytes = b"") -> Path:
    """Write PKO v2's image (``IMAGE``) for ``built``, trusting ``ca_pem``, to ``dest``."""
    tools = _static_tools()
    files: dict[str, Path | bytes] = {
        "manager": built.manager,
        "agent": built.agent,
        "tini": tools["tini"],
        **{f"bin/{applet}": tools["busybox-static"] for applet in APPLETS},
        "etc/ssl/certs/ca-certificates.crt": ca_pem,
    }
    return make_oci_archive(dest, IMAGE, files, ["/tini", "--"], env=("PATH=/bin",), user=USER)


def _static_tools() -> dict[str, Path]:
    """The static tini and busybox binaries, unpacked from Debian's packages (cached)."""
    root = cache_root() / "pko-v2" / "static-tools"
    found = {package: root / package / member for package, member in DEBS.items()}
    for package, binary in found.items():
        if not binary.is_file():
            _unpack(package, root / package)
        if not binary.is_file():
            msg = f"Debian's {package} has no {DEBS[package]}"
            raise BuildError(msg)
    return found


def _unpack(package: str, dest: Path) -> None:
    """``apt-get download`` ``package`` and unpack its files into ``dest``.

    Raises:
        BuildError: apt-get could not fetch it (with its stderr's tail).
    """
    with tempfile.TemporaryDirectory(prefix="pko-v2-deb-") as work:
        done = subprocess.run(
            ["apt-get", "download", package],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        debs = list(Path(work).glob(f"{package}_*.deb"))
        if done.returncode != 0 or not debs:
            msg = f"apt-get download {package} failed: {done.stderr[-2000:]}"
            raise BuildError(msg)
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(dest)], check=True)
