"""A Flux OCIRepository as a Stack's source, with a recorded artifact.

No OCI registry can be built here from a Go module the test bed already builds, so the
source-controller cannot pull an OCI artifact: instead the OCIRepository (its real CRD,
from the source-controller's module) is suspended, so that no source-controller touches
it, and its status is written as the source-controller writes it, announcing a tarball
served by this test over HTTP as the source-controller serves its artifacts. The real
operator then deploys it, and refuses an artifact whose digest is not the announced one
or that holds an entry leaving it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from testbed.assets import find_flux_crds
from testbed.control_plane import wait_established
from tests.conftest import PROGRAMS
from tests.e2e.beds import Bed
from tests.e2e.conftest import Operator, Stacks, has_reason
from tests.e2e.test_sources import NO_REPO

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
GROUP, VERSION, PLURAL = "source.toolkit.fluxcd.io", "v1", "ocirepositories"


def program_tarball() -> bytes:
    """The files program under ``app/``, as a gzip tar (the source-controller's format)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted((PROGRAMS / "files").iterdir()):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"app/{path.name}")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@contextlib.contextmanager
def serving(tarball: bytes) -> Iterator[str]:
    """An HTTP server on loopback serving ``tarball`` at ``/artifact.tar.gz``: its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(tarball)))
            self.end_headers()
            self.wfile.write(tarball)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            del format, args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/artifact.tar.gz"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def served() -> Iterator[tuple[str, bytes]]:
    """The program's tarball, served: (url, bytes)."""
    tarball = program_tarball()
    with serving(tarball) as url:
        yield url, tarball


def install_oci_crd(bed: Bed) -> None:
    """The OCIRepository CRD of the source-controller's module, Established."""
    [crd] = [path for path in find_flux_crds() if "ocirepositories" in path.name]
    bed.control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_established(bed.control_plane.kubectl, "ocirepositories.source.toolkit.fluxcd.io")


def announce(bed: Bed, url: str, digest: str, revision: str) -> None:
    """Create (once) the suspended OCIRepository ``app`` and write its status as Flux does."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    namespace = bed.namespace
    with bed.control_plane.api_client() as api:
        objects = client.CustomObjectsApi(api)
        try:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "OCIRepository",
                "metadata": {"name": "app"},
                "spec": {"interval": "1h", "url": "oci://registry.invalid/app", "suspend": True},
            }
            objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        except client.ApiException as err:
            if err.status != 409:
                raise
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "Succeeded",
            "message": f"stored artifact for digest '{revision}'",
            "lastTransitionTime": now,
        }
        artifact = {
            "path": f"ocirepository/{namespace}/app/artifact.tar.gz",
            "url": url,
            "revision": revision,
            "digest": digest,
            "lastUpdateTime": now,
        }
        status: dict[str, Any] = {"status": {"conditions": [ready], "artifact": artifact}}
        objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "app", status
        )


@pytest.mark.parametrize("runner", ["local", "agent"])
def test_an_oci_repository_artifact_is_deployed_and_a_wrong_or_unsafe_one_refused(
    bed: Bed, stacks: Stacks, operator: Operator, served: tuple[str, bytes]
) -> None:
    """Ready at the OCI artifact's revision; a wrong digest, then an unsafe one, stall.

    Under the local runner the operator fetches the artifact; under the agent runner the
    run's agent does and reports the failure across the runner seam: the same reasons.
    Not on the node: the agent's fetch and report are the same code in a pod.
    """
    del operator  # runs the Stacks
    install_oci_crd(bed)
    url, tarball = served
    digest = digest_of(tarball)
    announce(bed, url, digest, f"latest@{digest}")
    oci_stack(stacks)
    last = stacks.wait_ready("oci", 300)["status"]["lastUpdate"]
    assert last["lastSuccessfulCommit"] == f"latest@{digest}"
    assert stacks.target("oci").read_text() == "one"

    wrong = "sha256:" + "0" * 64
    announce(bed, url, wrong, f"latest@{wrong}")
    stalled = stacks.wait_reason("oci", "Stalled", "ArtifactDigestMismatch", 120)
    assert has_reason(stalled, "Ready", "ArtifactDigestMismatch")
    assert stalled["status"]["lastUpdate"]["lastSuccessfulCommit"] == f"latest@{digest}"

    unsafe = unsafe_tarball()
    with serving(unsafe) as unsafe_url:
        announce(bed, unsafe_url, digest_of(unsafe), f"latest@{digest_of(unsafe)}")
        stalled = stacks.wait_reason("oci", "Stalled", "ArtifactUnsafe", 120)
    assert has_reason(stalled, "Ready", "ArtifactUnsafe")
    assert not (bed.state.parent / "escape").exists()


def digest_of(tarball: bytes) -> str:
    """The artifact digest Flux announces for ``tarball``."""
    return "sha256:" + hashlib.sha256(tarball).hexdigest()


def unsafe_tarball() -> bytes:
    """The files program, plus an entry that leaves the archive (``../escape``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.addfile(tarfile.TarInfo("app"), None)
        with tarfile.open(fileobj=io.BytesIO(program_tarball()), mode="r:gz") as program:
            for member in program.getmembers():
                archive.addfile(member, program.extractfile(member))
        info = tarfile.TarInfo("../escape")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"out"))
    return buffer.getvalue()


def oci_stack(stacks: Stacks) -> None:
    """Create Stack ``oci`` on the OCIRepository ``app`` (its program under ``app/``)."""
    stacks.hand_over()
    source = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "OCIRepository", "name": "app"}
    manifest = stacks.manifest(
        "oci", NO_REPO, projectRepo=None, branch=None, repoDir=None,  # type: ignore[arg-type]
        fluxSource={"sourceRef": source, "dir": "app"},
    )  # fmt: skip
    stacks.create(manifest)
