"""Names and keys in a Stack spec: object names, label keys and values, data keys, variables.

Role: the one place that knows the naming rules a spec value must follow (DNS subdomains,
qualified keys, label values, Secret and ConfigMap data keys, environment variable names)
and refuses a value that breaks them with a ``SpecError`` naming the field and the rule.
The DNS-1123 label and subdomain rules themselves are defined once, in ``controller.names``.
Each reader returns the value as given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from controller.names import DNS_SUBDOMAIN_MAX, is_dns_subdomain
from reconcile.spec.fields import FieldPath, kind_of, read_map
from reconcile.spec.model import SpecError

_MAX_NAME_PART: Final = 63  # a qualified key's name part
_MAX_LABEL_VALUE: Final = 63
_NAME_PART: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DATA_KEY: Final = re.compile(r"[-._a-zA-Z0-9]+")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

ENV_NAME_RULE: Final = (
    "not an environment variable name: use letters, digits and _ (no leading digit)"
)
"""The problem a ``SpecError`` states for a name that fails ``is_env_name``."""


def is_data_key(key: str) -> bool:
    """Whether ``key`` may key a Secret's or ConfigMap's data: at most 253 of ``-._a-zA-Z0-9``.

    Laxer than the apiserver, which also refuses ``.``, ``..`` and a leading ``..``.
    """
    return len(key) <= DNS_SUBDOMAIN_MAX and _DATA_KEY.fullmatch(key) is not None


def is_env_name(name: str) -> bool:
    """Whether ``name`` is a POSIX environment variable name: ``[A-Za-z_][A-Za-z0-9_]*``.

    Stricter than Kubernetes, which also allows ``-`` and ``.``.
    """
    return _ENV_NAME.fullmatch(name) is not None


def subdomain(name: str, path: FieldPath, kind: str) -> str:
    """``name`` if it can name a ``kind`` (a DNS subdomain: lowercase, digits, -, .)."""
    if not is_dns_subdomain(name):
        problem = f"{name!r} is not a {kind} name: use a DNS subdomain (lowercase, digits, -, .)"
        raise SpecError(path, problem)
    return name


def qualified_name(name: str, path: FieldPath) -> str:
    """``name`` if it is a Kubernetes key: ``[prefix/]name``, prefix a DNS subdomain."""
    prefix, _, rest = name.rpartition("/")
    valid_prefix = not prefix or is_dns_subdomain(prefix)
    if not valid_prefix or len(rest) > _MAX_NAME_PART or not _NAME_PART.fullmatch(rest):
        problem = "not a Kubernetes key: [DNS-subdomain/]name, name at most 63 letters, digits, -_."
        raise SpecError(path, problem)
    return name


def string_map(obj: Mapping[str, Any], path: FieldPath, key: str) -> dict[str, str]:
    """``obj[key]`` as a map of strings to strings; absent or null is empty."""
    entries = read_map(obj, path, key)
    for name, value in entries.items():
        if not isinstance(value, str):
            raise SpecError((path / key).entry(name), f"must be a string, not {kind_of(value)}")
    return {str(name): value for name, value in entries.items()}


def labels(obj: Mapping[str, Any], path: FieldPath, key: str) -> dict[str, str]:
    """``obj[key]`` as Kubernetes labels (qualified-name keys, label values)."""
    found = string_map(obj, path, key)
    for name, value in found.items():
        entry = (path / key).entry(name)
        qualified_name(name, entry)
        if len(value) > _MAX_LABEL_VALUE or not _LABEL_VALUE.fullmatch(value):
            problem = f"{value!r} is not a label value: at most 63 letters, digits, -, _ or ."
            raise SpecError(entry, problem)
    return found
