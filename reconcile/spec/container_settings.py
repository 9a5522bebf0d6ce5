"""A container's image, resources, env and envFrom, as ``workspaceTemplate`` gives them.

Role: read the settings the run container (``workspaceTemplate.spec`` and its ``pulumi``
container) and a Stack's own init containers share: ``read_image`` (a reference without
whitespace) and ``container_settings`` (``resources`` as ``{requests, limits}`` of
Kubernetes quantities; ``env`` with exactly one of ``value``, ``valueFrom``; ``envFrom``
of a Secret or ConfigMap), each present only when given. Names the runner sets itself
(``PSO_*``, ``HOME``, ``PULUMI_HOME``, ``TMPDIR``) are refused, as is a name
``spec.envRefs`` sets too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from reconcile.spec.fields import FieldPath, kind_of, read_map, read_string, required_string
from reconcile.spec.model import SpecError
from reconcile.spec.names import ENV_NAME_RULE, is_data_key, is_env_name, qualified_name, subdomain
from reconcile.spec.template_fields import (
    closed_object,
    given,
    given_bool,
    optional_closed_object,
    read_items,
)

_QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([numkMGTPE]|[KMGTPE]i|[eE][-+]?[0-9]+)?")
_RESERVED_ENV: Final = frozenset({"HOME", "PULUMI_HOME", "TMPDIR"})
_RESERVED_ENV_PREFIX: Final = "PSO_"
_RESOURCES_FIELDS: Final = frozenset({"requests", "limits"})
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


def read_image(spec: Mapping[str, Any], path: FieldPath) -> str | None:
    """``spec.image`` (no whitespace); None when unset."""
    image = read_string(spec, path, "image")
    if image is not None and any(c.isspace() for c in image):
        raise SpecError(path / "image", "must be an image reference without whitespace")
    return image


def container_settings(
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
