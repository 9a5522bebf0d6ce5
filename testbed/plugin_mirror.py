"""A plugin mirror: Pulumi plugins served over HTTP as release tarballs, for the real CLI.

The CLI downloads a plugin it installs (``pulumi plugin install``, ``pulumi install``, or a
program's automatic acquisition) from GitHub or get.pulumi.com unless
``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES`` (``regexp=URL,...``) maps the plugin's source URL
to another server, from which it then GETs
``<URL>/pulumi-<kind>-<name>-v<version>-<os>-<arch>.tar.gz``. ``PluginMirror`` is that
server, on loopback or a given local address (e.g. the host end of the test node's
network, for pods): it serves each of its ``Plugin``s as such a tarball (the binary at the
archive's root, gzipped, as Pulumi's releases are), answers 404 to anything else, and
records every request so that a test can prove the CLI really downloaded from it.
``download_url_overrides(mirror.url)`` is the variable's value that sends every plugin
download there.

Tarballs are made from the test bed's built binaries (``kubernetes_provider()``) once per
binary identity and kept in the test-binaries cache.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.server
import os
import shutil
import tarfile
import threading
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from testbed.assets import KUBERNETES_PROVIDER_VERSION, cache_root, find_built, go_platform
from testbed.assets.testfile import BINARY as TESTFILE_BINARY
from testbed.assets.testfile import TESTFILE_VERSION
from testbed.process import Served
from testbed.serving import Serving

OVERRIDES_VARIABLE = "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES"


@dataclasses.dataclass(frozen=True)
class Plugin:
    """One plugin binary to serve, as ``pulumi plugin install <kind> <name> <version>`` names it."""

    kind: str  # resource, language, analyzer, ...
    name: str  # kubernetes
    version: str  # 4.25.0, without the "v"
    binary: Path

    @property
    def file_name(self) -> str:
        """The binary's name inside the archive and the plugin directory."""
        return f"pulumi-{self.kind}-{self.name}"

    def archive_name(self, platform: str | None = None) -> str:
        """The release tarball's name for ``platform`` (``<os>-<arch>``, default this one)."""
        return f"{self.file_name}-v{self.version}-{platform or go_platform()}.tar.gz"


def kubernetes_provider(*, build: bool = False) -> Plugin:
    """The Kubernetes provider the ``kubernetes`` recipe built, as a plugin to serve.

    Raises:
        AssetError: it is not built and ``build`` is false; the message names the command
            (``hack/test-assets --with kubernetes``).
    """
    binary = find_built("kubernetes", build=build) / "pulumi-resource-kubernetes"
    return Plugin("resource", "kubernetes", KUBERNETES_PROVIDER_VERSION, binary)


def file_provider(*, build: bool = True) -> Plugin:
    """The test bed's own file provider (``testbed/providers/testfile``), as a plugin to serve.

    The provider of ``testbed/programs/files-yaml``; built when missing unless ``build`` is
    false (then ``AssetError`` names the command).
    """
    binary = find_built("testfile", build=build) / TESTFILE_BINARY
    return Plugin("resource", "testfile", TESTFILE_VERSION, binary)


def download_url_overrides(url: str) -> str:
    """The ``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES`` value sending every plugin to ``url``.

    Raises:
        ValueError: ``url`` holds "," or "=", which the variable's format cannot carry.
    """
    if "," in url or "=" in url:
        msg = f"{url!r} cannot be a plugin download override (it holds ',' or '=')"
        raise ValueError(msg)
    return f"^.*$={url.rstrip('/')}"


def plugin_archive(plugin: Plugin, cache: Path | None = None) -> Path:
    """Return the plugin's release tarball, made on first use for this binary.

    It is keyed by the binary's path, size and modification time, under ``cache`` (default:
    ``plugin-mirror`` in the test-binaries cache), and written atomically.
    """
    stat = plugin.binary.stat()
    identity = f"{plugin.binary.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    directory = (cache or cache_root() / "plugin-mirror") / f"{plugin.file_name}-{digest}"
    archive = directory / plugin.archive_name()
    if archive.is_file():
        return archive
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{archive.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    _write_archive(plugin, partial)
    partial.rename(archive)
    return archive


def _write_archive(plugin: Plugin, dest: Path) -> None:
    """Write a gzipped tar holding the binary alone, at its root, executable."""
    with (
        gzip.GzipFile(dest, mode="wb", compresslevel=1, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        info = tar.gettarinfo(str(plugin.binary), arcname=plugin.file_name)
        info.mode, info.mtime, info.uid, info.gid = 0o755, 0, 0, 0
        info.uname = info.gname = "root"
        with plugin.binary.open("rb") as handle:
            tar.addfile(info, handle)


@dataclasses.dataclass(frozen=True)
class MirrorRequest:
    """One request the mirror answered."""

    method: str
    path: str  # as requested, e.g. /pulumi-resource-kubernetes-v4.25.0-linux-amd64.tar.gz
    status: int  # 200 or 404

    @property
    def file_name(self) -> str:
        """The requested file's name (the path's last segment, unquoted)."""
        return urllib.parse.unquote(self.path.split("?", 1)[0].rsplit("/", 1)[-1])


class _Server(http.server.ThreadingHTTPServer):
    """An HTTP server holding the mirror's archives and its request record."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], archives: dict[str, Path]) -> None:
        super().__init__(address, _Handler)
        self.archives = archives
        self.served: list[MirrorRequest] = []
        self.served_lock = threading.Lock()

    def record(self, request: MirrorRequest) -> None:
        with self.served_lock:
            self.served.append(request)


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET and HEAD of an archive by name: 200 with its bytes, else 404."""

    server: _Server

    def do_GET(self) -> None:
        """Send the archive, or 404."""
        self._answer(body=True)

    def do_HEAD(self) -> None:
        """Send the archive's headers, or 404."""
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        archive = self.server.archives.get(MirrorRequest("", self.path, 0).file_name)
        status = 200 if archive is not None else 404
        self.server.record(MirrorRequest(self.command, self.path, status))
        if archive is None:
            self.send_error(404, "no such plugin archive on this mirror")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/gzip")
        self.send_header("Content-Length", str(archive.stat().st_size))
        self.end_headers()
        if body:
            with archive.open("rb") as handle:
                shutil.copyfileobj(handle, self.wfile)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        """Log nothing: ``PluginMirror.requests`` is the record."""
        del format, args


class PluginMirror(Served):
    """An HTTP server of plugin release tarballs on ``host`` (a free port); see the module."""

    def __init__(
        self, plugins: Sequence[Plugin], host: str = "127.0.0.1", cache: Path | None = None
    ) -> None:
        """Prepare (not start) a mirror of ``plugins`` listening on ``host`` (an address).

        ``cache`` is where the tarballs are kept (see ``plugin_archive``).
        """
        self.plugins, self.host, self._cache = list(plugins), host, cache
        self._server: _Server | None = None
        self._serving: Serving | None = None

    @property
    def url(self) -> str:
        """The mirror's base URL, ``http://<host>:<port>`` (once started)."""
        assert self._server is not None, "start() first"
        return f"http://{self.host}:{self._server.server_address[1]}"

    @property
    def overrides(self) -> str:
        """The ``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES`` value for this mirror."""
        return download_url_overrides(self.url)

    @property
    def requests(self) -> list[MirrorRequest]:
        """Every request answered so far, oldest first."""
        assert self._server is not None, "start() first"
        with self._server.served_lock:
            return list(self._server.served)

    def downloads(self) -> list[str]:
        """The archive names served with 200 to a GET so far, oldest first."""
        return [r.file_name for r in self.requests if r.method == "GET" and r.status == 200]

    def start(self) -> None:
        """Make (or find) the tarballs, then serve them; returns once the port is bound."""
        archives = {p.archive_name(): plugin_archive(p, self._cache) for p in self.plugins}
        self._server = _Server((self.host, 0), archives)
        self._serving = Serving(self._server, "plugin-mirror")

    def stop(self) -> None:
        """Stop serving and close the port; safe to call twice. The record stays readable."""
        if self._serving is not None:
            self._serving.stop()
