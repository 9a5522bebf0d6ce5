"""The operator's default backend is scoped per namespace; a Stack's own backend is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconcile.backend import local_directory, namespaced


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        ("file:///state", "file:///state/team-a"),
        ("file:///state/", "file:///state/team-a"),
        ("s3://bucket", "s3://bucket/team-a"),
        ("s3://bucket/prefix?region=eu-west-1", "s3://bucket/prefix/team-a?region=eu-west-1"),
        ("gs://bucket", "gs://bucket/team-a"),
        ("azblob://container", "azblob://container/team-a"),
        ("https://api.pulumi.com", "https://api.pulumi.com"),
    ],
)
def test_default_backend_gets_a_prefix_per_namespace(default: str, expected: str) -> None:
    """Blob backends get the namespace as a path prefix; HTTP backends stay as they are."""
    assert namespaced(default, "team-a") == expected


def test_two_namespaces_never_share_a_blob_backend() -> None:
    """Two namespaces get two different URLs."""
    assert namespaced("file:///state", "a") != namespaced("file:///state", "b")


def test_local_directory_only_for_file_backends() -> None:
    """Only a file:// backend names a local directory to create."""
    assert local_directory("file:///state/team-a") == Path("/state/team-a")
    assert local_directory("s3://bucket/team-a") is None
    assert local_directory("https://api.pulumi.com") is None
