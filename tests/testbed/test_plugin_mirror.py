"""The plugin mirror serves release tarballs that the real Pulumi CLI downloads and installs."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed.assets import KUBERNETES_PROVIDER_VERSION, find_pulumi, go_platform
from testbed.plugin_mirror import (
    OVERRIDES_VARIABLE,
    MirrorRequest,
    Plugin,
    PluginMirror,
    download_url_overrides,
    plugin_archive,
)


def fake_plugin(tmp_path: Path) -> Plugin:
    """A small executable file standing in for a plugin binary."""
    binary = tmp_path / "pulumi-resource-fake"
    binary.write_text("#!/bin/sh\necho fake provider\n")
    binary.chmod(0o755)
    return Plugin("resource", "fake", "1.2.3", binary)


def get(url: str) -> bytes:
    """GET ``url``; its body."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our loopback URL
        body: bytes = response.read()
        return body


def test_overrides_send_every_plugin_to_the_mirror() -> None:
    """The variable's value is ``regexp=URL``: any source URL, to the mirror's base URL."""
    assert download_url_overrides("http://127.0.0.1:8080/") == "^.*$=http://127.0.0.1:8080"
    with pytest.raises(ValueError, match="cannot be a plugin download override"):
        download_url_overrides("http://h/?a=b")


def test_archive_name_is_the_release_name(tmp_path: Path) -> None:
    """``pulumi-<kind>-<name>-v<version>-<os>-<arch>.tar.gz``, as the CLI requests it."""
    plugin = fake_plugin(tmp_path)
    assert plugin.archive_name("linux-amd64") == "pulumi-resource-fake-v1.2.3-linux-amd64.tar.gz"
    assert plugin.archive_name() == f"pulumi-resource-fake-v1.2.3-{go_platform()}.tar.gz"


def test_serves_the_tarball_records_requests_and_404s(tmp_path: Path) -> None:
    """The binary sits alone at the archive's root, executable; anything else is a 404."""
    plugin = fake_plugin(tmp_path)
    mirror = PluginMirror([plugin], cache=tmp_path / "cache")
    mirror.start()
    try:
        body = get(f"{mirror.url}/{plugin.archive_name()}")
        with pytest.raises(urllib.error.HTTPError) as missing:
            get(f"{mirror.url}/pulumi-resource-other-v1.0.0-linux-amd64.tar.gz")
        missing.value.close()  # its unread body holds the connection
    finally:
        mirror.stop()

    assert missing.value.code == 404
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [(m.name, m.mode, m.isfile()) for m in members] == [(plugin.file_name, 0o755, True)]
        extracted = tar.extractfile(members[0])
        assert extracted is not None
        assert extracted.read() == plugin.binary.read_bytes()
    assert mirror.requests == [
        MirrorRequest("GET", f"/{plugin.archive_name()}", 200),
        MirrorRequest("GET", "/pulumi-resource-other-v1.0.0-linux-amd64.tar.gz", 404),
    ]
    assert mirror.downloads() == [plugin.archive_name()]


def test_tarball_is_made_once_per_binary(tmp_path: Path) -> None:
    """The same binary reuses its cached tarball; a changed binary gets a new one."""
    plugin = fake_plugin(tmp_path)
    first = plugin_archive(plugin, tmp_path / "cache")
    made = first.stat().st_mtime_ns

    assert plugin_archive(plugin, tmp_path / "cache") == first
    assert first.stat().st_mtime_ns == made
    plugin.binary.write_text("#!/bin/sh\necho a rebuilt provider\n")
    assert plugin_archive(plugin, tmp_path / "cache") != first


def install(home: Path, mirror: PluginMirror, *plugin: str) -> subprocess.CompletedProcess[str]:
    """Run ``pulumi plugin install <plugin...>`` in ``home``, downloading from ``mirror``."""
    env = {
        **os.environ,
        "PULUMI_HOME": str(home),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        OVERRIDES_VARIABLE: mirror.overrides,
    }
    return subprocess.run(
        [str(find_pulumi() / "pulumi"), "plugin", "install", *plugin],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.pulumi
def test_cli_installs_the_provider_from_the_mirror(
    plugin_mirror: PluginMirror, tmp_path: Path
) -> None:
    """``pulumi plugin install resource kubernetes 4.25.0`` downloads it from the mirror."""
    version = KUBERNETES_PROVIDER_VERSION
    archive = f"pulumi-resource-kubernetes-v{version}-{go_platform()}.tar.gz"
    home = tmp_path / "pulumi-home"
    served_before = len(plugin_mirror.downloads())

    proc = install(home, plugin_mirror, "resource", "kubernetes", version)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert plugin_mirror.downloads()[served_before:] == [archive]
    installed = home / "plugins" / f"resource-kubernetes-v{version}" / "pulumi-resource-kubernetes"
    assert installed.is_file()
    assert os.access(installed, os.X_OK)


@pytest.mark.pulumi
@pytest.mark.parametrize(
    ("name", "version", "flags"),
    [
        ("kubernetes", "4.24.0", ()),  # a known plugin, at a version the mirror lacks
        # A name the CLI resolves without the Pulumi Registry only with a source of its own;
        # the overrides send that source to the mirror too.
        ("nosuch", "1.2.3", ("--server", "https://plugins.example.invalid")),
    ],
)
def test_missing_plugin_is_a_cli_error_naming_it(
    plugin_mirror: PluginMirror, tmp_path: Path, name: str, version: str, flags: tuple[str, ...]
) -> None:
    """A plugin the mirror lacks fails the install with a 404 naming plugin and version."""
    proc = install(tmp_path / "pulumi-home", plugin_mirror, "resource", name, version, *flags)

    assert proc.returncode != 0
    archive = f"pulumi-resource-{name}-v{version}-{go_platform()}.tar.gz"
    expected = (
        f"failed to download plugin: {name}-{version}: 404 HTTP error fetching plugin from "
        f"{plugin_mirror.url}/{archive}"
    )
    assert expected in proc.stderr
    assert MirrorRequest("GET", f"/{archive}", 404) in plugin_mirror.requests
