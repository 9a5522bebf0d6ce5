"""Bad inputs fail at once, say which field to fix, leak nothing, and cost nothing meanwhile.

Real operator, control plane, Pulumi CLI and git servers, as in the lifecycle tests.

- A missing Secret stalls the Stack once: one status write, one Warning, no run announced,
  then quiet while the operator keeps re-evaluating it; creating the Secret recovers it.
- A repository URL git can never use stalls naming ``spec.projectRepo``; one that refuses
  connections for now is retried, and the status says so.
- A token in a URL's user name is refused before git runs, pointing to ``spec.gitAuth``.
"""

from __future__ import annotations

import collections
import json
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.git_http import Account, GitHttpServer
from testbed.process import free_port
from testbed.waits import wait_for
from tests.e2e.agreement import transition_counts
from tests.e2e.conftest import Operator, Program, Sentinels, Stacks, find
from tests.e2e.waits import reconciles, status_writes, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]

QUIET_WINDOW = 8.0  # seconds watched after the first Stalled version (4 resyncs)
MIN_REEVALUATIONS = 3  # reconciles in the window: the operator did look again (E2E resync: 2 s)
HANDFUL = 3  # status writes allowed in the window (a stall that stays needs none)
SOURCE_STALLS = ("SourceUnavailable", "InvalidSpec")


# -- helpers -----------------------------------------------------------------------------------


def condition_reason(obj: Mapping[str, Any], type_: str) -> str | None:
    """The reason of condition ``type_`` when it is True, else None."""
    found = find(obj, type_)
    return str(found["reason"]) if found is not None and found["status"] == "True" else None


def current(obj: Mapping[str, Any]) -> bool:
    """Whether the status is about the Stack's current generation."""
    observed = (obj.get("status") or {}).get("observedGeneration")
    return bool(observed == obj["metadata"]["generation"])


def wait_observed(
    stacks: Stacks,
    name: str,
    check: Callable[[Mapping[str, Any]], bool],
    what: str,
    timeout: float = 60,
) -> int:
    """Poll the watcher until a recorded version of ``name`` passes ``check``; its index."""
    watcher = stacks.watcher
    assert watcher is not None

    def first() -> int | None:
        history = watcher.observations(name)
        return next((i + 1 for i, o in enumerate(history) if check(o.obj)), None)

    def last() -> str:
        history = watcher.observations(name)
        return json.dumps(history[-1].obj.get("status")) if history else "no version"

    found = wait_for(first, f"a version of {name} showing {what}", timeout, 0.1, detail=last)
    return found - 1  # found is 1-based so that index 0 counts as found


def per_type(counts: Mapping[tuple[str, str, str], int]) -> collections.Counter[str]:
    """Transition counts summed per condition type."""
    totals: collections.Counter[str] = collections.Counter()
    for (type_, _status, _reason), count in counts.items():
        totals[type_] += count
    return totals


def create_or_refused(stacks: Stacks, body: dict[str, Any]) -> str | None:
    """Create the Stack; the apiserver's message if its schema refused it (422), else None."""
    try:
        stacks.create(body)
    except client.ApiException as err:
        if err.status != 422:
            raise
        return str(err.body)
    return None


# -- a missing Secret ----------------------------------------------------------------------------


def test_a_missing_secret_stalls_once_stays_quiet_then_recovers(
    stacks: Stacks, program: Program, operator: Operator, sentinels: Sentinels
) -> None:
    """Stalled SecretNotFound: one write, one Warning, no run, quiet; the Secret then fixes it.

    The quiet window is measured from the first Stalled version and closed by a marker (an
    unrelated annotation) that the watcher must see, after the operator has re-evaluated
    the Stack several times: every version before the marker is counted.
    """
    assert stacks.watcher is not None
    ref = {"token": {"type": "Secret", "secret": {"name": "late", "key": "token"}}}
    stacks.create(stacks.manifest("waits", program, secretsRef=ref))
    first = wait_observed(
        stacks, "waits", lambda o: condition_reason(o, "Stalled") == "SecretNotFound",
        "Stalled=True SecretNotFound",
    )  # fmt: skip
    stalled_at = stacks.watcher.observations("waits")[first].seen_at
    flips, looks = transition_counts(operator.metrics()), reconciles(operator.metrics())
    window_start = time.monotonic()
    wait_until(
        lambda: (
            time.monotonic() - stalled_at >= QUIET_WINDOW
            and reconciles(operator.metrics()) - looks >= MIN_REEVALUATIONS
        ),
        f"{QUIET_WINDOW:g} s and {MIN_REEVALUATIONS} reconciles after the first Stalled version",
        timeout=QUIET_WINDOW + 30,
    )
    marker = stacks.patch(
        "waits", {"metadata": {"annotations": {"test.example.com/marker": secrets.token_hex(4)}}}
    )
    stacks.watcher.wait_for("waits", marker["metadata"]["resourceVersion"])
    history = stacks.watcher.observations("waits")
    end = [o.resource_version for o in history].index(marker["metadata"]["resourceVersion"])
    window = history[first + 1 : end]
    writes = status_writes(window, history[first])
    looked = reconciles(operator.metrics()) - looks
    print(  # noqa: T201 - the measurement, for the record
        f"quiet window: {time.monotonic() - window_start:.1f} s, {looked:g} reconciles, "
        f"{len(window)} versions, {len(writes)} status writes"
    )
    assert len(writes) <= HANDFUL, (
        f"{len(writes)} status writes in the {QUIET_WINDOW:g} s after the stall "
        f"({len(window)} versions; at most {HANDFUL} allowed): {writes[:20]}"
    )
    moved = per_type(transition_counts(operator.metrics()) - flips)
    assert all(count <= 1 for count in moved.values()), (
        f"the transition counter moved more than once per type while stalled: {dict(moved)}"
    )
    events = stacks.events("waits")
    missing = [(e.type, e.count) for e in events if e.reason == "SecretNotFound"]
    assert missing == [("Warning", 1)], f"SecretNotFound Events (type, count): {missing}"
    started = [e.message for e in events if e.reason == "UpdateStarted"]
    assert not started, f"runs were announced while the Secret was missing: {started[:5]}"

    stacks.secret("late", {"token": sentinels.secret_config})
    stacks.wait_ready("waits", timeout=120)


# -- repository URLs ---------------------------------------------------------------------------


def test_a_repository_url_git_refuses_stalls_naming_the_field(
    stacks: Stacks, program: Program, operator: Operator, tmp_path: Path
) -> None:
    """An ssh URL whose host is an option (git: "strange hostname ... blocked") stalls at once."""
    del operator
    url = f"ssh://-oProxyCommand=touch${{IFS}}{tmp_path}/pwned/repo"
    refused = create_or_refused(stacks, stacks.manifest("strange", program, projectRepo=url))
    if refused is not None:  # the CRD's schema may refuse it first: as good, if it says where
        assert "projectRepo" in refused, refused
        return
    obj = stacks.wait(
        "strange",
        lambda o: current(o) and condition_reason(o, "Stalled") in SOURCE_STALLS,
        f"Stalled=True with reason {' or '.join(SOURCE_STALLS)} (git refuses the URL for "
        "good: retrying it as transient writes no status at all)",
        timeout=60,
    )
    stalled = find(obj, "Stalled")
    assert stalled is not None
    assert "spec.projectRepo" in stalled["message"], stalled
    assert find(obj, "Reconciling") is None, obj["status"]
    events = stacks.wait_events("strange", stalled["reason"])
    assert {e.type for e in events if e.reason == stalled["reason"]} == {"Warning"}
    assert not (tmp_path / "pwned").exists()


def test_a_repository_refusing_connections_is_retried_and_says_so(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Connection refused is transient: Ready=False SourceUnavailable, Reconciling=True."""
    del operator
    url = f"http://127.0.0.1:{free_port()}/nothing-listens.git"
    stacks.create(stacks.manifest("refused", program, projectRepo=url))

    def retrying(obj: Mapping[str, Any]) -> bool:
        ready = find(obj, "Ready")
        return (
            current(obj)
            and ready is not None
            and (ready["status"], ready["reason"]) == ("False", "SourceUnavailable")
            and condition_reason(obj, "Reconciling") is not None
        )

    obj = stacks.wait(
        "refused",
        retrying,
        "Ready=False SourceUnavailable with Reconciling=True (a transient source failure "
        "must show in the status, not only in the log)",
        timeout=60,
    )
    assert find(obj, "Stalled") is None, obj["status"]
    assert condition_reason(obj, "Reconciling") in ("ProgressingWithRetry", "SourceUnavailable")
    ready = find(obj, "Ready")
    assert ready is not None
    says_where = "127.0.0.1" in ready["message"] or "spec.projectRepo" in ready["message"]
    assert says_where, f"Ready's message does not say which source failed: {ready}"


def test_a_token_in_the_url_user_name_is_refused_before_git_runs(
    stacks: Stacks, program: Program, operator: Operator, sentinels: Sentinels, tmp_path: Path
) -> None:
    """``http://<token>@host/repo.git``: Stalled InvalidSpec pointing to spec.gitAuth.

    The git server never hears of it, and the token shows nowhere (the operator fixture
    scans status, Events, log and metrics for ``sentinels.url_user``).
    """
    del operator
    server = GitHttpServer(tmp_path / "git-http", [Account.random()])
    server.start()
    try:
        url = f"http://{sentinels.url_user}@127.0.0.1:{server.port}/app.git"
        refused = create_or_refused(stacks, stacks.manifest("token", program, projectRepo=url))
        if refused is not None:
            assert "projectRepo" in refused, "the apiserver refused the URL without saying where"
            assert sentinels.url_user not in refused, "the apiserver's refusal shows the token"
            return
        obj = stacks.wait(
            "token",
            lambda o: current(o) and condition_reason(o, "Stalled") == "InvalidSpec",
            "Stalled=True InvalidSpec (credentials belong in spec.gitAuth, not in the URL)",
            timeout=60,
        )
        message = find(obj, "Stalled")["message"]  # type: ignore[index]
        assert sentinels.url_user not in message, "the Stalled message shows the token"
        assert "gitAuth" in message, message
        assert "projectRepo" in message, message
        stacks.wait_events("token", "InvalidSpec")
        assert server.requests == [], f"git ran with the token: {server.requests}"
    finally:
        server.stop()
