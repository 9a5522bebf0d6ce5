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
  ``spec.podTemplate.spec``; ``volumeMounts``: the ``pulumi`` container's.

Refused on purpose: labels and annotations read as policy (``reconcile.spec.pod_metadata``:
AppArmor, seccomp, service meshes, runtimes...); volumes and mounts that would weaken the run
pod or take the runner's (``reconcile.spec.volumes``: ``hostPath``, ``/workspace``...); and
whatever else would weaken the run pod or fight the runner: host namespaces, security
contexts, init or extra containers, the ``pulumi`` container's command, args, image and
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

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from controller.names import is_dns_label
from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    is_set,
    kind_of,
    read_map,
    read_string,
    required_string,
)
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
    ENV_NAME_RULE,
    is_data_key,
    is_env_name,
    labels,
    qualified_name,
    subdomain,
)
from reconcile.spec.pod_metadata import read_pod_metadata
from reconcile.spec.template_fields import (
    closed_object,
    given,
    given_bool,
    optional_closed_object,
    plain_object,
    read_choice,
    read_items,
)
from reconcile.spec.volumes import read_mounts, read_volumes
from workspace.runner.envfile import SHARE_VOLUME

_TEMPLATE: Final = SPEC / "workspaceTemplate"

_QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([numkMGTPE]|[KMGTPE]i|[eE][-+]?[0-9]+)?")

_RESERVED_ENV: Final = frozenset({"HOME", "PULUMI_HOME", "TMPDIR"})
_RESERVED_ENV_PREFIX: Final = "PSO_"

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
_RESOURCES_FIELDS: Final = frozenset({"requests", "limits"})
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
INIT_CONTAINER_FIELDS: Final = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "env",
        "envFrom",
        "volumeMounts",
        "resources",
    }
)
"""The keys of a Stack's own init container read here; any other is refused."""
REFUSED_INIT_CONTAINER_FIELDS: Final = MappingProxyType(
    {
        "securityContext": (
            "refused: the runner gives init containers the run container's security context"
        ),
        "restartPolicy": "refused: a run pod has no sidecars (an init container runs to its end)",
    }
)
"""Keys of an init container refused with a reason of their own (others: unknown)."""
_RUNNER_CONTAINERS: Final = frozenset({"pulumi", "checkout"})
_TOLERATION_FIELDS: Final = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_AFFINITY_FIELDS: Final = frozenset({"nodeAffinity", "podAffinity", "podAntiAffinity"})
_ENV_FIELDS: Final = frozenset({"name", "value", "valueFrom"})
_KEY_REF_FIELDS: Final = frozenset({"name", "key", "optional"})
_VALUE_SOURCES: Final = MappingProxyType(
    {
        "secretKeyRef": "Secret",
        "configMapKeyRef": "ConfigMap",
        "fieldRef": "",
        "resourceFieldRef": "",
    }
)
_ENV_FROM_SOURCES: Final = MappingProxyType({"secretRef": "Secret", "configMapRef": "ConfigMap"})
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
        _merge(read_pod_metadata(template, _TEMPLATE), _container_settings(spec, path, env_refs)),
        _pod_template(spec, path, env_refs),
    )
    return Workspace(
        security_profile=read_choice(spec, path, "securityProfile", SECURITY_PROFILES)
        or SECURITY_PROFILES[0],
        image=_image(spec, path),
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


def _image(spec: Mapping[str, Any], path: FieldPath) -> str | None:
    """``spec.image`` (no whitespace); None when unset."""
    image = read_string(spec, path, "image")
    if image is not None and any(c.isspace() for c in image):
        raise SpecError(path / "image", "must be an image reference without whitespace")
    return image


# -- the pulumi container's settings: resources, env, envFrom --------------------------------


def _container_settings(
    obj: Mapping[str, Any], path: FieldPath, env_refs: frozenset[str]
) -> dict[str, Any]:
    """``obj``'s resources, env and envFrom (workspace spec or pulumi container), as overrides.

    ``env_refs`` are the names ``spec.envRefs`` sets, which ``env`` must not set again.
    """
    return given(
        resources=_resources(obj, path),
        env=[_env_var(item, at, env_refs) for at, item in read_items(obj, path, "env")],
        envFrom=[
            _env_from(item, item_path) for item_path, item in read_items(obj, path, "envFrom")
        ],
    )


def _resources(obj: Mapping[str, Any], path: FieldPath) -> dict[str, Any]:
    """``obj.resources`` as ``{requests, limits}``, each present only when set."""
    resources = optional_closed_object(obj, path, "resources", _RESOURCES_FIELDS)
    res_path = path / "resources"
    return given(**{kind: _quantities(resources, res_path, kind) for kind in _RESOURCES_FIELDS})


def _quantities(obj: Mapping[str, Any], path: FieldPath, key: str) -> dict[str, str | int | float]:
    """``obj[key]`` as a map of resource names (``cpu``, ``nvidia.com/gpu``) to quantities."""
    at = path / key
    return {
        qualified_name(str(name), at.entry(name)): _quantity(value, at.entry(name))
        for name, value in read_map(obj, path, key).items()
    }


def _quantity(value: object, path: FieldPath) -> str | int | float:
    """``value`` if it is a non-negative Kubernetes quantity ("500m", "1Gi", 2), as given."""
    if isinstance(value, str) and _QUANTITY.fullmatch(value):
        return value
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        return value
    problem = f'{value!r} is not a quantity: use e.g. "500m", "1Gi" or a non-negative number'
    raise SpecError(path, problem)


def _env_name(name: str, path: FieldPath) -> str:
    """``name`` if it is a variable name (or prefix) the runner leaves to the Stack."""
    if not is_env_name(name):
        raise SpecError(path, ENV_NAME_RULE)
    if name.startswith(_RESERVED_ENV_PREFIX) or name in _RESERVED_ENV:
        problem = "reserved for the runner (PSO_*, HOME, PULUMI_HOME, TMPDIR): use another name"
        raise SpecError(path, problem)
    return name


def _env_var(raw: object, path: FieldPath, env_refs: frozenset[str]) -> dict[str, Any]:
    """An EnvVar: a name not in ``env_refs`` with exactly one of value ("" allowed), valueFrom."""
    var = closed_object(raw, path, _ENV_FIELDS)
    name = _env_name(required_string(var, path, "name"), path / "name")
    if name in env_refs:
        problem = f"{name} is set by spec.envRefs too: set it in one place"
        raise SpecError(path / "name", problem)
    value, source = var.get("value"), var.get("valueFrom")
    if value is None and source is None:
        raise SpecError(path, "set value (a string) or valueFrom")
    if value is not None and source is not None:
        raise SpecError(path / "valueFrom", "value and valueFrom are exclusive: set only one")
    if source is not None:
        return {"name": name, "valueFrom": _value_from(source, path / "valueFrom")}
    if not isinstance(value, str):
        raise SpecError(path / "value", f"must be a string, not {kind_of(value)}")
    return {"name": name, "value": value}


def _one_of(obj: Mapping[str, Any], path: FieldPath, choices: Mapping[str, str]) -> str:
    """The one key of ``choices`` set in ``obj`` (an object read at ``path``)."""
    chosen = [key for key in choices if obj.get(key) is not None]
    if len(chosen) != 1:
        names = ", ".join(choices)
        where = path if not chosen else path / chosen[1]
        raise SpecError(where, f"set exactly one of {names}")
    return chosen[0]


def _value_from(raw: object, path: FieldPath) -> dict[str, Any]:
    """An EnvVarSource: exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef."""
    source = closed_object(raw, path, frozenset(_VALUE_SOURCES))
    kind = _one_of(source, path, _VALUE_SOURCES)
    kind_path = path / kind
    if kind == "fieldRef":
        ref = closed_object(source[kind], kind_path, frozenset({"fieldPath", "apiVersion"}))
        value = given(
            fieldPath=required_string(ref, kind_path, "fieldPath"),
            apiVersion=read_string(ref, kind_path, "apiVersion"),
        )
    elif kind == "resourceFieldRef":
        value = _resource_field_ref(source[kind], kind_path)
    else:
        value = _key_ref(source[kind], kind_path, _VALUE_SOURCES[kind])
    return {kind: value}


def _key_ref(raw: object, path: FieldPath, kind: str) -> dict[str, Any]:
    """A ``secretKeyRef`` or ``configMapKeyRef``: a key of a ``kind`` in the namespace."""
    ref = closed_object(raw, path, _KEY_REF_FIELDS)
    name = subdomain(required_string(ref, path, "name"), path / "name", kind)
    key = required_string(ref, path, "key")
    if not is_data_key(key):
        raise SpecError(path / "key", f"{key!r} is not a {kind} key (letters, digits, -, _, .)")
    return {"name": name, "key": key, **given_bool(ref, path, "optional")}


def _resource_field_ref(raw: object, path: FieldPath) -> dict[str, Any]:
    """A ResourceFieldSelector: resource, optional containerName and divisor (a quantity)."""
    ref = closed_object(raw, path, frozenset({"resource", "containerName", "divisor"}))
    divisor = ref.get("divisor")
    return given(
        resource=required_string(ref, path, "resource"),
        containerName=read_string(ref, path, "containerName"),
        divisor=None if divisor is None else _quantity(divisor, path / "divisor"),
    )


def _env_from(raw: object, path: FieldPath) -> dict[str, Any]:
    """An EnvFromSource: exactly one of secretRef, configMapRef; an optional prefix."""
    source = closed_object(raw, path, frozenset({"prefix", *_ENV_FROM_SOURCES}))
    kind = _one_of(source, path, _ENV_FROM_SOURCES)
    ref = closed_object(source[kind], path / kind, frozenset({"name", "optional"}))
    name = required_string(ref, path / kind, "name")
    subdomain(name, path / kind / "name", _ENV_FROM_SOURCES[kind])
    prefix = read_string(source, path, "prefix")
    if prefix is not None:
        _env_name(prefix, path / "prefix")
    body = {"name": name, **given_bool(ref, path / kind, "optional")}
    return given(prefix=prefix) | {kind: body}


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
    inits = given(initContainers=_init_containers(pod, pod_path, names | {SHARE_VOLUME}))
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
    return _container_settings(container, path, env_refs) | given(volumeMounts=mounts)


# -- the Stack's own init containers ---------------------------------------------------------


def _init_containers(
    pod: Mapping[str, Any], path: FieldPath, volumes: frozenset[str]
) -> list[dict[str, Any]]:
    """``pod.initContainers``: each named once, none with a name of the runner's."""
    made = [
        _init_container(item, at, volumes) for at, item in read_items(pod, path, "initContainers")
    ]
    names = [container["name"] for container in made]
    for index, name in enumerate(names):
        if name in names[:index]:
            where = (path / "initContainers").entry(index) / "name"
            raise SpecError(where, f"{name!r} is the name of another init container: rename it")
    return made


def _init_container(raw: object, path: FieldPath, volumes: frozenset[str]) -> dict[str, Any]:
    """One init container: the Stack's image and command, mounts of ``volumes`` (and share).

    It runs before the run with the run container's security context, the runner's
    (``workspace.runner.podspec``); it may append ``NAME=value`` lines to ``$PULUMI_ENV``.
    """
    container = closed_object(raw, path, INIT_CONTAINER_FIELDS, REFUSED_INIT_CONTAINER_FIELDS)
    name = required_string(container, path, "name")
    if not is_dns_label(name) or name in _RUNNER_CONTAINERS:
        problem = f"{name!r}: name it with a DNS label other than the runner's pulumi and checkout"
        raise SpecError(path / "name", problem)
    image = _image(container, path)
    if image is None:
        raise SpecError(path / "image", "required: the image the init container runs")
    command = given(
        command=_strings(container, path, "command"),
        args=_strings(container, path, "args"),
        workingDir=read_string(container, path, "workingDir"),
        imagePullPolicy=read_choice(container, path, "imagePullPolicy", PULL_POLICIES),
        volumeMounts=read_mounts(container, path, volumes),
    )
    settings = _container_settings(container, path, frozenset())
    return {"name": name, "image": image, **command, **settings}


def _strings(obj: Mapping[str, Any], path: FieldPath, key: str) -> list[str]:
    """``obj[key]`` as a list of strings (a command, its args); empty when unset."""
    return [_string(item, at) for at, item in read_items(obj, path, key)]


def _string(value: object, path: FieldPath) -> str:
    if not isinstance(value, str):
        raise SpecError(path, f"must be a string, not {kind_of(value)}")
    return value
