"""Readers of one field of a raw Stack spec: a typed value, or a ``SpecError`` naming it.

Role: the only code that type-checks raw spec values, with ``template_fields`` for the
``workspaceTemplate``'s closed objects and pass-through parts. ``obj`` is the mapping found at
``path``; a reader returns ``obj[key]`` in the type asked for, or raises a ``SpecError``
whose path is ``path / key`` and whose problem says what was found.

Guarantees: plain ``dict``/``list`` (from the client) and read-only ``MappingProxyType``/
``tuple`` (from the informer cache) read the same; nothing is mutated; absent, ``null`` and
empty values mean "unset", as Go's ``omitempty`` does for PKO.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from reconcile.spec.model import SpecError


class FieldPath(str):
    """A field path for error messages, built like a ``PurePath``.

    ``SPEC / "envRefs"`` is ``spec.envRefs``; ``.entry("HOME")`` then adds ``[HOME]``.
    """

    __slots__ = ()

    def __truediv__(self, name: str) -> FieldPath:
        """The path of field ``name`` of the object at this path."""
        return FieldPath(f"{self}.{name}")

    def entry(self, key: object) -> FieldPath:
        """The path of a map entry or list item."""
        return FieldPath(f"{self}[{key}]")


SPEC: Final = FieldPath("spec")
"""The root: the Stack's ``spec``."""

KeyCheck: TypeAlias = Callable[[str, FieldPath], str]
"""Validates one key of the map at a path and returns it."""


def read_object(value: object, path: FieldPath, allowed: frozenset[str]) -> Mapping[str, Any]:
    """``value`` as an object whose keys are all in ``allowed`` (errors name the first other)."""
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object, not {kind_of(value)}")
    for key in value:
        if key not in allowed:
            raise SpecError(path / str(key), "unknown field: remove it (check its spelling)")
    return value


def read_map(obj: Mapping[str, Any], path: FieldPath, key: str) -> Mapping[str, Any]:
    """``obj[key]`` as an object with any keys; absent or null is empty."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(path / key, f"must be an object, not {kind_of(value)}")
    return value


def read_list(obj: Mapping[str, Any], path: FieldPath, key: str) -> Sequence[object]:
    """``obj[key]`` as a list (or tuple); absent or null is empty."""
    value = obj.get(key)
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise SpecError(path / key, f"must be a list, not {kind_of(value)}")
    return value


def read_strings(obj: Mapping[str, Any], path: FieldPath, key: str) -> tuple[str, ...]:
    """``obj[key]`` as a tuple of non-empty strings; absent or null is empty."""
    items = read_list(obj, path, key)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise SpecError((path / key).entry(i), f"must be a non-empty string, not {item!r}")
    return tuple(str(item) for item in items)


def read_string(obj: Mapping[str, Any], path: FieldPath, key: str) -> str | None:
    """``obj[key]`` as a string; absent, null and "" are None (Go's omitempty)."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise SpecError(path / key, f"must be a string, not {kind_of(value)}")
    return value or None


def required_string(obj: Mapping[str, Any], path: FieldPath, key: str) -> str:
    """``obj[key]`` as a non-empty string; absent, null or "" is refused."""
    value = read_string(obj, path, key)
    if value is None:
        raise SpecError(path / key, "is required and must not be empty")
    return value


def read_bool(obj: Mapping[str, Any], path: FieldPath, key: str) -> bool:
    """``obj[key]`` as a boolean; absent or null is False."""
    value = obj.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SpecError(path / key, f"must be true or false, not {kind_of(value)}")
    return value


def read_int(obj: Mapping[str, Any], path: FieldPath, key: str) -> int | None:
    """``obj[key]`` as an integer (a boolean or a float is refused); absent or null is None."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path / key, f"must be an integer, not {kind_of(value)}")
    return value


def is_set(value: object) -> bool:
    """Go's omitempty: None, "", empty lists and empty objects mean unset."""
    if isinstance(value, str | list | tuple | Mapping):
        return len(value) > 0
    return value is not None


_KINDS: Final = (
    (bool, "a boolean"),  # before int: bool is an int
    (int | float, "a number"),
    (str, "a string"),
    (Mapping, "an object"),
    (list | tuple, "a list"),
)


def kind_of(value: object) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)
