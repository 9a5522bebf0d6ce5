"""A new Stack never reads Current to kstatus before the operator has applied it.

kstatus skips its generation check when ``status.observedGeneration`` is absent, so a Stack
created without a status is Current at once (Flux, Helm ``--wait`` and ``kubectl wait``
would move on before anything ran). The CRD defaults the status to
``{observedGeneration: 0}`` and the operator's first write is the status, so from the
create response on every version reads InProgress until the run succeeds (or Failed, for a
Stack that cannot work). Its status and its finalizer are recorded in ``managedFields``
under the operator's own field manager, ``pulumi-stack-operator``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from testbed import kstatus
from testbed.kstatus import KStatus
from tests.e2e.conftest import Operator, Program, Stacks, find, is_ready
from tests.status.invariants import Observation

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]


def describe(observation: Observation) -> str:
    """One version in a failure message: event, resourceVersion, generation and status."""
    metadata: Mapping[str, Any] = observation.obj["metadata"]
    return (
        f"{observation.event} resourceVersion {metadata['resourceVersion']} generation "
        f"{metadata.get('generation')} finalizers {metadata.get('finalizers')}: "
        f"status {json.dumps(observation.obj.get('status'))}"
    )


def field_managers(obj: Mapping[str, Any]) -> dict[str, set[str]]:
    """Who ``managedFields`` say wrote ``obj``'s status, and who its finalizers."""
    entries = obj["metadata"].get("managedFields") or ()
    status = {e["manager"] for e in entries if e.get("subresource") == "status"}
    finalizers = {
        e["manager"]
        for e in entries
        if "f:finalizers" in (e.get("fieldsV1") or {}).get("f:metadata", {})
    }
    return {"status": status, "finalizers": finalizers}


def assert_observed_from_the_start(created: Mapping[str, Any], first: Observation) -> None:
    """The create response and the first version seen carry ``status.observedGeneration``."""
    status = created.get("status") or {}
    assert status.get("observedGeneration") in (0, created["metadata"]["generation"]), (
        f"the create response has status {status!r}: without status.observedGeneration "
        f"kstatus reads a new Stack as {kstatus.read_status(created).status}"
    )
    assert first.resource_version == created["metadata"]["resourceVersion"], describe(first)
    assert first.event == "ADDED", describe(first)
    observed = (first.obj.get("status") or {}).get("observedGeneration")
    assert observed in (0, first.obj["metadata"]["generation"]), (
        f"the first version has no status.observedGeneration: {describe(first)}"
    )


def test_a_new_stack_is_in_progress_from_its_first_version_until_it_is_ready(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """From the create response on, no version is Current before the run succeeded."""
    del operator
    assert stacks.watcher is not None
    created = stacks.create(stacks.manifest("web", program))
    ready = stacks.wait_ready("web")
    ours = {"pulumi-stack-operator"}
    assert field_managers(ready) == {"status": ours, "finalizers": ours}, ready["metadata"]
    stacks.watcher.wait_for("web", ready["metadata"]["resourceVersion"])
    history = stacks.watcher.observations("web")
    assert_observed_from_the_start(created, history[0])
    done = next(i for i, o in enumerate(history) if is_ready(o.obj))
    early = [o for o in history[:done] if kstatus.read_status(o.obj).status is KStatus.CURRENT]
    assert not early, "Current to kstatus before the run succeeded:\n" + "\n".join(
        describe(o) for o in early
    )


def test_a_stack_that_cannot_work_is_never_current(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """An invalid spec goes from InProgress straight to Failed; no version reads Current."""
    del operator
    assert stacks.watcher is not None
    body = stacks.manifest(
        "bad", program, envRefs={"HOME_DIR": {"type": "Env", "env": {"name": "HOME"}}}
    )
    created = stacks.create(body)
    obj = stacks.wait_reason("bad", "Stalled", "InvalidSpec", timeout=60)
    assert kstatus.read_status(obj).status is KStatus.FAILED, find(obj, "Stalled")
    stacks.watcher.wait_for("bad", obj["metadata"]["resourceVersion"])
    history = stacks.watcher.observations("bad")
    assert_observed_from_the_start(created, history[0])
    current = [o for o in history if kstatus.read_status(o.obj).status is KStatus.CURRENT]
    assert not current, "a Stack that cannot work read Current:\n" + "\n".join(
        describe(o) for o in current
    )
