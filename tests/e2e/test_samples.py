"""The samples of ``manifests/samples`` applied as shipped, each to ``Ready``.

A user edits a sample's ``CHANGE ME`` values and applies its directory with
``kubectl apply --server-side -n NAMESPACE -k``; so does each test here, on a copy, with
only those values changed (the passphrase to a sentinel the leak scan looks for, the
``file://`` backend to the test's state, the Flux sample's repository URL to a public git
server on this machine that holds this repository's ``manifests/samples`` as they are).
The objects, their names and the rest of each spec are the files' own.

Local runner only: what is proven is the samples as shipped, not a runner (the sources
themselves run under each runner in ``test_sources``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.flux import SourceController
from testbed.git_http import GitHttpServer
from testbed.git_server import Checkout
from tests.e2e.beds import Bed
from tests.e2e.conftest import Operator, Sentinels, Stacks

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
local_only = pytest.mark.parametrize("runner", ["local"])

SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"
SHIPPED_PASSPHRASE = "correct-horse-battery-staple"  # noqa: S105 - the samples' placeholder
SHIPPED_BACKEND = "file:///tmp/pulumi-state"
SHIPPED_URL = "https://github.com/pulumi-stack-operator/pulumi-stack-operator"
FIRST_RUN = 300


def edited(sample: str, into: Path, changes: dict[str, str]) -> Path:
    """A copy of sample directory ``sample`` with each placeholder of ``changes`` replaced.

    Fails if a placeholder is not in the sample: the test must change only what is there.
    """
    target = into / sample
    shutil.copytree(SAMPLES / sample, target)
    seen = set()
    for path in target.glob("*.yaml"):
        text = path.read_text()
        for old, new in changes.items():
            if old in text:
                seen.add(old)
                text = text.replace(old, new)
        path.write_text(text)
    assert seen == set(changes), f"{sample} lacks {set(changes) - seen}"
    return target


def apply(bed: Bed, directory: Path) -> None:
    """``kubectl apply --server-side -n NAMESPACE -k DIRECTORY``, as the samples say."""
    bed.control_plane.kubectl("apply", "--server-side", "-n", bed.namespace, "-k", str(directory))


def finish(stacks: Stacks, name: str) -> None:
    """Delete the Stack; ``destroyOnFinalize`` destroys its stack, then it is gone."""
    stacks.delete(name)
    stacks.wait_gone(name, FIRST_RUN)


@pytest.fixture
def public_git(tmp_path: Path) -> Iterator[GitHttpServer]:
    """A public smart-HTTP git server (no credentials asked), as GitHub serves a public repo."""
    server = GitHttpServer(tmp_path / "public-git", [], public=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@local_only
def test_the_program_object_sample_is_ready_with_its_output(
    bed: Bed, stacks: Stacks, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """``manifests/samples/program-object``: the Program's YAML program runs; Ready."""
    del operator
    directory = edited(
        "program-object",
        tmp_path,
        {SHIPPED_PASSPHRASE: sentinels.passphrase, SHIPPED_BACKEND: f"file://{stacks.backend}"},
    )
    apply(bed, directory)
    stacks.hand_over()
    status = stacks.wait_ready("hello-program", FIRST_RUN)["status"]
    assert status["outputs"]["message"] == "Hi from a Program object"
    assert status["lastUpdate"]["lastSuccessfulCommit"].startswith("sha256:")
    finish(stacks, "hello-program")


@local_only
@pytest.mark.flux
def test_the_flux_sample_is_ready_at_its_repositorys_revision(
    bed: Bed,
    stacks: Stacks,
    operator: Operator,
    sentinels: Sentinels,
    flux_source: SourceController,
    public_git: GitHttpServer,
    tmp_path: Path,
) -> None:
    """``manifests/samples/flux``: the GitRepository's artifact's program runs; Ready."""
    del operator, flux_source
    url = public_git.create_repo("pulumi-stack-operator", "main")
    program = SAMPLES / "yaml-program" / "Pulumi.yaml"
    commit = Checkout(
        public_git.push_url("pulumi-stack-operator"), tmp_path / "push", "main"
    ).commit({"manifests/samples/yaml-program/Pulumi.yaml": program.read_text()}, "samples")
    directory = edited(
        "flux",
        tmp_path,
        {
            SHIPPED_PASSPHRASE: sentinels.passphrase,
            SHIPPED_BACKEND: f"file://{stacks.backend}",
            SHIPPED_URL: url,
        },
    )
    apply(bed, directory)
    stacks.hand_over()
    status = stacks.wait_ready("hello-flux", FIRST_RUN)["status"]
    assert status["outputs"]["message"] == "Hi from a Flux source"
    assert status["lastUpdate"]["lastSuccessfulCommit"] == f"main@sha1:{commit}"
    finish(stacks, "hello-flux")
    assert {r.user for r in public_git.requests} == {""}, "fetched without credentials"
