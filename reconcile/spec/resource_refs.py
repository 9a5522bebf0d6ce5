"""``ResourceRef`` fields (``envRefs``, ``secretsRef``, ``gitAuth``): where a value comes from.

Role: parse PKO's ``{type: Secret|Literal, secret: {name, key}, literal: {value}}`` refs and
``spec.gitAuth``. Secret values are never read here (``reconcile.refs`` does that).

Refused on purpose: ``type: Env`` and ``type: FS`` (they read the operator's own
environment and filesystem), a Secret in another namespace, a selector that does not go with
the type, names and keys Kubernetes would not accept. Every ``gitAuth`` method given is
validated; the one kept follows PKO's precedence ssh > token > basic.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from controller.names import is_dns_subdomain
from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    KeyCheck,
    is_set,
    kind_of,
    read_map,
    read_object,
    read_string,
    required_string,
)
from reconcile.spec.model import GitAuth, ResourceRef, SecretKeyRef, SpecError
from reconcile.spec.names import ENV_NAME_RULE, is_data_key, is_env_name

_REF_FIELDS: Final = frozenset({"type", "secret", "literal", "env", "filesystem"})
_SELECTORS: Final = MappingProxyType(
    {"Secret": "secret", "Literal": "literal", "Env": "env", "FS": "filesystem"}
)
REFUSED_REF_TYPES: Final = MappingProxyType(
    {
        "Env": "type Env reads an environment variable of the operator's own process",
        "FS": "type FS reads a file from the operator's own filesystem",
    }
)
"""PKO's ResourceRef types refused here (in every ref: envRefs, secretsRef, gitAuth), and why."""


def read_refs(
    root: Mapping[str, Any], name: str, namespace: str, check_key: KeyCheck
) -> Mapping[str, ResourceRef]:
    """``spec.<name>`` (a map of refs) of the spec ``root``, each key checked by ``check_key``.

    Raises:
        SpecError: a key ``check_key`` refuses, or a ref that is invalid or refused.
    """
    path = SPEC / name
    entries = read_map(root, SPEC, name)
    return {check_key(k, path): _ref(v, path.entry(k), namespace) for k, v in entries.items()}


def env_name(key: str, path: FieldPath) -> str:
    """``key`` of the map at ``path`` if it is an environment variable name.

    Raises:
        SpecError: on ``path[key]``, saying which characters are allowed.
    """
    if not is_env_name(key):
        raise SpecError(path.entry(key), ENV_NAME_RULE)
    return key


def read_git_auth(raw: object, path: FieldPath, namespace: str) -> GitAuth | None:
    """The credentials ``raw`` (``spec.gitAuth`` at ``path``) asks for; None when unset.

    Raises:
        SpecError: any method given is invalid, even one that would lose the precedence.
    """
    if not is_set(raw):
        return None
    auth = read_object(raw, path, frozenset({"accessToken", "sshAuth", "basicAuth", "githubApp"}))
    if is_set(auth.get("githubApp")):
        problem = (
            "GitHub App authentication is not supported by this operator: mint an installation"
            " token and reference it with gitAuth.accessToken (a Secret), or use sshAuth"
        )
        raise SpecError(path / "githubApp", problem)
    # Every method given is validated; the winner follows PKO's precedence ssh > token > basic.
    ssh = _ssh_auth(auth.get("sshAuth"), path / "sshAuth", namespace)
    token = _optional_ref(auth, path, "accessToken", namespace)
    basic = _basic_auth(auth.get("basicAuth"), path / "basicAuth", namespace)
    if ssh is not None:
        return ssh
    if token is not None:
        return GitAuth(access_token=token)
    return basic


def _ssh_auth(raw: object, path: FieldPath, namespace: str) -> GitAuth | None:
    if not is_set(raw):
        return None
    ssh = read_object(raw, path, frozenset({"sshPrivateKey", "password"}))
    key = _required_ref(ssh, path, "sshPrivateKey", namespace)
    return GitAuth(
        ssh_private_key=key, ssh_password=_optional_ref(ssh, path, "password", namespace)
    )


def _basic_auth(raw: object, path: FieldPath, namespace: str) -> GitAuth | None:
    if not is_set(raw):
        return None
    basic = read_object(raw, path, frozenset({"userName", "password"}))
    username = _required_ref(basic, path, "userName", namespace)
    return GitAuth(username=username, password=_required_ref(basic, path, "password", namespace))


def _required_ref(obj: Mapping[str, Any], path: FieldPath, key: str, namespace: str) -> ResourceRef:
    ref = _optional_ref(obj, path, key, namespace)
    if ref is None:
        raise SpecError(path / key, "is required: set a ResourceRef (type: Secret)")
    return ref


def _optional_ref(
    obj: Mapping[str, Any], path: FieldPath, key: str, namespace: str
) -> ResourceRef | None:
    raw = obj.get(key)
    return _ref(raw, path / key, namespace) if is_set(raw) else None


def _ref(raw: object, path: FieldPath, namespace: str) -> ResourceRef:
    ref = read_object(raw, path, _REF_FIELDS)
    kind = required_string(ref, path, "type")
    if kind in REFUSED_REF_TYPES:
        why = REFUSED_REF_TYPES[kind]
        problem = f"{why} and is refused: put the value in a Secret, use type: Secret"
        raise SpecError(path / "type", problem)
    if kind not in _SELECTORS:
        raise SpecError(path / "type", f"unknown type {kind!r}: use Secret or Literal")
    for other in sorted(set(_SELECTORS.values()) - {_SELECTORS[kind]}):
        if is_set(ref.get(other)):
            raise SpecError(path / other, f"does not go with type {kind}: remove it")
    if kind == "Literal":
        return ResourceRef(literal=_literal(ref.get("literal"), path / "literal"))
    return ResourceRef(secret=_secret_key_ref(ref.get("secret"), path / "secret", namespace))


def _literal(raw: object, path: FieldPath) -> str:
    if raw is None:
        raise SpecError(path, "is required for type Literal: set literal.value")
    literal = read_object(raw, path, frozenset({"value"}))
    value = literal.get("value")
    if not isinstance(value, str):
        raise SpecError(path / "value", f"must be a string, not {kind_of(value)}")
    return value


def _secret_key_ref(raw: object, path: FieldPath, namespace: str) -> SecretKeyRef:
    if raw is None:
        raise SpecError(path, "is required for type Secret: set secret.name and secret.key")
    secret = read_object(raw, path, frozenset({"name", "key", "namespace"}))
    name = required_string(secret, path, "name")
    key = required_string(secret, path, "key")
    other = read_string(secret, path, "namespace")
    if other is not None and other != namespace:
        problem = (
            f"cross-namespace references are refused: copy the Secret into namespace"
            f" {namespace!r} and remove secret.namespace"
        )
        raise SpecError(path / "namespace", problem)
    if not is_dns_subdomain(name):
        raise SpecError(path / "name", f"{name!r} is not a Secret name (a DNS subdomain)")
    if not is_data_key(key):
        raise SpecError(path / "key", f"{key!r} is not a Secret key (letters, digits, -, _, .)")
    return SecretKeyRef(name, key)
