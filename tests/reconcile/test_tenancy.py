"""The operator's rules for what a Stack may ask of its run pods (``reconcile.tenancy``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconcile.spec import StackSpec, Workspace
from reconcile.tenancy import RUNNER_LABEL, Tenancy, account_refusal, local_refusal, refusal


def spec(**pod: Any) -> StackSpec:
    """A spec whose run pod overrides are ``pod``."""
    return StackSpec(stack="dev", workspace=Workspace(pod_json=json.dumps(pod)))


def test_no_priority_class_by_default_and_the_listed_ones_when_allowed() -> None:
    """Refused unless ``allowed_priority_classes`` lists it; the message names the flag."""
    critical = spec(priorityClassName="system-node-critical")
    problem = refusal(critical, Tenancy())
    assert problem is not None
    assert problem.startswith(
        "spec.workspaceTemplate.spec.podTemplate.spec.priorityClassName: PriorityClass "
        "'system-node-critical'"
    )
    assert "--allowed-priority-classes: none" in problem
    listed = Tenancy(allowed_priority_classes=frozenset({"batch"}))
    assert refusal(spec(priorityClassName="batch"), listed) is None
    assert refusal(critical, listed) is not None
    assert refusal(spec(), Tenancy()) is None


@pytest.mark.parametrize(
    ("toleration", "what"),
    [
        ({"operator": "Exists"}, "tolerates every taint"),
        ({"operator": "Exists", "effect": "NoSchedule"}, "tolerates every taint"),
        ({"key": "", "operator": "Exists"}, "tolerates every taint"),
        (
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
            "the control plane's taint",
        ),
        ({"key": "node-role.kubernetes.io/master", "operator": "Exists"}, "control plane"),
    ],
)
def test_wildcard_and_control_plane_tolerations_need_the_flag(
    toleration: dict[str, str], what: str
) -> None:
    """Refused naming the item; ``allow_any_toleration`` allows them."""
    pod = spec(tolerations=[{"key": "pulumi", "operator": "Exists"}, toleration])
    problem = refusal(pod, Tenancy())
    assert problem is not None
    assert problem.startswith("spec.workspaceTemplate.spec.podTemplate.spec.tolerations[1]: ")
    assert what in problem
    assert "--allow-any-toleration" in problem
    assert refusal(pod, Tenancy(allow_any_toleration=True)) is None


def test_a_keyed_toleration_is_the_stacks_own_business() -> None:
    """Dedicated pools tolerated by key are fine (the example of docs/runners-and-security.md)."""
    toleration = {"key": "pulumi", "operator": "Exists", "effect": "NoSchedule"}
    assert refusal(spec(tolerations=[toleration]), Tenancy()) is None


def test_accounts_listed_or_labelled_may_run_stacks() -> None:
    """``default`` is listed by default; others need the label; ``*`` allows every one."""
    tenancy = Tenancy()
    assert not tenancy.checks_accounts("default")
    assert tenancy.checks_accounts("deployer")
    assert account_refusal("deployer", {RUNNER_LABEL: "true"}, "ns", tenancy) is None
    for labels in ({}, {RUNNER_LABEL: "false"}, {"other": "true"}):
        problem = account_refusal("deployer", labels, "ns", tenancy)
        assert problem is not None
        assert problem.startswith('spec.serviceAccountName: ServiceAccount "deployer"')
        assert f"{RUNNER_LABEL}=true" in problem
        assert "--allowed-service-accounts" in problem
    missing = account_refusal("deployer", None, "ns", tenancy)
    assert missing is not None
    assert 'not found in namespace "ns"' in missing
    anyone = Tenancy(allowed_service_accounts=frozenset({"*"}))
    assert not anyone.checks_accounts("deployer")
    assert account_refusal("deployer", {}, "ns", anyone) is None


def test_the_refusal_names_the_field_that_named_the_account() -> None:
    """Named in the workspaceTemplate, the account's refusal names that field, not another."""
    field = "spec.workspaceTemplate.spec.serviceAccountName"
    labels: dict[str, str] | None
    for labels in ({}, None):
        problem = account_refusal("deployer", labels, "ns", Tenancy(), field)
        assert problem is not None
        assert problem.startswith(f'{field}: ServiceAccount "deployer"')


def test_the_local_runner_refuses_init_containers_naming_the_runner_they_need() -> None:
    """They are steps of the run: without a pod, the run would not be the one described."""
    assert local_refusal(spec()) is None
    assert local_refusal(spec(nodeSelector={"a": "b"})) is None, "the rest is ignored"
    refused = local_refusal(spec(initContainers=[{"name": "extra", "image": "busybox"}]))
    assert refused is not None
    assert refused.startswith("spec.workspaceTemplate.spec.podTemplate.spec.initContainers:")
    assert "--runner=pod" in refused
