"""A Program's inline Pulumi YAML program: validated, then rendered as a project's Pulumi.yaml.

Role: the one place that reads a ``pulumi.com/v1`` Program (PKO v2's inline program API).
``parse_program`` validates the object's top-level ``program`` field (PKO puts the program
there, not in ``spec``) into a ``ProgramSpec``; ``render_project`` writes it out as the text of
a ``Pulumi.yaml``; ``program_revision`` names that text.

How PKO renders a Program (``programToProject`` in its ``program_controller.go``): the project
file is ``{name: <Program name>, runtime: yaml}`` with the ``program`` object inlined, every
section under its own name, ``configuration`` included; empty sections and unset options are
left out (Go's ``omitempty``); keys come out sorted (``sigs.k8s.io/yaml``). ``render_project``
does the same. ``configuration`` is deliberately not renamed ``config``: Pulumi YAML reads both
(it merely warns that ``configuration`` is deprecated), but the CLI first validates a
``config`` block against its own project schema, whose types (string, integer, boolean,
array, object) have no ``Number`` and no ``List<...>``: PKO's Programs would fail there.

Guarantees:

- ``parse_program`` returns a ``ProgramSpec`` or raises ``SpecError`` whose path is the field's
  (``program.resources.bucket.type``) and whose problem says what to change. The checks are
  the CRD's (known fields, types, type tokens, the configuration types) and what Pulumi YAML
  would refuse at run time that CEL cannot see: a configuration entry with neither ``type``
  nor ``default``, a resource with both ``properties`` and ``get``, an empty name or the
  reserved ``pulumi``, a name shared by configuration, resources and variables.
- Absent, ``null`` and empty values mean unset, as Go's ``omitempty`` does for PKO, so they
  never reach the rendered text; expressions (property values, variables, outputs, defaults,
  ``parent``, ``provider``...) pass through unchanged. The input is never mutated; plain
  ``dict``/``list`` and the informer cache's read-only forms read the same.
- ``render_project`` is deterministic: equal ``ProgramSpec`` values and names give equal text
  (sorted keys, block style, no line folding), readable by YAML 1.1 and 1.2 parsers alike.

Left to Pulumi YAML: expressions themselves (interpolations, ``fn::`` functions, references
to names that do not exist), a default of the wrong type, and whether packages and resource
types exist.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import yaml

from controller.cache import thaw
from reconcile.spec.fields import (
    FieldPath,
    is_set,
    read_bool,
    read_list,
    read_map,
    read_object,
    read_string,
    read_strings,
    required_string,
)
from reconcile.spec.model import SpecError, canonical_json

PROGRAM: Final = FieldPath("program")
"""The root of error paths: the Program's ``program`` field."""

PROGRAM_FIELDS: Final = frozenset(
    {"configuration", "resources", "variables", "outputs", "packages"}
)
"""The sections of a program, each written to Pulumi.yaml under its own name."""

CONFIG_TYPES: Final = (
    "String",
    "Number",
    "Integer",
    "Boolean",
    "Object",
    "List<String>",
    "List<Number>",
    "List<Integer>",
    "List<Boolean>",
    "List<Object>",
)
"""The configuration types accepted: Pulumi YAML's, in their canonical spelling.

PKO's CRD allows the first two and their lists; Pulumi YAML also reads ``Integer``,
``Boolean`` and ``Object`` (and other spellings, such as ``int`` or ``List< String >``, that
the CRD's enum refuses and so does this parser).
"""

RESERVED_NAME: Final = "pulumi"
"""The name Pulumi YAML keeps for its own settings: no configuration, resource or variable."""

PROJECT_NAME_MAX: Final = 100
"""Longest Pulumi project name (``tokens.ValidateProjectName``)."""

_CONFIGURATION_FIELDS: Final = frozenset({"type", "default", "secret"})
_RESOURCE_FIELDS: Final = frozenset(
    {"type", "name", "defaultProvider", "properties", "options", "get"}
)
_GET_FIELDS: Final = frozenset({"id", "state"})
_TIMEOUT_FIELDS: Final = ("create", "delete", "update")
_OPTION_STRING_LISTS: Final = (
    "additionalSecretOutputs",
    "aliases",
    "ignoreChanges",
    "replaceOnChanges",
)
_OPTION_FLAGS: Final = ("deleteBeforeReplace", "protect", "retainOnDelete")
_OPTION_STRINGS: Final = ("import", "version", "pluginDownloadURL")
_OPTION_EXPRESSIONS: Final = ("parent", "provider", "deletedWith")
_OPTION_FIELDS: Final = frozenset(
    {
        *_OPTION_STRING_LISTS,
        *_OPTION_FLAGS,
        *_OPTION_STRINGS,
        *_OPTION_EXPRESSIONS,
        "customTimeouts",
        "dependsOn",
        "providers",
    }
)

# Two or three colon-separated parts (package:Type, package:module:Type), as the CRD's pattern.
_TYPE_TOKEN: Final = re.compile(r"[^:\s]+(:[^:\s]+){1,2}")
# tokens.IsName: what a Pulumi project name may be.
_PROJECT_NAME: Final = re.compile(r"[A-Za-z_.][A-Za-z0-9_.-]*")
# Where a YAML 1.2 reader (Pulumi YAML's) may see a number in a plain scalar that PyYAML's
# YAML 1.1 resolver leaves unquoted (1e3, 0o17): such strings are written double-quoted.
_NUMBER_STARTS: Final = frozenset("0123456789+-.")
_STR_TAG: Final = "tag:yaml.org,2002:str"


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """A validated program (see ``parse_program``), as canonical JSON.

    ``program_json`` holds the normalised sections (empty ones and unset options left out) as
    canonical JSON, so that equal programs make equal, hashable values; one built by hand is
    re-encoded canonically. Only the parser checks the sections' contents; this class checks
    that ``program_json`` is a JSON object whose keys are sections (``PROGRAM_FIELDS``), so
    that it can never overwrite the project's ``name`` or ``runtime``.
    """

    program_json: str = "{}"

    def __post_init__(self) -> None:
        """Keep ``program_json`` a canonical JSON object of known sections."""
        program = json.loads(self.program_json)
        if not isinstance(program, dict):
            raise ValueError("program_json is a JSON object")  # noqa: TRY004 - a bad value
        unknown = sorted(program.keys() - PROGRAM_FIELDS)
        if unknown:
            msg = f"program_json holds only sections {sorted(PROGRAM_FIELDS)}, not {unknown}"
            raise ValueError(msg)
        object.__setattr__(self, "program_json", canonical_json(program))

    def program(self) -> dict[str, Any]:
        """The sections as a fresh dict (changing it changes nothing here)."""
        result: dict[str, Any] = json.loads(self.program_json)
        return result


def parse_program(program: Mapping[str, Any] | None) -> ProgramSpec:
    """Validate a Program's ``program`` field and return it normalised.

    ``program`` is the object's top-level ``program`` (None or absent: an empty program, as
    PKO allows). Errors name the field from ``program`` down.

    Raises:
        SpecError: the program is invalid, or Pulumi YAML would refuse it at run time.
    """
    root = read_object({} if program is None else program, PROGRAM, PROGRAM_FIELDS)
    sections = {
        "configuration": _section(root, "configuration", _configuration),
        "resources": _section(root, "resources", _resource),
        "variables": _section(root, "variables", _expression),
        "outputs": _section(root, "outputs", _expression),
        "packages": _packages(root),
    }
    _check_names(sections)
    normalised = {name: section for name, section in sections.items() if section}
    try:
        return ProgramSpec(canonical_json(normalised))
    except ValueError as err:  # a NaN or infinity: the apiserver never sends one
        raise SpecError(PROGRAM, f"must be JSON: {err}") from None


def render_project(name: str, program: ProgramSpec) -> str:
    """The text of the ``Pulumi.yaml`` of project ``name`` running ``program``, as PKO writes it.

    The document is ``name``, ``runtime: yaml`` and the program's non-empty sections under
    their own names (``configuration``, ``resources``, ``variables``, ``outputs``,
    ``packages``), keys sorted at every level, in block style without line folding, ending in
    a newline. Multi-line strings are literal blocks where YAML allows one; strings a YAML 1.2
    reader could take for numbers are quoted. Non-ASCII text is written as is (encode the
    result as UTF-8).

    Raises:
        ValueError: ``name`` is not a Pulumi project name (1 to 100 letters, digits, ``_``,
            ``.`` and ``-``, not starting with a digit or ``-``).
    """
    if len(name) > PROJECT_NAME_MAX or _PROJECT_NAME.fullmatch(name) is None:
        msg = (
            f"{name!r} is not a Pulumi project name: 1 to {PROJECT_NAME_MAX} letters, digits,"
            " _, . and -, starting with a letter, _ or ."
        )
        raise ValueError(msg)
    document = {"name": name, "runtime": "yaml", **program.program()}
    return yaml.dump(
        document,
        Dumper=_ProjectDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=sys.maxsize,
    )


def program_revision(text: str) -> str:
    """``sha256:<hex>`` of ``text`` (UTF-8): changes exactly when the rendered text changes."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- sections -------------------------------------------------------------------------------

Entry: TypeAlias = Callable[[object, FieldPath], Any]
"""Reads one entry of a section: (raw value, its path) -> the normalised value."""


def _section(root: Mapping[str, Any], key: str, entry: Entry) -> dict[str, Any]:
    path = PROGRAM / key
    result = {}
    for name, value in read_map(root, PROGRAM, key).items():
        if not name:
            raise SpecError(path, "an entry has an empty name: name it")
        result[str(name)] = entry(value, path / str(name))
    return result


def _configuration(raw: object, path: FieldPath) -> dict[str, Any]:
    entry = read_object({} if raw is None else raw, path, _CONFIGURATION_FIELDS)
    result: dict[str, Any] = {}
    type_ = read_string(entry, path, "type")
    if type_ is not None:
        if type_ not in CONFIG_TYPES:
            problem = f"unknown configuration type {type_!r}: use one of {', '.join(CONFIG_TYPES)}"
            raise SpecError(path / "type", problem)
        result["type"] = type_
    if entry.get("default") is not None:
        result["default"] = thaw(entry["default"])
    if not result:
        problem = "set type, default or both: Pulumi YAML cannot tell the value's type otherwise"
        raise SpecError(path, problem)
    if read_bool(entry, path, "secret"):
        result["secret"] = True
    return result


def _resource(raw: object, path: FieldPath) -> dict[str, Any]:
    entry = read_object(raw, path, _RESOURCE_FIELDS)
    type_ = required_string(entry, path, "type")
    if _TYPE_TOKEN.fullmatch(type_) is None:
        problem = (
            f"{type_!r} is not a resource type token: use package:Type or package:module:Type"
            " (for example random:RandomPassword or aws:s3/bucket:Bucket)"
        )
        raise SpecError(path / "type", problem)
    result: dict[str, Any] = {"type": type_}
    logical_name = read_string(entry, path, "name")
    if logical_name is not None:
        result["name"] = logical_name
    if read_bool(entry, path, "defaultProvider"):
        result["defaultProvider"] = True
    properties = thaw(read_map(entry, path, "properties"))
    if properties:
        result["properties"] = properties
    if is_set(entry.get("options")):
        options = _options(entry["options"], path / "options")
        if options:
            result["options"] = options
    if is_set(entry.get("get")):
        if properties:
            problem = (
                "properties and get are mutually exclusive: set properties to create and manage"
                " the resource, or get to read one that exists outside the stack"
            )
            raise SpecError(path / "get", problem)
        result["get"] = _get(entry["get"], path / "get")
    return result


def _options(raw: object, path: FieldPath) -> dict[str, Any]:
    options = read_object(raw, path, _OPTION_FIELDS)
    typed = {
        **{key: list(read_strings(options, path, key)) for key in _OPTION_STRING_LISTS},
        **{key: read_bool(options, path, key) for key in _OPTION_FLAGS},
        **{key: read_string(options, path, key) for key in _OPTION_STRINGS},
        "dependsOn": thaw(read_list(options, path, "dependsOn")),
        "providers": thaw(read_map(options, path, "providers")),
        "customTimeouts": _timeouts(options.get("customTimeouts"), path / "customTimeouts"),
    }
    result = {key: value for key, value in typed.items() if value is not False and is_set(value)}
    expressions = {key: options.get(key) for key in _OPTION_EXPRESSIONS}
    return result | {key: thaw(value) for key, value in expressions.items() if value is not None}


def _timeouts(raw: object, path: FieldPath) -> dict[str, str]:
    if not is_set(raw):
        return {}
    timeouts = read_object(raw, path, frozenset(_TIMEOUT_FIELDS))
    values = {key: read_string(timeouts, path, key) for key in _TIMEOUT_FIELDS}
    return {key: value for key, value in values.items() if value is not None}


def _get(raw: object, path: FieldPath) -> dict[str, Any]:
    get = read_object(raw, path, _GET_FIELDS)
    result: dict[str, Any] = {"id": required_string(get, path, "id")}
    state = thaw(read_map(get, path, "state"))
    if state:
        result["state"] = state
    return result


def _expression(raw: object, _path: FieldPath) -> Any:  # noqa: ANN401 - any JSON
    return thaw(raw)


def _packages(root: Mapping[str, Any]) -> dict[str, str]:
    path = PROGRAM / "packages"
    result = {}
    for name, source in read_map(root, PROGRAM, "packages").items():
        if not name or any(c.isspace() or c == ":" for c in name):
            problem = f"{name!r} is not a package name: use the package's name, without : or spaces"
            raise SpecError(path, problem)
        if not isinstance(source, str) or not source or any(c.isspace() for c in source):
            problem = (
                "must be the package's source, a string without spaces: a plugin name with a"
                " version, a git URL with a version, or a local path"
            )
            raise SpecError(path / name, problem)
        result[name] = source
    return result


_NAMESPACE: Final = (
    ("configuration", "configuration"),
    ("resources", "resource"),
    ("variables", "variable"),
)


def _check_names(sections: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse what Pulumi YAML refuses of names: ``pulumi``, or one name in two sections."""
    seen: dict[str, str] = {}
    for section, kind in _NAMESPACE:
        for name in sections[section]:
            if name == RESERVED_NAME:
                problem = (
                    f"Pulumi YAML reserves the name {name} for its settings: rename the {kind}"
                )
                raise SpecError(PROGRAM / section / name, problem)
            if name in seen:
                problem = (
                    f"the {seen[name]} {name!r} has this name already: configuration, resources"
                    " and variables share one namespace in Pulumi YAML, rename one of them"
                )
                raise SpecError(PROGRAM / section / name, problem)
            seen[name] = kind


# -- YAML -----------------------------------------------------------------------------------


class _ProjectDumper(yaml.SafeDumper):
    """PyYAML's safe dumper: multi-line strings as literal blocks, number-like strings quoted."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # A literal block keeps multi-line text readable (the emitter falls back to quoting where
    # a block cannot go, as in keys); otherwise quote what a YAML 1.2 reader could take for a
    # number, and let PyYAML choose.
    style = "|" if "\n" in value else '"' if value[:1] in _NUMBER_STARTS else None
    return dumper.represent_scalar(_STR_TAG, value, style=style)


_ProjectDumper.add_representer(str, _represent_str)
