"""The pods bench's pure parts: a run pod's timeline and legs, pods at once, its row."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from bench.pods.timeline import (
    HANDED,
    SPLIT,
    WARM_SPLIT,
    Occupancy,
    agent_span,
    around,
    container_running,
    means,
    occupancy,
    placement,
    pod_times,
    pods_at,
    run_timed,
    split,
    warm_split,
)
from bench.readme import _pods, render
from bench.stats import TIMES, Summary
from bench.watch import Seen
from workspace.runner import ErrorKind, failed_outcome, outcome_line


def run_pod(uid: str = "u1", *, generation: int = 3, **status: Any) -> dict[str, Any]:
    """A run pod of Stack ``app`` as the API serves it, with ``status``."""
    annotations = {"pulumi-stack-operator.dev/generation": str(generation)}
    metadata = {"name": "app-pulumi", "namespace": "ns", "uid": uid, "annotations": annotations}
    return {"metadata": {**metadata, "creationTimestamp": "2026-01-01T10:00:00Z"}, **status}


def finished_pod() -> dict[str, Any]:
    """A run pod that was scheduled at :01, checked out :03 → :05, runs since :06."""
    at = "2026-01-01T10:00:0{}Z".format
    checkout = {"terminated": {"startedAt": at(3), "finishedAt": at(5)}}
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": at(1)}
    status = {
        "conditions": [scheduled],
        "initContainerStatuses": [{"name": "checkout", "state": checkout}],
        "containerStatuses": [{"name": "pulumi", "state": {"running": {"startedAt": at(6)}}}],
    }
    return run_pod(status=status)


def test_a_run_pods_object_splits_into_legs_that_add_up_to_the_run() -> None:
    """Schedule and start from the pod's times, the agent's three legs, the rest other."""
    inside = {"in_runner_checkout_s": 1.5, "in_runner_install_s": 0.25, "in_runner_cli_s": 2.0}

    legs = split(pod_times(finished_pod()), inside, e2e=10.0)

    assert {leg: legs[leg] for leg in SPLIT} == {
        "schedule": 1.0,
        "start": 2.0,
        "checkout": 1.5,
        "install": 0.25,
        "cli": 2.0,
        "other": 3.25,
    }
    assert sum(legs[leg] for leg in SPLIT) == legs["e2e"] == 10.0
    assert (legs["init"], legs["handoff"]) == (2.0, 1.0)


def test_a_pod_whose_run_container_checks_out_starts_when_that_container_runs() -> None:
    """No checkout container: start runs to the run container's start; no init, no handoff."""
    pod = finished_pod()
    del pod["status"]["initContainerStatuses"]
    inside = {"in_runner_checkout_s": 0.5, "in_runner_cli_s": 2.0}

    legs = split(pod_times(pod), inside, e2e=9.0)

    assert (legs["schedule"], legs["start"], legs["other"]) == (1.0, 5.0, 0.5)
    assert (legs["init"], legs["handoff"]) == (0.0, 0.0)
    assert sum(legs[leg] for leg in SPLIT) == legs["e2e"] == 9.0


def test_legs_are_averaged_so_whole_seconds_even_out_and_still_add_up() -> None:
    """A 0.5 s leg read as 0 s and 1 s averages to 0.5 s; the means sum to the mean run."""
    runs = [
        {"schedule": 0.0, "cli": 2.0, "other": 1.0, "e2e": 3.0},
        {"schedule": 1.0, "cli": 2.5, "other": 0.5, "e2e": 4.0},
    ]

    found = means(runs)

    assert found == {"schedule": 0.5, "cli": 2.25, "other": 0.75, "e2e": 3.5}
    assert found["schedule"] + found["cli"] + found["other"] == found["e2e"]
    assert means([]) == {}


def test_a_phase_the_agent_did_not_report_is_zero_and_a_missing_time_is_named() -> None:
    """No ``install`` reported: 0 s; a pod never scheduled cannot be split."""
    legs = split(pod_times(finished_pod()), {"in_runner_cli_s": 1.0}, e2e=6.0)
    assert (legs["checkout"], legs["install"], legs["other"]) == (0.0, 0.0, 2.0)
    with pytest.raises(ValueError, match="no scheduled time"):
        split(pod_times(run_pod()), {}, e2e=1.0)


def test_the_agents_log_pins_what_came_before_it_and_after_its_outcome() -> None:
    """First line and outcome line from the kubelet's timestamps; the rest adds up."""
    now = datetime.datetime.now(datetime.UTC)
    outcome = outcome_line(failed_outcome("up", ErrorKind.NONE, "", now, now))
    log = "\n".join(
        [
            '2026-01-01T10:00:02.500000000Z {"event": "Starting pulumi operation"}',
            '2026-01-01T10:00:03.000000000Z @pulumi-stack-operator {"progress":{}}',
            f"2026-01-01T10:00:05.250000000Z {outcome}",
            "2026-01-01T10:00:05.300000000Z a last line",
        ]
    )
    span = agent_span(log)
    sent = datetime.datetime(2026, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)

    assert around(sent, span, ready=6.5) == {
        "before_agent": 2.5,
        "agent": 2.75,
        "after_agent": 1.25,
    }
    with pytest.raises(ValueError, match="no timestamped outcome"):
        agent_span(log.replace("@pulumi-stack-operator", "text"))


def seen(at: float, type_: str, uid: str, *, deleting: bool = False) -> Seen:
    """A version of run pod ``uid`` arrived at ``at``."""
    pod = run_pod(uid)
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T10:00:09Z"
    pod["metadata"]["name"] = f"pod-{uid}"
    return Seen(at, type_, pod)


def test_pods_at_once_count_live_ones_apart_from_those_being_deleted() -> None:
    """Two run, one is deleted while a third starts: 2 live at most, 3 existing."""
    versions = [
        seen(1.0, "ADDED", "a"),
        seen(2.0, "ADDED", "b"),
        seen(3.0, "MODIFIED", "a", deleting=True),
        seen(4.0, "ADDED", "c"),
        seen(5.0, "DELETED", "a", deleting=True),
        seen(6.0, "MODIFIED", "b", deleting=True),
        seen(7.0, "MODIFIED", "c", deleting=True),
        seen(9.0, "ADDED", "d"),
    ]

    found = occupancy(versions, 0.5, 8.0)

    assert (found.live, found.existing) == (2, 3)
    assert pods_at(versions, 7.5) == {"all": ["ns/pod-b", "ns/pod-c"], "live": []}
    assert occupancy(versions, 7.5, 8.5) == Occupancy(live=0, existing=2)  # b, c being deleted


def test_placement_counts_each_pod_bound_in_the_window_once_per_node() -> None:
    """Versions before binding, repeats and pods outside the window do not count."""

    def on(at: float, name: str, node: str | None) -> Seen:
        version = seen(at, "MODIFIED", name)
        return Seen(at, version.type, {**version.obj, "spec": {"nodeName": node}})

    versions = [
        on(1.0, "a", None),  # created, not yet bound
        on(1.5, "a", "n1"),
        on(2.0, "a", "n1"),
        on(2.5, "b", "n2"),
        on(3.0, "c", "n1"),
        on(9.0, "d", "n2"),  # after the window
    ]

    assert placement(versions, 0.5, 8.0, ["n1", "n2", "n3"]) == {"n1": 2, "n2": 1, "n3": 0}


def test_the_run_container_started_matches_only_that_runs_pod() -> None:
    """The same Stack's pod of another generation, or one still checking out, does not."""
    started = Seen(1.0, "MODIFIED", finished_pod())
    checking_out = Seen(1.0, "MODIFIED", run_pod())
    older = Seen(1.0, "MODIFIED", {**finished_pod(), "metadata": run_pod(generation=2)["metadata"]})

    match = container_running("ns", "app", 3)

    assert match(started)
    assert not match(checking_out)
    assert not match(older)
    assert not container_running("other", "app", 3)(started)


def test_the_stacks_run_timed_lines_are_read_in_order() -> None:
    """Only that Stack's ``Run timed`` lines, every ``_s`` field of each."""
    lines = [
        {"event": "Run timed", "name": "app", "announce_s": 0.1, "in_runner_cli_s": 2.0,
         "operation": "up"},
        {"event": "Run timed", "name": "other", "announce_s": 9},
        {"event": "pulumi command", "name": "app", "seconds": 1},
        {"event": "Run timed", "name": "app", "announce_s": 0.2},
        {"event": "Handed the run to the warm run pod", "name": "app", "take_s": 0.1},
    ]  # fmt: skip
    log = "\n".join([*map(json.dumps, lines), "not json"])

    assert run_timed(log, "app") == [
        {"announce_s": 0.1, "in_runner_cli_s": 2.0},
        {"announce_s": 0.2},
    ]
    assert run_timed(log, "app", HANDED) == [{"take_s": 0.1}]


LINE = (
    "bench=pods workers=2 runs=5 cost_pod_e2e_s=9.1 cost_local_e2e_s=2.6 cost_cli_up_s=2.1 "
    "cost_pod_ratio=4.333 cost_local_ratio=1.238 split_e2e_s=9 split_schedule_s=0 "
    "split_start_s=1 split_checkout_s=1.2 split_install_s=0.3 split_cli_s=2.5 split_other_s=4 "
    "split_before_agent_s=2.2 split_agent_s=3.1 split_after_agent_s=1.1 "
    "stacks=100 namespaces=10 nodes=2 samples=20 spec_to_running_p50_s=4.5 "
    "spec_to_running_p99_s=6.2 pods_per_min=11 max_concurrent_pods=2 max_existing_pods=3 "
    "idle_pods=0 api_per_run=14 api_get_per_run=6 cpu_per_run_s=0.12 node_cpu_per_run_s=3.4 "
    "node_pods=48+52 nodes_used=2"
)


def test_the_row_tells_cost_split_and_fleet_and_judges_the_pods_at_once() -> None:
    """The ratios, the legs, the fleet's figures; ≤ workers, none idle, both nodes: met."""
    summary = Summary.parse(LINE)
    assert summary is not None

    name, what, result, target = _pods(summary)

    assert name == "pod runner"
    assert "100 Stacks in 10 namespaces on 2 nodes, `--workers=2`" in what
    assert f"**pod 4.33{TIMES}**, local 1.24{TIMES}" in result
    assert "schedule 0 s, pod start 1.0 s, checkout 1.2 s" in result
    assert "before the agent 2.2 s, the agent 3.1 s, after its outcome 1.1 s" in result
    assert "4.5 / 6.2 s (p50 / p99 of 20)" in result
    assert "placed 48+52 on the nodes" in result
    assert "0.12 s operator CPU, 3.4 s node CPU" in result
    assert target.startswith("≤ 2 run pods at once, none left idle, every node used: **met**;")
    assert target.endswith(f"a cached pod run ≤ 2.0{TIMES} a bare `pulumi up`: **not met**")
    for broken in ("max_concurrent_pods=3", "idle_pods=1", "nodes_used=1"):
        field = broken.split("=")[0]
        over = Summary.parse(
            " ".join(broken if f.startswith(f"{field}=") else f for f in LINE.split())
        )
        assert over is not None
        assert "every node used: **not met**" in _pods(over)[3], broken
    under = Summary.parse(LINE.replace("cost_pod_ratio=4.333", "cost_pod_ratio=1.9"))
    assert under is not None
    assert _pods(under)[3].endswith("a bare `pulumi up`: **met**")


def test_the_page_has_a_pods_row_and_its_method() -> None:
    """Rendered with the other rows; not run says so; the notes explain the split."""
    summary = Summary.parse(LINE)
    assert summary is not None
    assert "| pod runner |" in render({"pods": summary})
    page = render({})
    assert "| pods | — | not run | — |" in page
    assert "*Pod runner*" in page


def test_the_row_tells_the_warm_pods_figures_when_the_line_has_them() -> None:
    """cost_warm_*: its time and ratio, runs handed over, pods created, idle after; else none."""
    warm = (
        f"{LINE} cost_warm_e2e_s=1.9 cost_warm_ratio=0.904 cost_warm_reused=5 "
        "cost_warm_created=1 cost_warm_idle_pods=1"
    )
    summary = Summary.parse(warm)
    assert summary is not None
    result = _pods(summary)[2]
    assert f"a pod kept warm 1.9 s (**0.90{TIMES}**; 5 runs handed to it, 1 pod created" in result
    assert "1 idle after" in result
    assert _pods(summary)[3].endswith(f"within the warm window ≤ 1.2{TIMES}: **met**")
    plain = Summary.parse(LINE)
    assert plain is not None
    assert "kept warm" not in _pods(plain)[2]
    assert "warm window" not in _pods(plain)[3]
    slow = Summary.parse(warm.replace("cost_warm_ratio=0.904", "cost_warm_ratio=1.3"))
    assert slow is not None
    assert _pods(slow)[3].endswith("**not met**")


def test_a_handed_over_runs_legs_come_from_its_run_timed_line_and_add_up() -> None:
    """Handover is the runner leg less the agent's; other is the rest of PATCH → Ready."""
    timed = {
        "announce_s": 0.02, "checkout_s": 0.0, "runner_s": 1.5, "conclude_s": 0.03,
        "in_runner_checkout_s": 0.1, "in_runner_cli_s": 1.2,
    }  # fmt: skip

    legs = warm_split(timed, 1.8)

    assert list(legs) == list(WARM_SPLIT)
    assert legs["handover"] == pytest.approx(0.2)
    assert (legs["checkout"], legs["install"], legs["cli"]) == (0.1, 0.0, 1.2)
    assert legs["operator"] == pytest.approx(0.05)
    assert legs["other"] == pytest.approx(0.25)
    assert sum(legs.values()) == pytest.approx(1.8)


def test_the_row_tells_where_a_handed_over_run_goes_when_the_line_has_it() -> None:
    """warm_split_*: each leg, the runs' mean and how many were handed over."""
    fields = (
        "cost_warm_e2e_s=1.9 cost_warm_ratio=0.904 cost_warm_reused=5 cost_warm_created=1 "
        "cost_warm_idle_pods=1 warm_split_handover_s=0.21 warm_split_checkout_s=0.08 "
        "warm_split_install_s=0 warm_split_cli_s=1.3 warm_split_operator_s=0.05 "
        "warm_split_other_s=0.2 warm_split_e2e_s=1.84 warm_split_reused=5 "
        "warm_split_fit_s=0.03 warm_split_take_s=0.15"
    )
    summary = Summary.parse(f"{LINE} {fields}")
    assert summary is not None
    result = _pods(summary)[2]
    assert "a handed-over run at debug level (1.8 s, 5 handed over): handover 0.21 s" in result
    assert "CLI 1.3 s, the operator's own legs 0.05 s, other 0.20 s" in result
    assert "the pod's fit 0.03 s and the take (exec, annotation) 0.15 s" in result
