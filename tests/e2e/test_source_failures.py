"""Source failures met where the run lays its source out, under the local and agent runners.

Under the local runner the operator lays the source out itself before the run; under a
runner that takes a job (the pod runner, here its agent without the pod) the agent does,
in the run's own workspace, and reports the failure across the runner seam. Either way
the Stack must show the same reason: a pinned commit whose git credentials the server
refuses stalls ``AuthenticationFailed``, and an artifact server that went away is
``SourceUnavailable``, retried (a wrong or unsafe artifact: ``tests/e2e/test_oci_source``).
Not run on the node: what these prove is the agent's checkout and its report, the same
code in a pod (``docs/test-bed.md``).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.beds import Bed
from tests.e2e.conftest import (
    Operator,
    Sentinels,
    Stacks,
    basic_auth,
    has_reason,
    private_repo,
)
from tests.e2e.test_oci_source import (
    announce,
    digest_of,
    install_oci_crd,
    oci_stack,
    program_tarball,
    serving,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
job_or_not = pytest.mark.parametrize("runner", ["local", "agent"])


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@job_or_not
def test_an_artifact_server_that_went_away_is_retried_as_source_unavailable(
    bed: Bed, stacks: Stacks, operator: Operator
) -> None:
    """Nothing answers at the announced URL: retrying (``Reconciling``), never Stalled."""
    del operator
    install_oci_crd(bed)
    tarball = program_tarball()
    gone = f"http://127.0.0.1:{closed_port()}/artifact.tar.gz"
    announce(bed, gone, digest_of(tarball), f"latest@{digest_of(tarball)}")
    oci_stack(stacks)
    obj = stacks.wait_reason("oci", "Reconciling", "ProgressingWithRetry", 120)
    assert has_reason(obj, "Ready", "SourceUnavailable")
    assert not any(c["type"] == "Stalled" for c in obj["status"]["conditions"])
    with serving(tarball) as url:  # the server is back: the retry deploys it
        announce(bed, url, digest_of(tarball), f"latest@{digest_of(tarball)}")
        stacks.wait_ready("oci", 300)


@job_or_not
def test_a_pinned_commit_whose_credentials_are_refused_stalls_authentication_failed(
    stacks: Stacks, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """``commit`` pinned (no branch to ask for): the checkout itself meets the refusal."""
    del operator
    with private_repo(stacks, sentinels, tmp_path, right=False) as repo:
        manifest = stacks.manifest(
            "pinned", repo.program, branch=None, commit=repo.program.first,
            gitAuth=basic_auth("git-credentials"),
        )  # fmt: skip
        stacks.create(manifest)
        obj = stacks.wait_reason("pinned", "Stalled", "AuthenticationFailed", 120)
        assert has_reason(obj, "Ready", "AuthenticationFailed")
        stacks.update_secret("git-credentials", {"password": sentinels.git_password})
        stacks.wait_ready("pinned", 300)
