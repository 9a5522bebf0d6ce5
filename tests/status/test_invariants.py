"""The status witness (``tests.status.invariants.StackWatcher``): records, compares, reports.

Unit tests feed it versions by hand; one integration test watches a real apiserver across
watch renewals.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from status import conditions as c
from status.conditions import Reason
from testbed import kstatus
from tests.status.invariants import StackWatcher, check
from tests.status.witness_fixtures import (
    CRD_DEFAULT,
    DESTROYING,
    DONE,
    FLUX_REQUEST,
    GROUP,
    IN_PROGRESS,
    NAMESPACE,
    PLURAL,
    PULUMI_REQUEST,
    SPEC2,
    START,
    T0,
    T1,
    T2,
    VERSION,
    Status,
    concluded,
    condition,
    edit,
    running,
    stack,
    stalled,
)

# -- the watcher, fed by hand ----------------------------------------------------------------


@pytest.fixture
def watcher() -> Any:
    """A StackWatcher that is never started: tests feed it versions with ``observe``."""
    with client.ApiClient() as api:
        yield StackWatcher(api, NAMESPACE)


# -- what the operator does not control is not blamed on it -----------------------------------


def test_the_crds_default_status_is_not_a_write(watcher: StackWatcher) -> None:
    """A new Stack carries the CRD's ``{observedGeneration: 0}``: InProgress, not a bad write.

    The finalizer patch keeps it; the operator's first real write is judged as the first.
    """
    created = stack(CRD_DEFAULT)
    assert kstatus.read_status(created).status is IN_PROGRESS
    finalized = stack(CRD_DEFAULT, rv="2")
    watcher.observe("ADDED", created)
    watcher.observe("MODIFIED", finalized)
    watcher.observe("MODIFIED", stack(START, rv="3"))
    assert watcher.violations() == []
    assert check(created) == []


def test_a_user_edit_of_a_stalled_stack_is_not_blamed_on_the_operator(
    watcher: StackWatcher,
) -> None:
    """The user's new generation shows the old Stalled status: kstatus InProgress, no lie.

    That version (generation 2, observedGeneration 1, Stalled=True) is the apiserver's
    answer to the user's edit; the operator's next write is judged as usual.
    """
    stall = stalled(Reason.INVALID_SPEC, "spec.stack is empty")
    edited = stack(stall, rv="2", generation=2, spec=SPEC2)
    assert kstatus.read_status(edited).status is IN_PROGRESS
    assert check(edited, stack(stall)) == []
    rerun = running(c.progressing(stall, 2, "Running pulumi up (generation 2)", T2), 2)
    versions = [stack(stall), edited, stack(rerun, rv="3", generation=2, spec=SPEC2)]
    for event, obj in zip(("ADDED", "MODIFIED", "MODIFIED"), versions, strict=True):
        watcher.observe(event, obj)
    assert watcher.violations() == []


def test_the_watcher_records_versions_and_compares_each_with_the_one_before(
    watcher: StackWatcher,
) -> None:
    """Versions are kept in order; a transition rule sees the version before."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    moved = edit(START, "Ready", lastTransitionTime="2026-01-01T12:09:00Z")
    watcher.observe("MODIFIED", stack(moved, rv="3"))
    assert [o.resource_version for o in watcher.observations("web")] == ["1", "2", "3"]
    assert [(v.resource_version, v.rule) for v in watcher.violations()] == [("3", 10)]
    assert watcher.names() == ["web"]


def test_the_watcher_does_not_compare_across_a_gap(watcher: StackWatcher) -> None:
    """After a relist (versions may be missing) the next version is judged on its own."""
    watcher.observe("ADDED", stack(START))
    watcher.observe("LISTED", stack(DONE, rv="7", generation=3, spec={"stack": "x"}), gap=True)
    assert watcher.violations() == []


def test_assert_clean_lists_object_version_rule_and_detail(watcher: StackWatcher) -> None:
    """The failure names every violation: object, resourceVersion, rule id, detail."""
    watcher.observe("ADDED", stack({**START, "observedGeneration": 3}, rv="5"))
    watcher.observe("MODIFIED", stack(DONE, rv="6"))
    with pytest.raises(AssertionError) as failure:
        watcher.assert_clean()
    text = str(failure.value)
    assert "1 status invariant violation(s)" in text
    assert (
        "team/web (resourceVersion 5) status contract rule 2: status.observedGeneration 3 is ahead"
        in text
    )


def test_final_check_maps_deleting_stacks_and_skips_deleted_ones(watcher: StackWatcher) -> None:
    """A deleted Stack is NotFound (nothing to judge); a deleting one must read Terminating."""
    watcher.observe("ADDED", stack(START))
    watcher.observe("DELETED", stack(START, rv="2"))
    assert watcher.final_check() == []
    deleting = stack(c.deleting(DONE, 1, Reason.DESTROYING, DESTROYING, T2), deleting=True)
    watcher.observe("ADDED", deleting | {"metadata": {**deleting["metadata"], "uid": "u2"}})
    assert watcher.final_check() == []
    watcher.assert_clean()


def test_final_check_wants_the_latest_request_handled(watcher: StackWatcher) -> None:
    """A Flux request added after a handled Pulumi one must be handled too.

    Status contract rule 17 across versions. One version alone cannot tell: it records r1,
    and r1 is one of the two annotations.
    """
    handled = {**DONE, "observedReconcileRequest": "r1", "lastHandledReconcileAt": "r1"}
    watcher.observe("ADDED", stack(handled, annotations={PULUMI_REQUEST: "r1"}))
    both = {PULUMI_REQUEST: "r1", FLUX_REQUEST: "2026-01-01T12:30:00.123Z"}
    last = stack(handled, rv="2", annotations=both)
    watcher.observe("MODIFIED", last)
    assert check(last, final=True) == []
    found = watcher.final_check()
    assert [(v.rule, v.resource_version) for v in found] == [(17, "2")]
    assert FLUX_REQUEST in found[0].detail


# -- the watcher against a real apiserver ----------------------------------------------------


def rv_of(obj: object) -> str:
    """The resourceVersion of an object the API returned."""
    assert isinstance(obj, Mapping)
    return str(obj["metadata"]["resourceVersion"])


@pytest.mark.integration
def test_the_watcher_sees_every_version_and_reports_exactly_the_bad_one(
    api_client: client.ApiClient, stack_crd: Path, namespace: str
) -> None:
    """Statuses patched through /status are all recorded across watch renewals; one is bad."""
    del stack_crd
    api = client.CustomObjectsApi(api_client)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Stack", "metadata": {"name": "web"},
            "spec": {"stack": "dev"}}  # fmt: skip
    start = running(c.progressing({}, 1, "Running pulumi up at commit 0123abc", T0))
    good = concluded(c.succeeded(start, 1, "pulumi up succeeded (create 1)", T1))
    reconciling_false = condition("Reconciling", "False", "Done", "left behind") | {
        "lastTransitionTime": "2026-01-01T12:01:00Z"
    }
    bad = {**good, "conditions": [reconciling_false, *good["conditions"]]}
    patches: list[Callable[[], object]] = [
        lambda: api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body),
        *(
            lambda status=status: api.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, "web", {"status": status}
            )
            for status in (start, {**bad, "currentUpdate": None}, good)
        ),
    ]
    with StackWatcher(api_client, namespace, timeout_seconds=1) as watcher:
        written = []
        for patch in patches:
            written.append(rv_of(patch()))
            watcher.wait_for("web", written[-1])
            # Outlive the 1 s watch that saw it: the next version arrives on a renewed one.
            watcher.wait_for_restarts(watcher.restarts + 1)
    assert [o.resource_version for o in watcher.observations("web")] == written
    assert [o.event for o in watcher.observations("web")] == ["ADDED", *["MODIFIED"] * 3]
    assert watcher.restarts >= 3
    found = watcher.violations()
    assert [(v.resource_version, v.rule) for v in found] == [(written[2], 7)], found
    assert watcher.final_check() == []
    with pytest.raises(
        AssertionError, match=rf"resourceVersion {written[2]}\) status contract rule 7: Reconciling"
    ):
        watcher.assert_clean()


def flips_of(*statuses: Status) -> collections.Counter[tuple[str, str, str]]:
    """(type, status, reason) of every condition that appears in or changes across ``statuses``."""
    found: collections.Counter[tuple[str, str, str]] = collections.Counter()
    before: dict[str, str] = {}
    for status in statuses:
        for x in status.get("conditions", []):
            if before.get(x["type"]) != x["status"]:
                found[(x["type"], x["status"], x["reason"])] += 1
        before = {x["type"]: x["status"] for x in status.get("conditions", [])}
    return found


def test_transitions_count_appearances_and_status_flips_not_message_changes(
    watcher: StackWatcher,
) -> None:
    """The watcher counts what the operator's transition counter must have counted."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    watcher.observe("MODIFIED", stack(DONE, rv="3"))
    watcher.observe("MODIFIED", stack(edit(DONE, "Ready", message="reworded"), rv="4"))
    expected = flips_of(START, DONE)
    assert watcher.transitions() == expected
    assert sum(expected.values()) >= 3  # Ready twice, Reconciling at least once
    assert ("Ready", "True", str(Reason.SUCCEEDED)) in expected


def test_transitions_skip_versions_seen_before_since_and_after_a_gap(
    watcher: StackWatcher,
) -> None:
    """Only versions recorded from ``since`` on count, and never one right after a gap."""
    watcher.observe("ADDED", stack())
    watcher.observe("MODIFIED", stack(START, rv="2"))
    since = time.monotonic()
    watcher.observe("LISTED", stack(DONE, rv="7"), gap=True)
    assert watcher.transitions() == flips_of(START)
    assert watcher.transitions(since) == collections.Counter()
