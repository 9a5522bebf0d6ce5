"""What a run needs before it starts, on fakes: prerequisites, Secrets, the source, repoDir.

Each missing input says so (DependencyNotReady, SecretNotFound, AuthenticationFailed,
SourceUnavailable, InvalidSpec) and recovers by itself once the input is there.
"""

from __future__ import annotations

import pytest

from controller.cache import ObjectKey
from controller.reconciler import Result, TransientError
from status.conditions import Reason
from status.events import NORMAL, WARNING
from tests.reconcile.stack_harness import SECRET_REF, Harness, reaches
from workspace.runner import ProjectInfo
from workspace.source import SourceError, SourceFailure


def test_a_repo_dir_missing_from_the_commit_concludes_the_announced_run(h: Harness) -> None:
    """A repoDir that is not there: Stalled InvalidSpec, the attempt recorded, no re-run."""
    h.create(repoDir="app")
    h.source.missing_dirs.add("app")
    assert h.reconcile() == Result()
    assert h.kstatus() == {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")}
    assert "currentUpdate" not in h.status
    assert (h.status["lastUpdate"]["state"], h.status["lastUpdate"]["failures"]) == ("failed", 1)
    assert h.events.reasons == ["UpdateStarted", "InvalidSpec"]
    h.clock.step(3600)
    h.reconcile()
    assert h.events.reasons == ["UpdateStarted", "InvalidSpec"]
    assert h.runner.calls == []


@reaches(Reason.DEPENDENCY_NOT_READY)
def test_a_stack_waits_for_its_prerequisites(h: Harness) -> None:
    """DependencyNotReady until the prerequisite is Ready for its generation; one Event."""
    h.create(prerequisites=[{"name": "base"}])
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus() == {
        "Ready": ("False", "DependencyNotReady"),
        "Reconciling": ("True", "DependencyNotReady"),
    }
    assert h.message() == 'Prerequisite Stack "base" does not exist'
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded"}
    h.create("base", status={"observedGeneration": 0, "conditions": [ready]})
    h.reconcile()
    assert h.message() == 'Prerequisite Stack "base" is not Ready'
    assert [e.type_ for e in h.events.posted] == [NORMAL]
    h.cluster.objects[ObjectKey("ns", "base")]["status"]["observedGeneration"] = 1
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_a_prerequisite_must_have_succeeded_recently_when_asked(h: Harness) -> None:
    """succeededWithinDuration: an old success does not count."""
    h.create(prerequisites=[{"name": "base", "requirement": {"succeededWithinDuration": "1m"}}])
    ready = {"type": "Ready", "status": "True", "reason": "Succeeded"}
    last = {"lastResyncTime": "2025-12-31T23:58:00Z"}
    h.create("base", status={"observedGeneration": 1, "conditions": [ready], "lastUpdate": last})
    h.reconcile()
    said = 'Prerequisite Stack "base" last succeeded at 2025-12-31T23:58:00Z, more than 60s ago'
    assert h.message() == said
    writes = len(h.writer.writes)
    h.clock.step(30)
    h.reconcile()
    assert len(h.writer.writes) == writes, "a message with an age would be rewritten every look"


@reaches(Reason.SECRET_NOT_FOUND)
def test_a_missing_secret_stalls_and_is_looked_for_until_it_appears(h: Harness) -> None:
    """SecretNotFound before anything is announced; looked for after 1 s, then less often."""
    h.create(envRefs={"TOKEN": SECRET_REF})
    assert h.reconcile() == Result(requeue_after=1.0)
    assert h.kstatus() == {
        "Ready": ("False", "SecretNotFound"),
        "Stalled": ("True", "SecretNotFound"),
    }
    assert h.message() == 'Secret "creds" not found in namespace "ns"'
    h.clock.step(12)
    assert h.reconcile() == Result(requeue_after=12.0)
    assert h.events.reasons == ["SecretNotFound"]
    h.secrets.data[("ns", "creds")] = {"token": "s3cr3t"}
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.runner.calls[0][1].env["TOKEN"] == "s3cr3t"  # noqa: S105 - a test value
    assert all("s3cr3t" not in str(write) for write in h.writer.writes)
    assert all("s3cr3t" not in event.message for event in h.events.posted)


@reaches(Reason.AUTHENTICATION_FAILED)
def test_refused_git_credentials_stall_until_they_change(h: Harness) -> None:
    """AuthenticationFailed: Stalled, polled; with working credentials the run goes ahead."""
    h.create(gitAuth={"accessToken": SECRET_REF})
    h.secrets.data[("ns", "creds")] = {"token": "tok"}
    refused = SourceError(
        "authentication failed", reason=SourceFailure.AUTHENTICATION_FAILED, transient=False
    )
    h.source.resolve_error = refused
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus() == {
        "Ready": ("False", "AuthenticationFailed"),
        "Stalled": ("True", "AuthenticationFailed"),
    }
    assert (h.events.posted[-1].reason, h.events.posted[-1].type_) == (
        "AuthenticationFailed",
        WARNING,
    )
    h.source.resolve_error = None
    h.runner.then(h.succeed())
    h.reconcile()
    credentials = h.source.checkouts[0][2]
    assert credentials is not None
    assert credentials.token == "tok"  # noqa: S105 - a test value


@reaches(Reason.SOURCE_UNAVAILABLE)
def test_a_source_that_cannot_be_fetched(h: Harness) -> None:
    """Refused for good: Stalled; unreachable: retried by the queue, said unless Ready."""
    h.create()
    h.source.resolve_error = SourceError(
        "no such branch", reason=SourceFailure.REVISION_NOT_FOUND, transient=False
    )
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus()["Stalled"] == ("True", "SourceUnavailable")
    h.source.resolve_error = SourceError(
        "timed out", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True
    )
    with pytest.raises(TransientError, match="source unavailable: timed out"):
        h.reconcile()
    assert h.kstatus() == {
        "Ready": ("False", "SourceUnavailable"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert h.metrics.reconciles[-1] == "error"


def test_an_unreachable_branch_leaves_a_ready_stack_ready(h: Harness) -> None:
    """A failed poll of a deployed Stack's branch changes nothing in its status."""
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    writes = len(h.writer.writes)
    h.source.resolve_error = SourceError(
        "timed out", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True
    )
    with pytest.raises(TransientError):
        h.reconcile()
    assert len(h.writer.writes) == writes


def test_a_checkout_that_fails_after_the_announcement_concludes_the_run(h: Harness) -> None:
    """Never a "Running pulumi up" left behind: unreachable → retrying; refused → stalled.

    An unreachable source is a failed attempt: the next passes (this pass's own writes come
    back as watch events at once) wait for the failures' backoff, writing and announcing
    nothing, instead of announcing the run again in a hot loop.
    """
    h.create()
    h.source.checkout_error = SourceError(
        "timed out", reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True
    )
    assert h.reconcile() == Result(requeue_after=10)
    assert "currentUpdate" not in h.status
    assert h.kstatus()["Reconciling"] == ("True", "ProgressingWithRetry")
    assert h.kstatus()["Ready"] == ("False", "SourceUnavailable")
    assert "Stalled" not in h.kstatus()
    writes = len(h.writer.writes)
    for _ in range(3):
        assert h.reconcile() == Result(requeue_after=10)
    assert len(h.writer.writes) == writes, "waiting for the backoff writes nothing"
    assert h.events.reasons.count("UpdateStarted") == 1
    h.clock.step(10)
    h.source.checkout_error = SourceError(
        "gone", reason=SourceFailure.REVISION_NOT_FOUND, transient=False
    )
    assert h.reconcile() == Result()
    assert "currentUpdate" not in h.status
    assert h.kstatus()["Stalled"] == ("True", "SourceUnavailable")


@reaches(Reason.CONFIG_MAP_NOT_FOUND)
def test_a_missing_config_map_stalls_and_its_values_win_over_config(h: Harness) -> None:
    """configRef: ConfigMapNotFound until the ConfigMap is there; its values beat config's."""
    h.create(
        config={"region": "inline", "name": "app"},
        configRef={
            "region": {"name": "settings", "key": "region"},
            "flags": {"name": "settings", "key": "flags.json", "json": True},
        },
    )
    assert h.reconcile() == Result(requeue_after=1.0)
    assert h.kstatus() == {
        "Ready": ("False", "ConfigMapNotFound"),
        "Stalled": ("True", "ConfigMapNotFound"),
    }
    assert h.message() == 'ConfigMap "settings" not found'
    h.secrets.config_maps[("ns", "settings")] = {"region": "eu", "flags.json": '{"a": [1, 2]}'}
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    config = dict(h.runner.calls[0][1].config)
    assert config == {"region": "eu", "name": "app", "flags": '{"a":[1,2]}'}
    assert h.events.reasons.count("ConfigMapNotFound") == 1


def test_a_config_map_value_that_is_not_json_stalls_naming_it(h: Harness) -> None:
    """json: true on a value that is not JSON: ConfigMapNotFound saying why; no run."""
    h.create(configRef={"flags": {"name": "settings", "key": "flags", "json": True}})
    h.secrets.config_maps[("ns", "settings")] = {"flags": "{not json"}
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "ConfigMapNotFound")
    assert "is not JSON" in h.message()
    assert h.runner.calls == []


def test_esc_environments_on_a_self_managed_backend_stall(h: Harness) -> None:
    """Environment needs Pulumi Cloud: on a file:// backend InvalidSpec names the field."""
    h.create(environment=["infra/dev"], backend="file:///state", stack="dev")
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "InvalidSpec")
    assert h.message().startswith("spec.environment: Pulumi ESC environments need")
    assert h.runner.calls == []


def test_pko_v2_run_fields_reach_the_runner(h: Harness) -> None:
    """targetDependents, runProgram, environment and shallow go to the runner as asked."""
    h.create(
        targets=["urn:pulumi:dev::p::t::a"],
        targetDependents=True,
        runProgram=True,
        environment=["infra/dev"],
        backend="https://api.pulumi.com",
        stack="acme/p/dev",
        shallow=True,
    )
    h.runner.then(h.succeed())
    h.reconcile()
    request = h.runner.calls[0][1]
    assert (request.target_dependents, request.run_program) == (True, True)
    assert request.environments == ("infra/dev",)
    assert h.source.shallow_checkouts == [True]


def test_the_project_a_run_read_is_recorded_in_project_info(h: Harness) -> None:
    """status.projectInfo: the name and runtime of the project the last run read."""
    h.create()
    h.runner.then(h.succeed(project=ProjectInfo("infra", "yaml")))
    h.reconcile()
    assert h.status["projectInfo"] == {"name": "infra", "runtime": "yaml"}


def test_the_request_says_which_env_came_from_secrets(h: Harness) -> None:
    """Secret envRefs are secret env; literal ones and the backend URL are plain."""
    literal = {"type": "Literal", "literal": {"value": "http://mirror.example/"}}
    h.secrets.data[("ns", "creds")] = {"token": "s3cr3t"}
    h.create(envRefs={"TOKEN": SECRET_REF, "NPM_CONFIG_REGISTRY": literal})
    h.runner.then(h.succeed())
    h.reconcile()
    request = h.runner.calls[0][1]
    assert request.env["NPM_CONFIG_REGISTRY"] == "http://mirror.example/"
    assert request.secret_env == frozenset({"TOKEN"})


def test_init_containers_stall_a_stack_the_local_runner_would_run(h: Harness) -> None:
    """InvalidSpec naming the field and the runner they need; nothing runs."""
    init = [{"name": "extra", "image": "busybox", "command": ["true"]}]
    h.create(workspaceTemplate={"spec": {"podTemplate": {"spec": {"initContainers": init}}}})
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "InvalidSpec")
    assert "initContainers: init containers need the pod runner" in h.message("Stalled")
    assert h.runner.operations == []
