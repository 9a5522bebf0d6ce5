"""What a Stack may ask of its run pods beyond its own namespace's rights: the operator's rules.

Role: the operator-wide rules (its flags) that a valid spec must also meet before the pod
runner builds a pod from it, because the pod would otherwise reach past what its author
may do: a priority class that preempts other tenants or the operator itself, a toleration
that lands it on dedicated or control-plane nodes, a ServiceAccount an admin made for
something else. Pure: the caller reads the ServiceAccount; the local runner ignores all of
this (it builds no pod), but refuses what it cannot do (``local_refusal``: init containers).

Guarantees: each refusal is a message that names the field, why it is refused and the fix
(the spec's, or the flag or label an admin would set); ``None`` means allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from reconcile.spec import StackSpec

ANY: Final = "*"
"""In ``allowed_service_accounts``: every ServiceAccount of the namespace may be used."""

RUNNER_LABEL: Final = "pulumi-stack-operator.dev/stack-runner"
"""A ServiceAccount labelled ``<RUNNER_LABEL>=true`` may run the Stacks of its namespace."""

CONTROL_PLANE_TAINTS: Final = frozenset(
    {"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}
)
"""Taint keys of control-plane nodes: tolerating them is refused like a wildcard."""

_PODS: Final = "spec.workspaceTemplate.spec.podTemplate.spec"


@dataclasses.dataclass(frozen=True)
class Tenancy:
    """The operator's rules for run pods (its flags; see ``refusal``, ``account_refusal``).

    ``allowed_priority_classes``: the PriorityClasses a Stack may name (none by default);
    ``allow_any_toleration``: Stacks may tolerate every taint (wildcards, control planes);
    ``allowed_service_accounts``: names usable without the label (``ANY``: every one).
    """

    allowed_priority_classes: frozenset[str] = frozenset()
    allow_any_toleration: bool = False
    allowed_service_accounts: frozenset[str] = frozenset({"default"})

    def checks_accounts(self, name: str) -> bool:
        """Whether ServiceAccount ``name`` must be read (and its label checked) before use."""
        return ANY not in self.allowed_service_accounts and name not in (
            self.allowed_service_accounts
        )


def refusal(spec: StackSpec, tenancy: Tenancy) -> str | None:
    """Why the pod ``spec`` asks for may not be built under ``tenancy`` (None: it may)."""
    pod = spec.workspace.overrides()
    return _priority_refusal(pod, tenancy) or _toleration_refusal(pod, tenancy)


def local_refusal(spec: StackSpec) -> str | None:
    """Why a runner without pods (local, agent) cannot run ``spec`` as written (None: it can).

    It ignores the rest of ``workspaceTemplate`` (it builds no pod), but init containers
    are steps of the run itself (they may hand it variables through ``$PULUMI_ENV``): a
    run without them would not be the run the Stack describes.
    """
    if not spec.workspace.overrides().get("initContainers"):
        return None
    return (
        f"{_PODS}.initContainers: init containers need the pod runner (--runner=pod); "
        "this operator runs programs as its own child processes (--runner=local or "
        "agent). Remove them, or run the Stack with an operator that uses the pod runner"
    )


def _priority_refusal(pod: Mapping[str, Any], tenancy: Tenancy) -> str | None:
    name = pod.get("priorityClassName")
    if name is None or name in tenancy.allowed_priority_classes:
        return None
    allowed = ", ".join(sorted(tenancy.allowed_priority_classes)) or "none"
    return (
        f"{_PODS}.priorityClassName: PriorityClass {name!r} is not one Stacks may use "
        f"(the operator's --allowed-priority-classes: {allowed}); a priority class lets a run "
        "pod preempt other pods, the operator's included: remove it, or ask an admin to list it"
    )


def _toleration_refusal(pod: Mapping[str, Any], tenancy: Tenancy) -> str | None:
    if tenancy.allow_any_toleration:
        return None
    for index, toleration in enumerate(pod.get("tolerations") or ()):
        key = toleration.get("key") or ""
        if not key:
            what = "tolerates every taint (no key)"
        elif key in CONTROL_PLANE_TAINTS:
            what = f"tolerates the control plane's taint {key}"
        else:
            continue
        return (
            f"{_PODS}.tolerations[{index}]: {what}, which would let run pods land on "
            "dedicated or control-plane nodes; name the taint's key, or ask an admin to start "
            "the operator with --allow-any-toleration"
        )
    return None


def account_refusal(
    name: str,
    labels: Mapping[str, str] | None,
    namespace: str,
    tenancy: Tenancy,
    field: str = "spec.serviceAccountName",
) -> str | None:
    """Why ServiceAccount ``name`` (``labels``; None: it does not exist) may not run the Stack.

    None when it may: it is listed in ``allowed_service_accounts``, or labelled
    ``RUNNER_LABEL=true``. ``field`` is where the Stack named it (the message starts with it).
    """
    if not tenancy.checks_accounts(name):
        return None
    if labels is None:
        return (
            f'{field}: ServiceAccount "{name}" not found in namespace "{namespace}": create '
            f"it (labelled {RUNNER_LABEL}=true) or name another"
        )
    if labels.get(RUNNER_LABEL) == "true":
        return None
    listed = ", ".join(sorted(tenancy.allowed_service_accounts)) or "none"
    return (
        f'{field}: ServiceAccount "{name}" is not one Stacks may run as: a namespace admin '
        f"opts it in with the label {RUNNER_LABEL}=true (whoever may create Stacks here then "
        f"runs code with its rights), or the operator's --allowed-service-accounts lists it "
        f"(now: {listed}); or name another"
    )
