"""Kubernetes names and keys in a Stack spec: object names, label keys and values.

Role: the one place that knows Kubernetes' naming rules (DNS labels and subdomains,
qualified keys, label values) and refuses a value that breaks them with a ``SpecError``
naming the field and the rule. Each reader returns the value as given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from reconcile.spec.fields import FieldPath, kind_of, read_map
from reconcile.spec.model import SpecError

_LABEL_PATTERN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL: Final = re.compile(_LABEL_PATTERN)
DNS_SUBDOMAIN: Final = re.compile(rf"{_LABEL_PATTERN}(\.{_LABEL_PATTERN})*")
MAX_SUBDOMAIN: Final = 253
MAX_LABEL: Final = 63
_NAME_PART: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def is_subdomain(name: str) -> bool:
    """Whether ``name`` is a DNS subdomain (most object names: lowercase, digits, -, .)."""
    return len(name) <= MAX_SUBDOMAIN and DNS_SUBDOMAIN.fullmatch(name) is not None


def subdomain(name: str, path: FieldPath, kind: str) -> str:
    """``name`` if it can name a ``kind`` (a DNS subdomain: lowercase, digits, -, .)."""
    if not is_subdomain(name):
        problem = f"{name!r} is not a {kind} name: use a DNS subdomain (lowercase, digits, -, .)"
        raise SpecError(path, problem)
    return name


def qualified_name(name: str, path: FieldPath) -> str:
    """``name`` if it is a Kubernetes key: ``[prefix/]name``, prefix a DNS subdomain."""
    prefix, _, rest = name.rpartition("/")
    valid_prefix = not prefix or is_subdomain(prefix)
    if not valid_prefix or len(rest) > MAX_LABEL or not _NAME_PART.fullmatch(rest):
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
        if len(value) > MAX_LABEL or not _LABEL_VALUE.fullmatch(value):
            problem = f"{value!r} is not a label value: at most 63 letters, digits, -, _ or ."
            raise SpecError(entry, problem)
    return found
