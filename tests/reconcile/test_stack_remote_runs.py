"""The reconciler with a runner whose runs happen elsewhere (the pod runner's traits).

What changes: the request carries a ``RunJob`` of references instead of a checkout and
secret values; a run the runner left going at shutdown (``DETACHED``) concludes nothing;
a run a gone instance left is attached to and concluded with its own outcome; a run pod
that ends without an outcome is ``RunnerFailed``, retried with backoff.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import ANY

import pytest

from controller.cache import ObjectKey, freeze_object
from controller.reconciler import Result
from reconcile.prepare import spec_written
from reconcile.stack import FINALIZER
from reconcile.tenancy import RUNNER_LABEL, Tenancy
from status.conditions import Reason
from tests.reconcile.stack_harness import KEY, Harness, reaches
from tests.reconcile.test_stack_sources import (
    FLUX,
    PASSWORD,
    PROGRAM,
    SHA,
    git_repository,
    program,
)
from workspace.runner import Detached, ErrorKind, PodRunner, RunnerTraits
from workspace.runner.document import FluxArtifact, JobDocument, RenderedProject, ValueRef

SECRET = {"type": "Secret", "secret": {"name": "creds", "key": "token"}}
LITERAL = {"type": "Literal", "literal": {"value": "plain"}}


def remote(tmp_path: Path, **settings: object) -> Harness:
    """A harness whose reconciler runs remotely."""
    return Harness(tmp_path, runner_traits=PodRunner.traits, **settings)


def test_the_request_carries_references_and_no_secret_value(tmp_path: Path) -> None:
    """No checkout; the job names Secret keys as pod variables; the value is nowhere."""
    h = remote(tmp_path)
    h.secrets.data[(KEY.namespace, "creds")] = {"token": "s3cr3t-value"}
    h.create(
        envRefs={"TOKEN": SECRET, "PLAIN": LITERAL},
        secretsRef={"apiKey": SECRET},
        serviceAccountName="deployer",
    )
    h.cluster.objects[KEY]["metadata"]["uid"] = "uid-1"
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    job = request.job
    assert job is not None
    assert h.source.checkouts == []
    assert (job.namespace, job.owner.name, job.owner.uid, job.generation) == (
        KEY.namespace,
        KEY.name,
        "uid-1",
        1,
    )
    assert job.service_account == "deployer"
    [variable] = job.secret_env  # one Secret key, used twice: one variable
    assert (variable.secret, variable.key) == ("creds", "token")
    document = JobDocument.decode(job.document)
    assert document.env_refs == {
        "TOKEN": ValueRef(env=variable.env),
        "PLAIN": ValueRef(value="plain"),
    }
    assert document.secret_config == {"apiKey": ValueRef(env=variable.env)}
    assert "s3cr3t-value" not in repr(request) + job.document
    assert dict(request.env) == {}
    assert dict(request.secret_config) == {}
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


@reaches(Reason.RUNNER_FAILED)
def test_an_interruption_the_operator_did_not_ask_for_is_runner_failed(h: Harness) -> None:
    """Interrupted with no stop of the operator's (a drain): RunnerFailed, counted, retried.

    The run pod reports the agent's Interrupted outcome, told why; the verdict, not the
    runner, judges that nobody here asked for it.
    """
    h.create()
    message = "the run pod team/web-pulumi failed: Evicted: node drained; update interrupted"
    h.runner.then(h.fail(ErrorKind.INTERRUPTED, message=message))
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus() == {
        "Ready": ("False", "RunnerFailed"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert "Evicted: node drained" in h.message()
    assert h.status["lastUpdate"]["state"] == "failed"
    assert h.status["lastUpdate"]["failures"] == 1
    assert h.metrics.updates == [("up", "failed")]


@reaches(Reason.RUNNER_FAILED)
def test_a_run_pod_that_ends_without_an_outcome_is_runner_failed_and_retried(h: Harness) -> None:
    """RunnerFailed with the pod's reason in Ready's message; retried after the backoff."""
    h.create()
    message = "the run pod team/web-pulumi failed: OOMKilled: exit code 137"
    h.runner.then(h.fail(ErrorKind.RUNNER_FAILED, message=message))
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus() == {
        "Ready": ("False", "RunnerFailed"),
        "Reconciling": ("True", "ProgressingWithRetry"),
    }
    assert "OOMKilled" in h.message()
    assert h.events.reasons[-1] == "RunnerFailed"


def test_a_detached_run_concludes_nothing(tmp_path: Path) -> None:
    """A shutdown that leaves the run pod going writes no conclusion: currentUpdate stays."""
    h = remote(tmp_path)
    h.create()
    h.runner.then(Detached("up", h.clock.wall(), "left running"))
    assert h.reconcile() == Result()
    assert "currentUpdate" in h.status
    assert h.kstatus()["Reconciling"] == ("True", "Progressing")
    assert h.events.reasons == ["UpdateStarted"]
    assert h.metrics.updates == []


@pytest.mark.parametrize("leader_elect", [True, False])
def test_a_run_a_gone_instance_left_is_attached_to_not_rerun(
    tmp_path: Path, *, leader_elect: bool
) -> None:
    """The new leader (or restarted single instance) concludes the pod's own outcome.

    No Interrupted, no second run: the run is the pod's, whichever instance started it.
    """
    h = remote(tmp_path, sole_runner=leader_elect, takeover_delay=0.0, leading_since=lambda: 0.0)
    current = {"generation": 1, "commit": "a1" * 20, "type": "up", "operator": "gone_9"}
    h.create(status={"observedGeneration": 1, "currentUpdate": current})
    h.cluster.objects[KEY]["metadata"]["finalizers"] = [FINALIZER]
    h.runner.attached = h.succeed(outputs={"url": "http://x"})
    h.reconcile()
    assert h.runner.operations == ["attach"]
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert "currentUpdate" not in h.status
    assert h.status["outputs"] == {"url": "http://x"}
    assert "Interrupted" not in h.events.reasons


def test_with_nothing_to_attach_to_the_left_run_is_interrupted_and_run_again(
    tmp_path: Path,
) -> None:
    """No run pod left: as with the local runner, Interrupted, then a new run."""
    h = remote(tmp_path, sole_runner=True, takeover_delay=0.0, leading_since=lambda: 0.0)
    current = {"generation": 1, "commit": "a1" * 20, "type": "up", "operator": "gone_9"}
    h.create(status={"observedGeneration": 1, "currentUpdate": current})
    h.cluster.objects[KEY]["metadata"]["finalizers"] = [FINALIZER]
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.runner.operations == ["attach", "run"]
    assert h.events.reasons == ["Interrupted", "UpdateStarted", "Succeeded"]


def test_a_spec_change_carries_when_it_was_written(tmp_path: Path) -> None:
    """``changed_at``: the newest managedFields entry touching spec (not status)."""
    h = remote(tmp_path)
    h.create()
    h.cluster.objects[KEY]["metadata"]["managedFields"] = [
        {"manager": "kubectl", "time": "2026-12-01T10:00:00Z", "fieldsV1": {"f:spec": {}}},
        {"manager": "ci", "time": "2026-12-01T10:00:07Z", "fieldsV1": {"f:spec": {}}},
        {
            "manager": "pulumi-stack-operator",
            "time": "2026-12-01T10:00:09Z",
            "subresource": "status",
            "fieldsV1": {"f:status": {}},
        },
    ]
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    assert request.job.changed_at == datetime(2026, 12, 1, 10, 0, 7, tzinfo=UTC)


def test_a_file_backend_outside_every_volume_stalls_naming_the_field(tmp_path: Path) -> None:
    """Its state would die with the pod: InvalidSpec, no run; on a mounted volume it runs."""
    h = remote(tmp_path)
    h.create(backend="file:///state/backend")
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "InvalidSpec")
    assert "spec.backend: file:///state/backend" in h.message("Stalled")
    assert "workspaceTemplate" in h.message("Stalled")
    assert [name for name, _ in h.runner.calls if name == "run"] == []
    claim = {"name": "state", "persistentVolumeClaim": {"claimName": "state"}}
    mount = {"name": "pulumi", "volumeMounts": [{"name": "state", "mountPath": "/state"}]}
    template = {"spec": {"podTemplate": {"spec": {"volumes": [claim], "containers": [mount]}}}}
    h.edit(workspaceTemplate=template)
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_a_runner_that_takes_a_job_without_pods_needs_no_volume(tmp_path: Path) -> None:
    """The agent runner's runs are processes here: a ``file://`` backend anywhere runs."""
    h = Harness(tmp_path, runner_traits=RunnerTraits(takes_job=True))
    h.create(backend="file:///state/backend")
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    [(_, request)] = h.runner.calls
    assert request.job is not None


def test_when_the_spec_was_written_survives_the_caches_short_managed_fields() -> None:
    """The informer keeps managedFields in short form; ``spec_written`` reads the same time."""
    full = {
        "metadata": {
            "name": "web",
            "managedFields": [
                {
                    "manager": "kubectl",
                    "operation": "Apply",
                    "time": "2026-12-01T10:00:07Z",
                    "fieldsV1": {"f:spec": {"f:stack": {}, "f:config": {"f:path": {}}}},
                },
                {
                    "manager": "pulumi-stack-operator",
                    "operation": "Update",
                    "time": "2026-12-01T10:00:09Z",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {}}},
                },
            ],
        }
    }
    expected = datetime(2026, 12, 1, 10, 0, 7, tzinfo=UTC)
    assert spec_written(full) == expected
    assert spec_written(freeze_object(full)) == expected


# -- what the operator lets Stacks ask of run pods (reconcile.tenancy) --------------------


def test_a_refused_pod_stalls_before_any_run(tmp_path: Path) -> None:
    """A priority class the operator does not list: Stalled InvalidSpec, nothing run."""
    h = remote(tmp_path)
    template = {"spec": {"podTemplate": {"spec": {"priorityClassName": "system-node-critical"}}}}
    h.create(workspaceTemplate=template)
    h.reconcile()
    assert h.kstatus() == {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")}
    assert "priorityClassName" in h.message("Stalled")
    assert "--allowed-priority-classes" in h.message("Stalled")
    assert h.runner.calls == []


def test_an_allowed_priority_class_runs(tmp_path: Path) -> None:
    """The same class, listed by the operator, reaches the job."""
    h = remote(tmp_path, tenancy=Tenancy(allowed_priority_classes=frozenset({"batch"})))
    h.create(workspaceTemplate={"spec": {"podTemplate": {"spec": {"priorityClassName": "batch"}}}})
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    assert request.job.template()["priorityClassName"] == "batch"


def test_the_local_runner_ignores_what_it_never_builds(tmp_path: Path) -> None:
    """No run pod, no refusal: the local runner ignores workspaceTemplate."""
    h = Harness(tmp_path)
    h.create(workspaceTemplate={"spec": {"podTemplate": {"spec": {"priorityClassName": "x"}}}})
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.accounts.reads == 0


def test_an_account_not_opted_in_stalls_until_an_admin_labels_it(tmp_path: Path) -> None:
    """Stalled InvalidSpec, looked at again every poll; the label mends it, no edit needed."""
    h = remote(tmp_path)
    h.accounts.accounts[(KEY.namespace, "secret-reader")] = {}
    h.create(serviceAccountName="secret-reader")
    assert h.reconcile() == Result(requeue_after=30)
    assert h.kstatus() == {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")}
    assert "pulumi-stack-operator.dev/stack-runner=true" in h.message("Stalled")
    assert h.runner.calls == []
    writes = len(h.writer.writes)
    assert h.reconcile() == Result(requeue_after=30)
    assert len(h.writer.writes) == writes, "a stall that stays costs no write"
    h.accounts.accounts[(KEY.namespace, "secret-reader")] = {RUNNER_LABEL: "true"}
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_the_workspace_templates_account_runs_the_pod_under_the_same_rules(
    tmp_path: Path,
) -> None:
    """PKO's ``workspaceTemplate.spec.serviceAccountName``: opted in the same way, then the job's.

    Not opted in, the Stack stalls naming the field it was set in; labelled, it runs as it.
    """
    field = "spec.workspaceTemplate.spec.serviceAccountName"
    h = remote(tmp_path)
    h.accounts.accounts[(KEY.namespace, "runner")] = {}
    h.create(workspaceTemplate={"spec": {"serviceAccountName": "runner"}})
    h.reconcile()
    assert h.kstatus() == {"Ready": ("False", "InvalidSpec"), "Stalled": ("True", "InvalidSpec")}
    assert f'{field}: ServiceAccount "runner" is not one' in h.message("Stalled")
    assert h.runner.calls == []
    h.accounts.accounts[(KEY.namespace, "runner")] = {RUNNER_LABEL: "true"}
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    assert request.job.service_account == "runner"
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}


def test_a_missing_account_stalls_naming_it(tmp_path: Path) -> None:
    """Not found: the message says to create it (labelled) or name another."""
    h = remote(tmp_path)
    h.accounts.accounts[(KEY.namespace, "nobody")] = None
    h.create(serviceAccountName="nobody")
    h.reconcile()
    assert 'ServiceAccount "nobody" not found' in h.message("Stalled")


def test_listed_accounts_are_not_read(tmp_path: Path) -> None:
    """The default account (listed by default) and ``*`` need no read."""
    h = remote(tmp_path)
    h.create()
    h.runner.then(h.succeed())
    h.reconcile()
    h.restart(
        runner_traits=PodRunner.traits, tenancy=Tenancy(allowed_service_accounts=frozenset({"*"}))
    )
    h.edit(serviceAccountName="anyone")
    h.runner.then(h.succeed())
    h.reconcile()
    assert h.kstatus() == {"Ready": ("True", "Succeeded")}
    assert h.accounts.reads == 0


def test_a_destroy_as_an_account_not_opted_in_is_blocked(tmp_path: Path) -> None:
    """``destroyOnFinalize`` runs a pod as the account too: DeletionBlocked, naming why."""
    h = remote(tmp_path)
    h.create(serviceAccountName="deployer", destroyOnFinalize=True)
    h.runner.then(h.succeed())
    h.reconcile()
    h.accounts.accounts[(KEY.namespace, "deployer")] = {}
    h.delete()
    assert h.reconcile() == Result(requeue_after=10)
    assert h.kstatus()["Ready"] == ("False", "DeletionBlocked")
    assert "stack-runner=true" in h.message()
    assert [name for name, _ in h.runner.calls].count("destroy") == 0


def test_a_deadline_past_the_ceiling_is_cut_and_said(tmp_path: Path) -> None:
    """``timeoutSeconds`` above ``max_run_timeout``: the job's timeout is the ceiling.

    The run's Reconciling message says so.
    """
    h = remote(tmp_path, max_run_timeout=900.0)
    h.create(timeoutSeconds=999_999_999)
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    assert request.job.timeout == 900.0
    messages = [
        condition["message"]
        for status in h.writer.writes
        for condition in status.get("conditions", [])
        if condition["type"] == "Reconciling"
    ]
    note = "deadline 900s, the operator's --max-run-timeout (spec.timeoutSeconds asks 999999999s)"
    assert any(note in message for message in messages), messages


def test_a_run_pod_fetches_a_flux_artifact_itself(tmp_path: Path) -> None:
    """Under the pod runner a fluxSource job carries the artifact's URL and digest."""
    h = remote(tmp_path)
    h.create(**FLUX)
    git_repository(h)
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    source = JobDocument.decode(request.job.document).source
    digest = "sha256:" + "ab" * 32
    assert source == FluxArtifact(ANY, digest, f"main@sha1:{SHA}", "app")
    assert h.source.fetches == [], "the operator never handles the program's files itself"


def test_a_run_pod_gets_a_rendered_program_and_keeps_its_pod_when_asked(tmp_path: Path) -> None:
    """Under the pod runner a programRef job holds Pulumi.yaml; Retain reaches the job."""
    h = remote(tmp_path)
    h.create(**PROGRAM, workspaceReclaimPolicy="Retain")
    program(h, {"password": PASSWORD})
    h.runner.then(h.succeed())
    h.reconcile()
    [request] = [request for name, request in h.runner.calls if name == "run"]
    assert request.job is not None
    source = JobDocument.decode(request.job.document).source
    assert isinstance(source, RenderedProject)
    assert "runtime: yaml" in source.project
    assert request.job.reclaim == "Retain"


def test_a_program_too_large_for_a_run_pod_stalls(tmp_path: Path) -> None:
    """A Program that renders past what a job carries: InvalidSpec naming programRef."""
    h = remote(tmp_path)
    h.create(**PROGRAM)
    outputs = {f"o{i}": "x" * 1000 for i in range(80)}
    obj = {"metadata": {"name": "random-yaml"}, "program": {"outputs": outputs}}
    h.objects.objects[("Program", ObjectKey(KEY.namespace, "random-yaml"))] = obj
    h.reconcile()
    assert h.kstatus()["Stalled"] == ("True", "InvalidSpec")
    assert h.message().startswith("spec.programRef:")
