"""Readers of the ``workspaceTemplate``'s raw fields, for the modules that parse it.

Role: what ``reconcile.spec.workspace`` and ``reconcile.spec.volumes`` share to read a pod
template's parts: closed objects that refuse any other key, saying why and listing the
supported ones; lists read with each item's path; enums; optional booleans; and parts of
Kubernetes' own types passed through as plain JSON. ``given`` and ``given_bool`` build the
pod overrides, leaving out what is unset.

Guarantees: as ``reconcile.spec.fields``: plain and read-only (cached) input read the same,
nothing is mutated, and every error is a ``SpecError`` on the path of the offending value.
A part passed through is a deep copy made of plain ``dict``, ``list`` and JSON scalars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TypeVar

from reconcile.spec.fields import FieldPath, is_set, kind_of, read_list, read_string
from reconcile.spec.model import SpecError

_Choice = TypeVar("_Choice", bound=str)
_NO_HINTS: Final[Mapping[str, str]] = MappingProxyType({})


def closed_object(
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


def optional_closed_object(
    obj: Mapping[str, Any],
    path: FieldPath,
    key: str,
    allowed: frozenset[str],
    hints: Mapping[str, str] = _NO_HINTS,
) -> Mapping[str, Any]:
    """``obj[key]`` read by ``closed_object``; absent or null is empty."""
    value = obj.get(key)
    return {} if value is None else closed_object(value, path / key, allowed, hints)


def read_items(obj: Mapping[str, Any], path: FieldPath, key: str) -> list[tuple[FieldPath, object]]:
    """``obj[key]`` as (path, item) pairs; absent or null is empty."""
    return [((path / key).entry(i), item) for i, item in enumerate(read_list(obj, path, key))]


def plain_object(value: object, path: FieldPath) -> dict[str, object]:
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


def _plain(value: object, path: FieldPath) -> object:
    """A deep copy of ``value`` as plain JSON (dict, list, str, finite number, bool, null).

    Raises:
        SpecError: on the first part that is not JSON.
    """
    if isinstance(value, Mapping):
        return plain_object(value, path)
    if isinstance(value, list | tuple):
        return [_plain(item, path.entry(i)) for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(path, "must be a finite number")
    if value is None or isinstance(value, str | int | float):
        return value
    raise SpecError(path, f"must be JSON, not {kind_of(value)}")


def read_choice(
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


def given(**parts: object) -> dict[str, Any]:
    """``parts`` without the unset ones (None, empty)."""
    return {key: value for key, value in parts.items() if is_set(value)}


def given_bool(obj: Mapping[str, Any], path: FieldPath, key: str) -> dict[str, bool]:
    """``{key: obj[key]}`` when it is set (a boolean kept as given), else empty."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, bool):
        raise SpecError(path / key, f"must be true or false, not {kind_of(value)}")
    return {key: value}
