"""``serviceAccountName`` and ``workspaceTemplate``: who a run pod runs as, and how it is built.

Role: parse PKO v2's ``spec.serviceAccountName`` and the subset of ``spec.workspaceTemplate``
the pod runner applies into a ``Workspace``: the image, its pull policy, the Pod Security
Standard, and the pod overrides, a JSON object with exactly these keys, each present only
when given (empty means unset):

- ``labels``, ``annotations``: ``workspaceTemplate.metadata``, then ``spec.podTemplate.metadata``
  (which wins a clash);
- ``resources``: ``{requests, limits}`` of ``spec.resources``, then of the ``pulumi``
  container (which wins a clash, per resource); quantities are kept as given;
- ``env``, ``envFrom``: ``spec.env`` (``spec.envFrom``), then the ``pulumi`` container's;
- ``nodeSelector``, ``tolerations``, ``affinity``, ``priorityClassName``, ``volumes``: from
  ``spec.podTemplate.spec``; ``volumeMounts``: the ``pulumi`` container's.

Refused on purpose: labels and annotations read as policy (``reconcile.spec.pod_metadata``:
AppArmor, seccomp, service meshes, runtimes...); whatever would weaken the run pod or fight
the runner: host namespaces,
security contexts, init or extra containers, the ``pulumi`` container's command, args, image
and securityContext, a ServiceAccount in the pod template (use ``spec.serviceAccountName``),
volume types the restricted/baseline Pod Security Standard forbids (``hostPath``...), the
runner's volumes (``workspace``, ``tmp``, ``pulumi-cache``), mount paths (``/``,
``/workspace``, ``/tmp``, ``/pulumi-cache`` and below) and variables (``PSO_*``, ``HOME``,
``PULUMI_HOME``). An unknown key is refused at every level, and the message lists the
supported ones. An env ``value`` may be "" (an
explicitly empty variable); elsewhere empty means unset.

Left to others: the operator's tenancy rules (``reconcile.tenancy``: which priority classes,
tolerations and ServiceAccounts its flags allow); the pod runner builds and runs the pod; the
local runner ignores both fields; the apiserver checks what only it knows (quotas...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar

from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    is_set,
    kind_of,
    read_list,
    read_map,
    read_string,
    required_string,
)
from reconcile.spec.model import (
    DEFAULT_SERVICE_ACCOUNT,
    PULL_POLICIES,
    SECURITY_PROFILES,
    SpecError,
    Workspace,
    canonical_json,
)
from reconcile.spec.names import (
    DNS_LABEL,
    MAX_LABEL,
    MAX_SUBDOMAIN,
    labels,
    qualified_name,
    subdomain,
)
from reconcile.spec.pod_metadata import read_pod_metadata

_TEMPLATE: Final = SPEC / "workspaceTemplate"

_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([numkMGTPE]|[KMGTPE]i|[eE][-+]?[0-9]+)?")
_Choice = TypeVar("_Choice", bound=str)

_RESERVED_ENV: Final = frozenset({"HOME", "PULUMI_HOME", "TMPDIR"})
_RESERVED_ENV_PREFIX: Final = "PSO_"
_RUNNER_VOLUMES: Final = ("workspace", "tmp", "pulumi-cache")  # each mounted at /<name>
_RESERVED_VOLUMES: Final = frozenset(_RUNNER_VOLUMES)
_RESERVED_MOUNTS: Final = frozenset(_RUNNER_VOLUMES)  # first components under /

_NO_HINTS: Final[Mapping[str, str]] = MappingProxyType({})
_POD_SECURITY: Final = "refused: the runner owns the run pod's security"
_CONTAINER_OWNED: Final = (
    "refused: the runner owns the pulumi container's command, args, image and securityContext"
)

_TEMPLATE_FIELDS: Final = frozenset({"metadata", "spec"})
_WORKSPACE_FIELDS: Final = frozenset(
    {"image", "imagePullPolicy", "securityProfile", "resources", "env", "envFrom", "podTemplate"}
)
_WORKSPACE_HINTS: Final = MappingProxyType(
    {"serviceAccountName": "refused here: set spec.serviceAccountName instead"}
)
_RESOURCES_FIELDS: Final = frozenset({"requests", "limits"})
_POD_FIELDS: Final = frozenset(
    {"nodeSelector", "tolerations", "affinity", "priorityClassName", "volumes", "containers"}
)
_POD_HINTS: Final = MappingProxyType(
    {
        **dict.fromkeys(
            (
                "securityContext",
                "hostNetwork",
                "hostPID",
                "hostIPC",
                "hostUsers",
                "shareProcessNamespace",
                "initContainers",
                "ephemeralContainers",
                "automountServiceAccountToken",
            ),
            _POD_SECURITY,
        ),
        "serviceAccountName": "refused here: set spec.serviceAccountName instead",
        "serviceAccount": "refused here: set spec.serviceAccountName instead",
    }
)
_CONTAINER_FIELDS: Final = frozenset({"name", "volumeMounts", "env", "envFrom", "resources"})
_CONTAINER_HINTS: Final = MappingProxyType(
    {
        **dict.fromkeys(("command", "args", "securityContext", "workingDir"), _CONTAINER_OWNED),
        "image": f"{_CONTAINER_OWNED}: set spec.workspaceTemplate.spec.image",
        "imagePullPolicy": f"{_CONTAINER_OWNED}: set spec.workspaceTemplate.spec.imagePullPolicy",
    }
)
_TOLERATION_FIELDS: Final = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_AFFINITY_FIELDS: Final = frozenset({"nodeAffinity", "podAffinity", "podAntiAffinity"})
_VOLUME_TYPES: Final = frozenset(
    {
        "emptyDir",
        "configMap",
        "secret",
        "persistentVolumeClaim",
        "projected",
        "downwardAPI",
        "csi",
        "ephemeral",
    }
)
_VOLUME_REFUSED: Final = (
    "refused: the run pod must satisfy the restricted/baseline Pod Security Standard;"
    " use a persistentVolumeClaim"
)
_VOLUME_REFS: Final = MappingProxyType(
    {"secret": ("secretName", "Secret"), "configMap": ("name", "ConfigMap")}
)
_MOUNT_FIELDS: Final = frozenset({"name", "mountPath", "readOnly", "subPath"})
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


def read_service_account_name(root: Mapping[str, Any]) -> str:
    """``spec.serviceAccountName`` of the spec ``root``; ``default`` when unset.

    Raises:
        SpecError: the name is not a ServiceAccount name (a DNS subdomain).
    """
    name = read_string(root, SPEC, "serviceAccountName")
    if name is None:
        return DEFAULT_SERVICE_ACCOUNT
    return subdomain(name, SPEC / "serviceAccountName", "ServiceAccount")


def read_workspace(root: Mapping[str, Any]) -> Workspace:
    """``spec.workspaceTemplate`` of the spec ``root``; ``Workspace()`` when unset.

    Raises:
        SpecError: a key outside the supported subset, a refused one, or a wrong value.
    """
    raw = root.get("workspaceTemplate")
    if not is_set(raw):
        return Workspace()
    template = _object(raw, _TEMPLATE, _TEMPLATE_FIELDS)
    path = _TEMPLATE / "spec"
    spec = _optional_object(template, _TEMPLATE, "spec", _WORKSPACE_FIELDS, _WORKSPACE_HINTS)
    env_refs = frozenset(str(name) for name in read_map(root, SPEC, "envRefs"))
    overrides = _merge(
        _merge(read_pod_metadata(template, _TEMPLATE), _container_settings(spec, path, env_refs)),
        _pod_template(spec, path, env_refs),
    )
    return Workspace(
        security_profile=_choice(spec, path, "securityProfile", SECURITY_PROFILES)
        or SECURITY_PROFILES[0],
        image=_image(spec, path),
        image_pull_policy=_choice(spec, path, "imagePullPolicy", PULL_POLICIES),
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


def _given(**parts: object) -> dict[str, Any]:
    """``parts`` without the unset ones (None, empty)."""
    return {key: value for key, value in parts.items() if is_set(value)}


# -- readers ---------------------------------------------------------------------------------


def _object(
    value: object,
    path: FieldPath,
    allowed: frozenset[str],
    hints: Mapping[str, str] = _NO_HINTS,
    refusal: str = "unknown field",
) -> Mapping[str, Any]:
    """``value`` as an object whose keys are in ``allowed``.

    Raises:
        SpecError: on ``path`` when not an object; on ``path.<key>`` for another key, with its
            hint (else ``refusal``) and the supported keys.
    """
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object, not {kind_of(value)}")
    for key in value:
        if key not in allowed:
            why = hints.get(str(key), refusal)
            problem = f"{why}; remove it (supported: {', '.join(sorted(allowed))})"
            raise SpecError(path / str(key), problem)
    return value


def _optional_object(
    obj: Mapping[str, Any],
    path: FieldPath,
    key: str,
    allowed: frozenset[str],
    hints: Mapping[str, str] = _NO_HINTS,
) -> Mapping[str, Any]:
    """``obj[key]`` read by ``_object``; absent or null is empty."""
    value = obj.get(key)
    return {} if value is None else _object(value, path / key, allowed, hints)


def _list(obj: Mapping[str, Any], path: FieldPath, key: str) -> list[tuple[FieldPath, object]]:
    """``obj[key]`` as (path, item) pairs; absent or null is empty."""
    return [((path / key).entry(i), item) for i, item in enumerate(read_list(obj, path, key))]


def _plain(value: object, path: FieldPath) -> object:
    """A deep copy of ``value`` as plain JSON (dict, list, str, finite number, bool, null).

    Raises:
        SpecError: on the first part that is not JSON.
    """
    if isinstance(value, Mapping):
        return _plain_object(value, path)
    if isinstance(value, list | tuple):
        return [_plain(item, path.entry(i)) for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(path, "must be a finite number")
    if value is None or isinstance(value, str | int | float):
        return value
    raise SpecError(path, f"must be JSON, not {kind_of(value)}")


def _plain_object(value: object, path: FieldPath) -> dict[str, object]:
    """``value`` as a plain JSON object (a deep copy), its contents passed through unchecked.

    Raises:
        SpecError: ``value`` is not an object, or holds something that is not JSON.
    """
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object, not {kind_of(value)}")
    for key in value:
        if not isinstance(key, str):
            raise SpecError(path, f"keys must be strings, not {kind_of(key)}")
    return {key: _plain(item, path / key) for key, item in value.items()}


def _choice(
    obj: Mapping[str, Any], path: FieldPath, key: str, choices: Sequence[_Choice]
) -> _Choice | None:
    """``obj[key]`` if it is one of ``choices``; absent, null or "" is None."""
    value = read_string(obj, path, key)
    if value is None:
        return None
    for choice in choices:
        if choice == value:
            return choice
    raise SpecError(path / key, f"{value!r} is not one of: {', '.join(choices)}")


def _optional_bool(obj: Mapping[str, Any], path: FieldPath, key: str) -> bool | None:
    """``obj[key]`` as a boolean kept as given; absent or null is None."""
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise SpecError(path / key, f"must be true or false, not {kind_of(value)}")
    return value


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
    return _given(
        resources=_resources(obj, path),
        env=[_env_var(item, at, env_refs) for at, item in _list(obj, path, "env")],
        envFrom=[_env_from(item, item_path) for item_path, item in _list(obj, path, "envFrom")],
    )


def _resources(obj: Mapping[str, Any], path: FieldPath) -> dict[str, Any]:
    """``obj.resources`` as ``{requests, limits}``, each present only when set."""
    resources = _optional_object(obj, path, "resources", _RESOURCES_FIELDS)
    res_path = path / "resources"
    return _given(**{kind: _quantities(resources, res_path, kind) for kind in _RESOURCES_FIELDS})


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
    if not _ENV_NAME.fullmatch(name):
        problem = "not an environment variable name: use letters, digits and _ (no leading digit)"
        raise SpecError(path, problem)
    if name.startswith(_RESERVED_ENV_PREFIX) or name in _RESERVED_ENV:
        problem = "reserved for the runner (PSO_*, HOME, PULUMI_HOME, TMPDIR): use another name"
        raise SpecError(path, problem)
    return name


def _env_var(raw: object, path: FieldPath, env_refs: frozenset[str]) -> dict[str, Any]:
    """An EnvVar: a name not in ``env_refs`` with exactly one of value ("" allowed), valueFrom."""
    var = _object(raw, path, _ENV_FIELDS)
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
    given = [key for key in choices if obj.get(key) is not None]
    if len(given) != 1:
        names = ", ".join(choices)
        where = path if not given else path / given[1]
        raise SpecError(where, f"set exactly one of {names}")
    return given[0]


def _value_from(raw: object, path: FieldPath) -> dict[str, Any]:
    """An EnvVarSource: exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef."""
    source = _object(raw, path, frozenset(_VALUE_SOURCES))
    kind = _one_of(source, path, _VALUE_SOURCES)
    kind_path = path / kind
    if kind == "fieldRef":
        ref = _object(source[kind], kind_path, frozenset({"fieldPath", "apiVersion"}))
        value = _given(
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
    ref = _object(raw, path, _KEY_REF_FIELDS)
    name = subdomain(required_string(ref, path, "name"), path / "name", kind)
    key = required_string(ref, path, "key")
    if len(key) > MAX_SUBDOMAIN or not _DATA_KEY.fullmatch(key):
        raise SpecError(path / "key", f"{key!r} is not a {kind} key (letters, digits, -, _, .)")
    return {"name": name, "key": key, **_given_bool(ref, path, "optional")}


def _given_bool(obj: Mapping[str, Any], path: FieldPath, key: str) -> dict[str, bool]:
    """``{key: obj[key]}`` when it is set (a boolean), else empty."""
    value = _optional_bool(obj, path, key)
    return {} if value is None else {key: value}


def _resource_field_ref(raw: object, path: FieldPath) -> dict[str, Any]:
    """A ResourceFieldSelector: resource, optional containerName and divisor (a quantity)."""
    ref = _object(raw, path, frozenset({"resource", "containerName", "divisor"}))
    divisor = ref.get("divisor")
    return _given(
        resource=required_string(ref, path, "resource"),
        containerName=read_string(ref, path, "containerName"),
        divisor=None if divisor is None else _quantity(divisor, path / "divisor"),
    )


def _env_from(raw: object, path: FieldPath) -> dict[str, Any]:
    """An EnvFromSource: exactly one of secretRef, configMapRef; an optional prefix."""
    source = _object(raw, path, frozenset({"prefix", *_ENV_FROM_SOURCES}))
    kind = _one_of(source, path, _ENV_FROM_SOURCES)
    ref = _object(source[kind], path / kind, frozenset({"name", "optional"}))
    name = required_string(ref, path / kind, "name")
    subdomain(name, path / kind / "name", _ENV_FROM_SOURCES[kind])
    prefix = read_string(source, path, "prefix")
    if prefix is not None:
        _env_name(prefix, path / "prefix")
    body = {"name": name, **_given_bool(ref, path / kind, "optional")}
    return _given(prefix=prefix) | {kind: body}


# -- the pod template ------------------------------------------------------------------------


def _pod_template(
    spec: Mapping[str, Any], path: FieldPath, env_refs: frozenset[str]
) -> dict[str, Any]:
    """``spec.podTemplate``'s metadata, pod settings and pulumi container, as overrides."""
    template = _optional_object(spec, path, "podTemplate", _TEMPLATE_FIELDS)
    template_path = path / "podTemplate"
    pod = _optional_object(template, template_path, "spec", _POD_FIELDS, _POD_HINTS)
    pod_path = template_path / "spec"
    volumes = _volumes(pod, pod_path)
    scheduling = _given(
        nodeSelector=labels(pod, pod_path, "nodeSelector"),
        tolerations=[_toleration(item, at) for at, item in _list(pod, pod_path, "tolerations")],
        affinity=_affinity(pod, pod_path),
        priorityClassName=_priority_class(pod, pod_path),
        volumes=volumes,
    )
    names = frozenset(volume["name"] for volume in volumes)
    container = _containers(pod, pod_path, names, env_refs)
    return {**read_pod_metadata(template, template_path), **scheduling, **container}


def _priority_class(pod: Mapping[str, Any], path: FieldPath) -> str | None:
    """``pod.priorityClassName`` (a DNS subdomain); None when unset."""
    name = read_string(pod, path, "priorityClassName")
    return None if name is None else subdomain(name, path / "priorityClassName", "PriorityClass")


def _toleration(raw: object, path: FieldPath) -> dict[str, Any]:
    """A Toleration, type-checked, without its null fields."""
    toleration = _object(raw, path, _TOLERATION_FIELDS)
    for key in ("key", "value"):
        read_string(toleration, path, key)
    for key, choices in _ENUMS.items():
        _choice(toleration, path, key, choices)
    seconds = toleration.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise SpecError(path / "tolerationSeconds", f"must be an integer, not {kind_of(seconds)}")
    return {key: value for key, value in toleration.items() if value is not None}


def _affinity(pod: Mapping[str, Any], path: FieldPath) -> dict[str, Any]:
    """``pod.affinity``: known kinds of affinity, their contents passed through."""
    affinity = _optional_object(pod, path, "affinity", _AFFINITY_FIELDS)
    return {
        key: _plain_object(value, path / "affinity" / key)
        for key, value in affinity.items()
        if value is not None
    }


def _volumes(pod: Mapping[str, Any], path: FieldPath) -> list[dict[str, Any]]:
    """``pod.volumes``, each named once."""
    volumes = [_volume(item, item_path) for item_path, item in _list(pod, path, "volumes")]
    names = [volume["name"] for volume in volumes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError((path / "volumes").entry(i) / "name", f"{name!r} is listed twice")
    return volumes


def _volume(raw: object, path: FieldPath) -> dict[str, Any]:
    """A volume: a free name and exactly one allowed type, its contents passed through."""
    volume = _object(raw, path, _VOLUME_TYPES | {"name"}, refusal=_VOLUME_REFUSED)
    name = required_string(volume, path, "name")
    if len(name) > MAX_LABEL or not DNS_LABEL.fullmatch(name):
        problem = f"{name!r} is not a volume name: use a DNS label (lowercase, digits, -)"
        raise SpecError(path / "name", problem)
    if name in _RESERVED_VOLUMES:
        reserved = ", ".join(_RUNNER_VOLUMES)
        problem = f"{name!r} is reserved by the runner ({reserved}): choose another name"
        raise SpecError(path / "name", problem)
    kinds = sorted(key for key in volume if key in _VOLUME_TYPES)
    if len(kinds) != 1:
        where = path if not kinds else path / kinds[1]
        raise SpecError(where, f"set exactly one volume type: {', '.join(sorted(_VOLUME_TYPES))}")
    [kind] = kinds
    body = _plain_object(volume[kind], path / kind)
    ref, ref_kind = _VOLUME_REFS.get(kind, ("", ""))
    ref_name = body.get(ref)
    if isinstance(ref_name, str):
        subdomain(ref_name, path / kind / ref, ref_kind)
    return {"name": name, kind: body}


def _containers(
    pod: Mapping[str, Any], path: FieldPath, volumes: frozenset[str], env_refs: frozenset[str]
) -> dict[str, Any]:
    """The pulumi container's settings and volumeMounts, as overrides."""
    items = _list(pod, path, "containers")
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
    container = _object(raw, path, _CONTAINER_FIELDS, _CONTAINER_HINTS)
    mounts = [_mount(item, at, volumes) for at, item in _list(container, path, "volumeMounts")]
    paths = [mount["mountPath"] for mount in mounts]
    for i, mount_path in enumerate(paths):
        if mount_path in paths[:i]:
            where = (path / "volumeMounts").entry(i) / "mountPath"
            raise SpecError(where, f"{mount_path!r} is mounted twice: remove one")
    return _container_settings(container, path, env_refs) | _given(volumeMounts=mounts)


def _mount(raw: object, path: FieldPath, volumes: frozenset[str]) -> dict[str, Any]:
    """A VolumeMount of one of ``volumes``, outside the runner's paths."""
    mount = _object(raw, path, _MOUNT_FIELDS)
    name = required_string(mount, path, "name")
    if name not in volumes:
        problem = f"no volume {name!r} in podTemplate.spec.volumes: declare it there"
        raise SpecError(path / "name", problem)
    sub_path = read_string(mount, path, "subPath")
    if sub_path is not None and (sub_path.startswith("/") or ".." in sub_path.split("/")):
        raise SpecError(path / "subPath", "must be relative, without .. components")
    return _given(
        name=name,
        mountPath=_mount_path(required_string(mount, path, "mountPath"), path / "mountPath"),
        subPath=sub_path,
    ) | _given_bool(mount, path, "readOnly")


def _mount_path(raw: str, path: FieldPath) -> str:
    """``raw`` normalised (no //, . or trailing /) if absolute and not the runner's."""
    parts = [part for part in raw.split("/") if part not in {"", "."}]
    if not raw.startswith("/") or ".." in parts:
        raise SpecError(path, "must be an absolute path without .. components")
    if not parts or parts[0] in _RESERVED_MOUNTS:
        *others, last = (f"/{volume}" for volume in _RUNNER_VOLUMES)
        problem = (
            f"{', '.join(others)} and {last} (and / above them) are the runner's: mount elsewhere"
        )
        raise SpecError(path, problem)
    return "/" + "/".join(parts)
