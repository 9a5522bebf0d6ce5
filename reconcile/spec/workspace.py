"""``serviceAccountName`` and ``workspaceTemplate``: who a run pod runs as, and how it is built.

Role: parse the run pods' ServiceAccount, named by PKO v2's ``spec.serviceAccountName`` or,
as PKO's own e2e suite names it, ``spec.workspaceTemplate.spec.serviceAccountName`` (both
set must agree), and the subset of ``spec.workspaceTemplate`` the pod runner applies into a
``Workspace``: the image, its pull policy, the Pod Security Standard, and the pod overrides,
a JSON object with exactly these keys, each present only when given (empty means unset):

- ``labels``, ``annotations``: ``workspaceTemplate.metadata``, then ``spec.podTemplate.metadata``
  (which wins a clash);
- ``resources``: ``{requests, limits}`` of ``spec.resources``, then of the ``pulumi``
  container (which wins a clash, per resource); quantities are kept as given;
- ``env``, ``envFrom``: ``spec.env`` (``spec.envFrom``), then the ``pulumi`` container's;
- ``nodeSelector``, ``tolerations``, ``affinity``, ``priorityClassName``, ``volumes``: from
  ``spec.podTemplate.spec``; ``volumeMounts``: the ``pulumi`` container's;
- ``initContainers``: the Stack's own (``reconcile.spec.init_containers``).

Refused on purpose: labels and annotations read as policy (``reconcile.spec.pod_metadata``:
AppArmor, seccomp, service meshes, runtimes...); volumes and mounts that would weaken the run
pod or take the runner's (``reconcile.spec.volumes``: ``hostPath``, ``/workspace``...); and
whatever else would weaken the run pod or fight the runner: host namespaces, security
contexts, extra containers, the ``pulumi`` container's command, args, image and
securityContext, a ServiceAccount in the pod template (name it in one of the two fields
above) and the runner's variables (``PSO_*``, ``HOME``, ``PULUMI_HOME``, ``TMPDIR``). An
unknown key is refused at every level, and the message lists the supported ones (the keys
and refusals are public: ``WORKSPACE_FIELDS``, ``POD_FIELDS``, ``REFUSED_POD_FIELDS``...,
for the checks of the docs). An env ``value`` may be "" (an explicitly empty variable);
elsewhere empty means unset.

Left to others: the operator's tenancy rules (``reconcile.tenancy``: which priority classes,
tolerations and ServiceAccounts its flags allow); the pod runner builds and runs the pod; the
local runner ignores both fields; the apiserver checks what only it knows (quotas...).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from reconcile.spec.container_settings import container_settings, read_image
from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    is_set,
    kind_of,
    read_map,
    read_string,
)
from reconcile.spec.init_containers import read_init_containers
from reconcile.spec.model import (
    DEFAULT_SERVICE_ACCOUNT,
    PULL_POLICIES,
    SECURITY_PROFILES,
    SERVICE_ACCOUNT_FIELDS,
    SpecError,
    Workspace,
    canonical_json,
)
from reconcile.spec.names import (
    labels,
    subdomain,
)
from reconcile.spec.pod_metadata import read_pod_metadata
from reconcile.spec.template_fields import (
    closed_object,
    given,
    optional_closed_object,
    plain_object,
    read_choice,
    read_items,
)
from reconcile.spec.volumes import read_mounts, read_volumes
from workspace.runner.envfile import SHARE_VOLUME

_TEMPLATE: Final = SPEC / "workspaceTemplate"


_POD_SECURITY: Final = "refused: the runner owns the run pod's security"
_CONTAINER_OWNED: Final = (
    "refused: the runner owns the pulumi container's command, args, image and securityContext"
)

_ACCOUNT: Final = "serviceAccountName"
_TEMPLATE_FIELDS: Final = frozenset({"metadata", "spec"})
WORKSPACE_FIELDS: Final = frozenset(
    {
        "image",
        "imagePullPolicy",
        "securityProfile",
        "resources",
        "env",
        "envFrom",
        "podTemplate",
        _ACCOUNT,
    }
)
"""The keys of ``spec.workspaceTemplate.spec`` read here; any other is refused."""
_POD_ACCOUNT: Final = (
    "refused here: set spec.serviceAccountName (or spec.workspaceTemplate.spec.serviceAccountName)"
)
POD_FIELDS: Final = frozenset(
    {
        "nodeSelector",
        "tolerations",
        "affinity",
        "priorityClassName",
        "volumes",
        "containers",
        "initContainers",
    }
)
"""The keys of the pod template's ``spec`` read here; any other is refused."""
REFUSED_POD_FIELDS: Final = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "securityContext",
                "hostNetwork",
                "hostPID",
                "hostIPC",
                "hostUsers",
                "shareProcessNamespace",
                "ephemeralContainers",
                "automountServiceAccountToken",
            ),
            _POD_SECURITY,
        ),
        "serviceAccountName": _POD_ACCOUNT,
        "serviceAccount": _POD_ACCOUNT,
    }
)
"""Keys of the pod template's ``spec`` refused with a reason of their own (others: unknown)."""
CONTAINER_FIELDS: Final = frozenset({"name", "volumeMounts", "env", "envFrom", "resources"})
"""The keys of the ``pulumi`` container read here; any other is refused."""
REFUSED_CONTAINER_FIELDS: Final = MappingProxyType(
    {
        **dict.fromkeys(("command", "args", "securityContext", "workingDir"), _CONTAINER_OWNED),
        "image": f"{_CONTAINER_OWNED}: set spec.workspaceTemplate.spec.image",
        "imagePullPolicy": f"{_CONTAINER_OWNED}: set spec.workspaceTemplate.spec.imagePullPolicy",
    }
)
"""Keys of the ``pulumi`` container refused with a reason of their own (others: unknown)."""
_TOLERATION_FIELDS: Final = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_AFFINITY_FIELDS: Final = frozenset({"nodeAffinity", "podAffinity", "podAntiAffinity"})
_ENUMS: Final = MappingProxyType(
    {
        "operator": ("Exists", "Equal"),
        "effect": ("NoSchedule", "PreferNoSchedule", "NoExecute"),
    }
)


def read_service_account(root: Mapping[str, Any]) -> tuple[str, str]:
    """The run pods' ServiceAccount in the spec ``root`` and the field that named it.

    Either of ``SERVICE_ACCOUNT_FIELDS`` names it (``default``, from the first, when neither
    does). PKO lets the template's win a clash; here one that clashes is refused, so that no
    Stack runs as an account its author did not see.

    Raises:
        SpecError: a name that is not a ServiceAccount name (a DNS subdomain), or two names.
    """
    top_field, template_field = SERVICE_ACCOUNT_FIELDS
    top = _account_name(root, SPEC)
    template = _account_name(_workspace_spec(root), _TEMPLATE / "spec")
    if top is not None and template is not None and top != template:
        problem = (
            f'"{template}" differs from {top_field} "{top}": name the run\'s ServiceAccount in'
            " one of the two (or the same in both)"
        )
        raise SpecError(template_field, problem)
    if top is None and template is not None:
        return template, template_field
    return top or DEFAULT_SERVICE_ACCOUNT, top_field


def _account_name(obj: Mapping[str, Any], path: FieldPath) -> str | None:
    """``obj.serviceAccountName`` (a DNS subdomain); None when unset."""
    name = read_string(obj, path, _ACCOUNT)
    return None if name is None else subdomain(name, path / _ACCOUNT, "ServiceAccount")


def _workspace_spec(root: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec.workspaceTemplate.spec`` of the spec ``root``, its keys checked; empty when unset."""
    raw = root.get("workspaceTemplate")
    if not is_set(raw):
        return {}
    template = closed_object(raw, _TEMPLATE, _TEMPLATE_FIELDS)
    return optional_closed_object(template, _TEMPLATE, "spec", WORKSPACE_FIELDS)


def read_workspace(root: Mapping[str, Any]) -> Workspace:
    """``spec.workspaceTemplate`` of the spec ``root``; ``Workspace()`` when unset.

    Its ``spec.serviceAccountName`` is ``read_service_account``'s, not part of the Workspace.

    Raises:
        SpecError: a key outside the supported subset, a refused one, or a wrong value.
    """
    raw = root.get("workspaceTemplate")
    if not is_set(raw):
        return Workspace()
    template = closed_object(raw, _TEMPLATE, _TEMPLATE_FIELDS)
    path = _TEMPLATE / "spec"
    spec = optional_closed_object(template, _TEMPLATE, "spec", WORKSPACE_FIELDS)
    env_refs = frozenset(str(name) for name in read_map(root, SPEC, "envRefs"))
    overrides = _merge(
        _merge(read_pod_metadata(template, _TEMPLATE), container_settings(spec, path, env_refs)),
        _pod_template(spec, path, env_refs),
    )
    return Workspace(
        security_profile=read_choice(spec, path, "securityProfile", SECURITY_PROFILES)
        or SECURITY_PROFILES[0],
        image=read_image(spec, path),
        image_pull_policy=read_choice(spec, path, "imagePullPolicy", PULL_POLICIES),
        pod_json=canonical_json(overrides),
    )


def _merge(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """``second`` over ``first``: lists concatenate, objects merge (``second`` wins a clash)."""
    merged = dict(first)
    for key, value in second.items():
        old = merged.get(key)
        if isinstance(old, list) and isinstance(value, list):
            merged[key] = [*old, *value]
        elif isinstance(old, dict) and isinstance(value, dict):
            merged[key] = _merge(old, value)
        else:
            merged[key] = value
    return merged


# -- the pod template ------------------------------------------------------------------------


def _pod_template(
    spec: Mapping[str, Any], path: FieldPath, env_refs: frozenset[str]
) -> dict[str, Any]:
    """``spec.podTemplate``'s metadata, pod settings and pulumi container, as overrides."""
    template = optional_closed_object(spec, path, "podTemplate", _TEMPLATE_FIELDS)
    template_path = path / "podTemplate"
    pod = optional_closed_object(template, template_path, "spec", POD_FIELDS, REFUSED_POD_FIELDS)
    pod_path = template_path / "spec"
    volumes = read_volumes(pod, pod_path)
    scheduling = given(
        nodeSelector=labels(pod, pod_path, "nodeSelector"),
        tolerations=[
            _toleration(item, at) for at, item in read_items(pod, pod_path, "tolerations")
        ],
        affinity=_affinity(pod, pod_path),
        priorityClassName=_priority_class(pod, pod_path),
        volumes=volumes,
    )
    names = frozenset(volume["name"] for volume in volumes)
    container = _containers(pod, pod_path, names, env_refs)
    inits = given(initContainers=read_init_containers(pod, pod_path, names | {SHARE_VOLUME}))
    return {**read_pod_metadata(template, template_path), **scheduling, **container, **inits}


def _priority_class(pod: Mapping[str, Any], path: FieldPath) -> str | None:
    """``pod.priorityClassName`` (a DNS subdomain); None when unset."""
    name = read_string(pod, path, "priorityClassName")
    return None if name is None else subdomain(name, path / "priorityClassName", "PriorityClass")


def _toleration(raw: object, path: FieldPath) -> dict[str, Any]:
    """A Toleration, type-checked, without its null fields."""
    toleration = closed_object(raw, path, _TOLERATION_FIELDS)
    for key in ("key", "value"):
        read_string(toleration, path, key)
    for key, choices in _ENUMS.items():
        read_choice(toleration, path, key, choices)
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise SpecError(path / "tolerationSeconds", f"must be an integer, not {kind_of(seconds)}")
    return {key: value for key, value in toleration.items() if value is not None}


def _affinity(pod: Mapping[str, Any], path: FieldPath) -> dict[str, Any]:
    """``pod.affinity``: known kinds of affinity, their contents passed through."""
    affinity = optional_closed_object(pod, path, "affinity", _AFFINITY_FIELDS)
    return {
        key: plain_object(value, path / "affinity" / key)
        for key, value in affinity.items()
        if value is not None
    }


def _containers(
    pod: Mapping[str, Any], path: FieldPath, volumes: frozenset[str], env_refs: frozenset[str]
) -> dict[str, Any]:
    """The pulumi container's settings and volumeMounts, as overrides."""
    items = read_items(pod, path, "containers")
    settings = [_container(item, at, volumes, env_refs) for at, item in items]
    if len(settings) > 1:
        raise SpecError(items[1][0] / "name", "the pulumi container is listed twice: merge them")
    return settings[0] if settings else {}


def _container(
    raw: object, path: FieldPath, volumes: frozenset[str], env_refs: frozenset[str]
) -> dict[str, Any]:
    """The pulumi container: its settings and mounts (of ``volumes``, each path once)."""
    if isinstance(raw, Mapping) and raw.get("name") != "pulumi":
        problem = "only the pulumi container can be set (the runner owns the pod's containers)"
        raise SpecError(path / "name", f"{problem}: name it pulumi or remove it")
    container = closed_object(raw, path, CONTAINER_FIELDS, REFUSED_CONTAINER_FIELDS)
    mounts = read_mounts(container, path, volumes)
    return container_settings(container, path, env_refs) | given(volumeMounts=mounts)
