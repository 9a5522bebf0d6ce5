"""The test bed's Pulumi CLI as a release archive, served on loopback for the image build.

The Dockerfile ``ADD``s ``PULUMI_URL`` (``pulumi-v<version>-linux-<arch>.tar.gz`` holding
``pulumi/<binary>``) and ``PULUMI_CHECKSUMS_URL`` (``<sha256>  <archive name>`` lines, as
the releases publish them). ``release_dir`` makes both from the binaries the test bed built
(cached by their identity); ``serve`` serves a directory on 127.0.0.1 for one build.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import platform
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

from testbed.assets import PULUMI_BINARIES, PULUMI_VERSION
from testbed.image.cache import image_cache


def arch() -> str:
    """This machine's architecture as Pulumi's release archives name it (x64, arm64)."""
    machine = platform.machine()
    return {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(machine, machine)


def archive_name(version: str = PULUMI_VERSION, architecture: str | None = None) -> str:
    """The release archive's file name."""
    return f"pulumi-v{version}-linux-{architecture or arch()}.tar.gz"


def checksums_name(version: str = PULUMI_VERSION) -> str:
    """The release's checksums file name."""
    return f"pulumi-{version}-checksums.txt"


def identity(pulumi_bin: Path) -> str:
    """A cheap fingerprint of the binaries: name, size and mtime of each (no reading)."""
    parts = [str(pulumi_bin.resolve())]
    for binary in PULUMI_BINARIES:
        stat = (pulumi_bin / binary).stat()
        parts.append(f"{binary}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def release_dir(pulumi_bin: Path) -> Path:
    """A directory holding the archive and checksums file made from ``pulumi_bin``'s binaries."""
    directory = image_cache() / "pulumi-release" / f"{PULUMI_VERSION}-{identity(pulumi_bin)}"
    checksums = directory / checksums_name()
    if checksums.is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / archive_name()
    write_archive(pulumi_bin, archive)
    with archive.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    partial = checksums.with_suffix(".tmp")
    partial.write_text(f"{digest}  {archive.name}\n")
    partial.rename(checksums)  # last: its presence means the directory is complete
    return directory


def write_archive(pulumi_bin: Path, dest: Path) -> None:
    """Write to ``dest`` a gzipped tar of ``pulumi/<binary>`` for each of PULUMI_BINARIES."""
    with (
        gzip.GzipFile(dest, mode="wb", compresslevel=1, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for binary in PULUMI_BINARIES:
            info = tar.gettarinfo(str(pulumi_bin / binary), arcname=f"pulumi/{binary}")
            info.mode, info.mtime, info.uid, info.gid = 0o755, 0, 0, 0
            info.uname = info.gname = "root"
            with (pulumi_bin / binary).open("rb") as handle:
                tar.addfile(info, handle)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        del format, args


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="pulumi-release", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
