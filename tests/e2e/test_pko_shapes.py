"""PKO's manifests as they are: the shapes its own examples and e2e suite use, each Ready.

Under both runners (``tests.e2e.beds``), with the files program:

- ``repoDir: /app``, the form of PKO's ``stack-examples/yaml/nginx_k8s_stack.yaml``: a
  leading ``/`` means the repository's root, so the program in ``app/`` runs;
- the run's ServiceAccount in ``workspaceTemplate.spec.serviceAccountName``, as every Stack
  of PKO's e2e suite names it: under the pod runner the run pod runs as it, under the same
  opt-in rule as ``spec.serviceAccountName`` (an account no admin opted in stalls the Stack
  with ``InvalidSpec`` naming the field it was set in); the local runner ignores both fields;
- an init container in ``workspaceTemplate.spec.podTemplate`` that writes the passphrase to
  ``$PULUMI_ENV``, as PKO's ``issue-937`` e2e case does: the run has it (pod runner); the
  local runner refuses init containers, naming the runner they need.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from reconcile.tenancy import RUNNER_LABEL
from tests.e2e.beds import OFF_NODE, RUNNERS, Bed
from tests.e2e.conftest import Operator, Program, Stacks, find

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
both_runners = pytest.mark.parametrize("runner", RUNNERS)
off_node = pytest.mark.parametrize("runner", OFF_NODE)  # needs no pod: not on the node

RUN = 300.0  # seconds for one run of the files program, in a run pod included
TEMPLATE_ACCOUNT = "spec.workspaceTemplate.spec.serviceAccountName"


def with_template_account(body: dict[str, Any], account: str) -> dict[str, Any]:
    """``body`` with ``account`` in its ``workspaceTemplate.spec`` (kept beside the bed's)."""
    template = body["spec"].setdefault("workspaceTemplate", {})
    template.setdefault("spec", {})["serviceAccountName"] = account
    return body


def service_account(stacks: Stacks, name: str, *, opted_in: bool) -> None:
    """Create ServiceAccount ``name``, labelled by its namespace's admin when ``opted_in``."""
    labels = {RUNNER_LABEL: "true"} if opted_in else None
    body = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name, labels=labels))
    stacks.core.create_namespaced_service_account(stacks.namespace, body)


def run_pod(stacks: Stacks, name: str) -> client.V1Pod:
    """The Stack's (retained) run pod."""
    return stacks.core.read_namespaced_pod(f"{name}-pulumi", stacks.namespace)


@off_node
def test_a_repo_dir_from_the_repositorys_root_runs(
    stacks: Stacks, program: Program, operator: Operator
) -> None:
    """``repoDir: /app`` is ``app`` at the root of the checkout: Ready, the program ran."""
    del operator  # running; its teardown scans for leaked secrets
    stacks.create(stacks.manifest("from-root", program, repoDir="/app"))
    stored = stacks.get("from-root")["spec"]["repoDir"]
    assert stored == "/app", "the apiserver stores it as written"
    status = stacks.wait_ready("from-root", RUN)["status"]
    assert stacks.target("from-root").read_text() == "one"
    assert status["outputs"]["content"] == "one"
    assert status["lastUpdate"]["lastSuccessfulCommit"] == program.first


@both_runners
def test_the_workspace_templates_service_account_runs_the_stack(
    bed: Bed, stacks: Stacks, program: Program, operator: Operator
) -> None:
    """Named in the template, the account is the run pod's; one not opted in stalls there.

    The local runner builds no pod and reads no ServiceAccount: both Stacks are Ready.
    """
    del operator
    service_account(stacks, "runner", opted_in=True)
    service_account(stacks, "stranger", opted_in=False)
    as_runner = stacks.manifest("as-runner", program, workspaceReclaimPolicy="Retain")
    stacks.create(with_template_account(as_runner, "runner"))
    stacks.create(with_template_account(stacks.manifest("as-stranger", program), "stranger"))

    stacks.wait_ready("as-runner", RUN)
    assert stacks.target("as-runner").read_text() == "one"
    if not bed.on_node:
        stacks.wait_ready("as-stranger", RUN)
        return
    pod = run_pod(stacks, "as-runner")
    assert pod.spec is not None
    assert pod.spec.service_account_name == "runner"
    stalled = stacks.wait_reason("as-stranger", "Stalled", "InvalidSpec", RUN)
    message = find(stalled, "Stalled")["message"]  # type: ignore[index]
    assert f'{TEMPLATE_ACCOUNT}: ServiceAccount "stranger" is not one Stacks may run as' in message
    assert f"{RUNNER_LABEL}=true" in message
    assert not stacks.target("as-stranger").exists()


@both_runners
def test_an_init_container_hands_the_run_its_passphrase_through_pulumi_env(
    bed: Bed, stacks: Stacks, program: Program, operator: Operator
) -> None:
    """PKO's issue-937 shape: an init container writes the passphrase to ``$PULUMI_ENV``.

    The Stack names no passphrase itself; the init container (the operator's image, for
    its shell) appends ``PULUMI_CONFIG_PASSPHRASE=…`` to the file, from a Secret it is
    given, and the run has it: Ready. The value is a sentinel, never to be seen in status,
    Events or logs (the operator fixture scans them). The local runner runs no containers:
    it stalls the Stack naming the field and the runner it needs, and runs nothing.
    """
    del operator
    body = stacks.manifest("dynamic", program)
    del body["spec"]["envRefs"]["PULUMI_CONFIG_PASSPHRASE"]
    passphrase = {"secretKeyRef": {"name": "pulumi-secrets", "key": "passphrase"}}
    init = {
        "name": "passphrase",
        "image": run_image(bed) or "busybox",
        "command": ["sh", "-c", 'echo "PULUMI_CONFIG_PASSPHRASE=$PASSPHRASE" >> "$PULUMI_ENV"'],
        "env": [{"name": "PASSPHRASE", "valueFrom": passphrase}],
        "volumeMounts": [{"name": "share", "mountPath": "/share"}],
    }
    pod_spec(body).setdefault("initContainers", []).append(init)
    stacks.create(body)
    if not bed.on_node:
        stalled = stacks.wait_reason("dynamic", "Stalled", "InvalidSpec", RUN)
        message = find(stalled, "Stalled")["message"]  # type: ignore[index]
        assert "initContainers: init containers need the pod runner" in message
        assert not stacks.target("dynamic").exists()
        return
    stacks.wait_ready("dynamic", RUN)
    assert stacks.target("dynamic").read_text() == "one"


def run_image(bed: Bed) -> str | None:
    """The image of the bed's run pods (``--run-image``), None without one."""
    flags = [flag for flag in bed.flags if flag.startswith("--run-image=")]
    return flags[0].split("=", 1)[1] if flags else None


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    """``workspaceTemplate.spec.podTemplate.spec`` of a Stack ``body`` (made if missing)."""
    template = body["spec"].setdefault("workspaceTemplate", {}).setdefault("spec", {})
    spec: dict[str, Any] = template.setdefault("podTemplate", {}).setdefault("spec", {})
    return spec
