"""The Flux source-controller of the test bed turns a branch of a git server into artifacts.

Against the session's control plane and a smart-HTTP git server with basic authentication
(GitRepository URLs must be http, https or ssh, so not the ``git://`` daemon): a
GitRepository becomes Ready with an artifact whose URL this machine downloads, whose
sha256 is the advertised digest and which holds the committed file; a push to the branch
gives a new artifact of the new revision.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from testbed.flux import SourceController
from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout

BRANCH = "main"
CREDENTIALS = "git-credentials"


class Source:
    """A repository on the git server, its working copy, and a GitRepository following it."""

    def __init__(
        self, flux: SourceController, server: GitHttpServer, namespace: str, work: Path
    ) -> None:
        """Create the repository (no commit yet) and its working copy."""
        self.flux, self.namespace = flux, namespace
        self.name = f"repo-{secrets.token_hex(4)}"
        self.url = server.create_repo(self.name, BRANCH)
        self.checkout = Checkout(server.push_url(self.name), work / self.name, BRANCH)

    def follow(self) -> None:
        """Create the GitRepository for the branch, with the server's credentials."""
        self.flux.git_repository(self.namespace, self.name, self.url, BRANCH, secret=CREDENTIALS)

    def artifact(self, sha: str) -> dict[str, Any]:
        """``status.artifact`` once it is of commit ``sha``."""
        revision = f"{BRANCH}@sha1:{sha}"
        return self.flux.wait_artifact(self.namespace, self.name, revision=revision)


@pytest.fixture
def source(
    flux_source: SourceController,
    flux_git: GitHttpServer,
    flux_account: Account,
    namespace: str,
    tmp_path: Path,
) -> Source:
    """A fresh repository, and the credentials Secret in the test's namespace."""
    flux_source.credentials(namespace, CREDENTIALS, flux_account.username, flux_account.password)
    return Source(flux_source, flux_git, namespace, tmp_path)


def download(url: str) -> bytes:
    """GET ``url`` from this machine."""
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the test bed's
        body: bytes = response.read()
    return body


def member(archive: bytes, name: str) -> str:
    """The text of file ``name`` in the tar.gz ``archive``."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        extracted = tar.extractfile(name)
        assert extracted is not None, f"{name} is not a regular file in the artifact"
        return extracted.read().decode()


def test_a_branch_becomes_an_artifact_this_machine_downloads(
    flux_source: SourceController, source: Source
) -> None:
    """Ready with an artifact of the commit, served at the advertised address, digest true."""
    sha = source.checkout.commit({"app/hello.txt": "hello from git\n"}, "first")
    source.follow()

    artifact = source.artifact(sha)

    assert artifact["url"].startswith(f"http://{flux_source.storage_address}/")
    archive = download(artifact["url"])
    assert artifact["digest"] == f"sha256:{hashlib.sha256(archive).hexdigest()}"
    assert member(archive, "app/hello.txt") == "hello from git\n"


def test_a_push_to_the_branch_changes_the_revision(
    flux_source: SourceController, source: Source
) -> None:
    """After a push (and a reconcile request) the artifact is of the new commit."""
    first_sha = source.checkout.commit({"hello.txt": "one\n"}, "first")
    source.follow()
    first = source.artifact(first_sha)

    second_sha = source.checkout.commit({"hello.txt": "two\n"}, "second")
    flux_source.reconcile_now(source.namespace, source.name)
    second = source.artifact(second_sha)

    assert (first["revision"], second["revision"]) == (
        f"{BRANCH}@sha1:{first_sha}",
        f"{BRANCH}@sha1:{second_sha}",
    )
    assert second["digest"] != first["digest"]
    assert member(download(second["url"]), "hello.txt") == "two\n"
