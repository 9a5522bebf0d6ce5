"""Flux sources and Programs as a Stack's program source, on fakes.

A Stack runs the revision its source object announces (a Flux artifact's, a rendered
Program's), waits without failing while there is none (``SourceNotReady``), stalls on a
Program that cannot render (``InvalidSpec``), and runs again exactly when the revision
changes.
"""

from __future__ import annotations

from typing import Any

from controller.cache import ObjectKey
from controller.reconciler import Result
from status.conditions import Reason
from tests.reconcile.stack_harness import Harness, reaches
from workspace.source import SourceError, SourceFailure

FLUX_REF: dict[str, Any] = {
    "apiVersion": "source.toolkit.fluxcd.io/v1",
    "kind": "GitRepository",
    "name": "infra",
}
FLUX: dict[str, Any] = {
    "projectRepo": None,
    "branch": None,
    "fluxSource": {"sourceRef": FLUX_REF, "dir": "app"},
}
PROGRAM: dict[str, Any] = {
    "projectRepo": None,
    "branch": None,
    "programRef": {"name": "random-yaml"},
}
SHA = "2b08897" + "0" * 33


def git_repository(h: Harness, revision: str = f"main@sha1:{SHA}", ready: str = "True") -> None:
    """The GitRepository ``infra`` with an artifact at ``revision``."""
    artifact = {
        "url": "http://source-controller/gitrepository/ns/infra/a.tar.gz",
        "revision": revision,
        "digest": "sha256:" + "ab" * 32,
    }
    condition = {"type": "Ready", "status": ready, "message": "fetching failed: boom"}
    obj = {
        "metadata": {"name": "infra"},
        "status": {"conditions": [condition], "artifact": artifact},
    }
    h.objects.objects[("GitRepository", ObjectKey("ns", "infra"))] = obj


def program(h: Harness, resources: dict[str, Any]) -> None:
    """The Program ``random-yaml`` with ``resources``."""
    obj = {"metadata": {"name": "random-yaml"}, "program": {"resources": resources}}
    h.objects.objects[("Program", ObjectKey("ns", "random-yaml"))] = obj


PASSWORD: dict[str, Any] = {"type": "random:RandomPassword", "properties": {"length": 16}}


@reaches(Reason.SOURCE_NOT_READY)
def test_a_flux_source_not_there_yet_is_waited_for_then_run(h: Harness) -> None:
    """SourceNotReady (Reconciling, one Event) until the source is Ready with an artifact."""
    h.create(**FLUX)
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus() == {
        "Ready": ("False", "SourceNotReady"),
        "Reconciling": ("True", "SourceNotReady"),
    }
    assert 'GitRepository "infra" in namespace "ns" not found' in h.message()
    writes = len(h.writer.writes)
    h.reconcile()
    assert len(h.writer.writes) == writes, "waiting again must not write"
    git_repository(h, ready="False")
    h.reconcile()
    said = h.message()
    assert "is not Ready (yet); kubectl describe gitrepository infra -n ns says why" in said
    assert "boom" not in said, "Flux's own words change with every attempt of its"
    git_repository(h)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.source.fetches == [
        ("http://source-controller/gitrepository/ns/infra/a.tar.gz", "sha256:" + "ab" * 32)
    ]
    assert h.runner.calls[0][1].work_dir.name == "app"
    last = h.status["lastUpdate"]
    assert (last["lastSuccessfulCommit"], last["shortCommit"]) == (f"main@sha1:{SHA}", "2b08897")
    assert h.message() == "pulumi up succeeded (create 1) at revision 2b08897"
    assert h.events.reasons.count("SourceNotReady") == 1  # posted when the wait began


def test_a_new_artifact_revision_runs_again_and_the_same_one_does_not(h: Harness) -> None:
    """Only a new revision runs the Stack; a resync of the same artifact does not."""
    h.create(**FLUX)
    git_repository(h)
    h.runner.then(h.succeed())
    h.reconcile()
    h.reconcile()
    assert len(h.runner.calls) == 1
    git_repository(h, revision="main@sha1:" + "c" * 40)
    h.runner.then(h.succeed())
    h.reconcile()
    assert len(h.runner.calls) == 2


def test_a_flux_kind_the_cluster_does_not_serve_waits_saying_so(h: Harness) -> None:
    """No Flux installed: SourceNotReady naming the kind and what to install."""
    h.objects.unserved.add("GitRepository")
    h.create(**FLUX)
    h.reconcile()
    assert h.kstatus()["Reconciling"] == ("True", "SourceNotReady")
    assert "install Flux's source-controller" in h.message()


@reaches(Reason.ARTIFACT_DIGEST_MISMATCH)
def test_an_artifact_that_fails_its_digest_stalls_the_announced_run(h: Harness) -> None:
    """A digest mismatch is not transient: Stalled, the attempt recorded, no run."""
    h.create(**FLUX)
    git_repository(h)
    h.source.fetch_error = SourceError(
        "digest mismatch", reason=SourceFailure.ARTIFACT_DIGEST_MISMATCH, transient=False
    )
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "ArtifactDigestMismatch")
    assert "digest mismatch" in h.message()
    assert h.runner.calls == []
    h.reconcile()
    assert h.events.reasons.count("ArtifactDigestMismatch") == 1


@reaches(Reason.ARTIFACT_UNSAFE)
def test_an_unsafe_artifact_stalls_until_a_new_revision(h: Harness) -> None:
    """An archive with a link out: Stalled; a new artifact revision runs again."""
    h.create(**FLUX)
    git_repository(h)
    h.source.fetch_error = SourceError(
        "entry x links outside", reason=SourceFailure.ARTIFACT_UNSAFE, transient=False
    )
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "ArtifactUnsafe")
    h.source.fetch_error = None
    git_repository(h, revision="main@sha1:" + "d" * 40)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_an_artifact_server_that_does_not_answer_is_retried(h: Harness) -> None:
    """A transient fetch failure: a failed attempt retried after the backoff, not Stalled."""
    h.create(**FLUX)
    git_repository(h)
    h.source.fetch_error = SourceError(
        "connection refused", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True
    )
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus()["Ready"] == ("False", "SourceUnavailable")
    assert "Stalled" not in h.kstatus()
    assert h.reconcile() == Result(requeue_after=10)  # its own write's event: no new run
    h.source.fetch_error = None
    h.clock.step(10)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_a_refused_artifact_is_not_fetched_again_until_a_new_revision(h: Harness) -> None:
    """After ArtifactDigestMismatch no retry runs (nothing fetched) while the revision stays."""
    h.create(**FLUX)
    git_repository(h)
    h.source.fetch_error = SourceError(
        "digest mismatch", reason=SourceFailure.ARTIFACT_DIGEST_MISMATCH, transient=False
    )
    h.reconcile()
    h.clock.step(3600)
    h.reconcile()
    h.reconcile()
    assert h.events.reasons.count("UpdateStarted") == 1
