"""Which revision of a Flux source or a Program a Stack would run, from the informers' caches.

Role: for a Stack with ``fluxSource`` or ``programRef``, read the object it names (from
``SourceObjects``, informer caches: no API call) and say what a run would deploy
(``Revision``), or why there is nothing to deploy yet (``SourceNotReadyError``: wait) or
ever (``ProgramInvalidError``: the Program must change). Git sources are resolved elsewhere
(``workspace.source``).

Guarantees:

- A Flux source counts only when it is Ready with an artifact (``url``, ``revision``,
  ``digest``); its ``revision`` (``main@sha1:<sha>``) is what the Stack records as its
  commit, as the Pulumi Kubernetes Operator does. The digest travels with it, so the run
  verifies exactly the bytes the source-controller announced.
- A Program's revision is ``sha256:<hex>`` of its rendered ``Pulumi.yaml``: a change to the
  Program that changes what would run, and only such a change, runs its Stacks again.
- Messages name the object (kind, name, namespace) and what to do, never another
  controller's passing words (they would rewrite the Stack's status with every retry of
  that controller); nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from controller.cache import ObjectKey
from reconcile.spec import SpecError
from reconcile.spec.model import FluxSourceRef
from reconcile.spec.program import parse_program, program_revision, render_project

FLUX_GROUP: Final = "source.toolkit.fluxcd.io"
PROGRAM_KIND: Final = "Program"


@dataclass(frozen=True, slots=True)
class Artifact:
    """A Flux source's artifact: where to download it, what it is, and its digest."""

    url: str
    revision: str
    digest: str


@dataclass(frozen=True, slots=True)
class Revision:
    """What a run of the Stack would deploy.

    ``commit`` is what the status records (a git SHA, a Flux artifact revision, a Program's
    ``sha256:``); ``artifact`` is set for a Flux source, ``project`` (the rendered
    ``Pulumi.yaml``) for a Program.
    """

    commit: str
    artifact: Artifact | None = None
    project: str | None = None


class SourceNotReadyError(Exception):
    """The source object is missing, not Ready, without an artifact, or its kind not served.

    Not a failure: the Stack waits (``SourceNotReady``) and runs once the object's informer
    brings the change.
    """


class ProgramInvalidError(ValueError):
    """The Program cannot be rendered: only a change to it helps (``InvalidSpec``)."""


class SourceObjects(Protocol):
    """The informer caches of the source kinds (Programs and Flux sources)."""

    def served(self, kind: str) -> bool:
        """Whether the cluster serves ``kind`` (and its informer runs)."""
        ...

    def get(self, kind: str, key: ObjectKey) -> Mapping[str, Any] | None:
        """The cached object of ``kind`` at ``key``, or None."""
        ...


def flux_revision(objects: SourceObjects, namespace: str, ref: FluxSourceRef) -> Revision:
    """The artifact of the Flux source ``ref`` names in ``namespace``.

    Raises:
        SourceNotReadyError: the kind is not served, the object is missing or not Ready,
            or it has no complete artifact yet.
    """
    shown = f'{ref.kind} "{ref.name}" in namespace "{namespace}"'
    if not objects.served(ref.kind):
        msg = (
            f"the cluster serves no {ref.kind} ({FLUX_GROUP}): install Flux's source-controller"
            f" (and its CRDs), or point spec.fluxSource at a kind it serves"
        )
        raise SourceNotReadyError(msg)
    obj = objects.get(ref.kind, ObjectKey(namespace, ref.name))
    if obj is None:
        msg = f"{shown} not found: create it, or fix spec.fluxSource.sourceRef"
        raise SourceNotReadyError(msg)
    status = obj.get("status") or {}
    if _condition(status, "Ready").get("status") != "True":
        raise SourceNotReadyError(_not_ready(shown, ref, namespace, status))
    artifact = status.get("artifact") or {}
    fields = [artifact.get(name) for name in ("url", "revision", "digest")]
    if not all(isinstance(value, str) and value for value in fields):
        msg = f"{shown} has no artifact (url, revision and digest) yet"
        raise SourceNotReadyError(msg)
    url, revision, digest = (str(value) for value in fields)
    return Revision(revision, artifact=Artifact(url, revision, digest))


def _not_ready(shown: str, ref: FluxSourceRef, namespace: str, status: Mapping[str, Any]) -> str:
    """Why a Flux source is not Ready, in words that change only when its state does.

    The source-controller rewrites its own Ready message on every attempt ("building
    artifact", then the failure); copying it would rewrite the Stack's status with each
    retry. This names the object and where to read its own words, plus the reason of a
    Stalled condition, which Flux sets only for a failure that lasts until a change.
    """
    look = f"kubectl describe {ref.kind.lower()} {ref.name} -n {namespace} says why"
    stalled = _condition(status, "Stalled")
    if stalled.get("status") == "True" and stalled.get("reason"):
        return f"{shown} is not Ready: Flux stalled it ({stalled['reason']}); {look}"
    return f"{shown} is not Ready (yet); {look}"


def program_source(objects: SourceObjects, namespace: str, name: str) -> Revision:
    """The rendered project of Program ``name`` in ``namespace`` and its revision.

    Raises:
        SourceNotReadyError: there is no such Program (or its kind is not served).
        ProgramInvalidError: the Program is invalid (the message names the field).
    """
    shown = f'Program "{name}"'
    obj = objects.get(PROGRAM_KIND, ObjectKey(namespace, name))
    if obj is None:
        msg = f'{shown} not found in namespace "{namespace}": create it, or fix spec.programRef'
        raise SourceNotReadyError(msg)
    try:
        project = render_project(name, parse_program(obj.get("program")))
    except SpecError as err:
        msg = f"{shown}: {err}"
        raise ProgramInvalidError(msg) from None
    except ValueError as err:
        msg = f"{shown}: {err}: rename the Program"
        raise ProgramInvalidError(msg) from None
    return Revision(program_revision(project), project=project)


def short_revision(revision: str) -> str:
    """A revision for display: the first 7 hex digits of its commit or digest.

    ``main@sha1:2b08897…`` and ``sha256:9f86d08…`` show their hex part; a plain SHA its
    first 7 characters.
    """
    return revision.rpartition(":")[2][:7]


def revision_text(revision: str) -> str:
    """How messages name a revision: ``commit 2b08897`` (git) or ``revision 2b08897``."""
    if ":" in revision:
        return f"revision {short_revision(revision)}"
    return f"commit {revision[:7]}"


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == type_:
            return condition
    return {}
