"""The program's project file (``Pulumi.yaml``) and its stack settings file (config).

Plain config is written into ``Pulumi.<stack>.yaml`` (never on a command line), keeping
everything the runner does not manage; the keys it set are remembered next to the
project file, so that a key the request drops is removed again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workspace.runner.failures import StepFailedError
from workspace.runner.types import ErrorKind, UpdateRequest

_PROJECT_FILES = ("Pulumi.json", "Pulumi.yaml", "Pulumi.yml")  # the CLI's search order
_YAML_STR, _YAML_MAP, _YAML_NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "map", "null"))
_NUMBER_STARTS = frozenset("0123456789+-.")  # where YAML 1.2 may see a number


@dataclass(frozen=True)
class Project:
    """What the runner needs of a project file.

    ``runtime`` is the language (``nodejs``, ``python``, ``yaml``, ``go``, …) and
    ``options`` its ``runtime.options`` (``{}`` when the runtime is a plain string).
    """

    name: str
    backend_url: str | None
    path: Path  # the project file
    stack_config_dir: str  # where stack settings files are, relative to the project file
    runtime: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        """The project's directory: where the program and its dependency files are."""
        return self.path.parent


def load_project(work_dir: Path) -> Project:
    """Read the project file; ``PROGRAM_INVALID`` when it is missing or not a project."""
    for name in _PROJECT_FILES:
        path = work_dir / name
        if path.is_file():
            break
    else:
        raise StepFailedError("project", ErrorKind.PROGRAM_INVALID, f"no Pulumi.yaml in {work_dir}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise StepFailedError(
            "project", ErrorKind.PROGRAM_INVALID, f"cannot read {path.name}: {err}"
        ) from err
    if not isinstance(data, dict) or not data.get("name") or not data.get("runtime"):
        raise StepFailedError(
            "project", ErrorKind.PROGRAM_INVALID, f"{path.name} needs a name and a runtime"
        )
    backend = data.get("backend")
    url = backend.get("url") if isinstance(backend, dict) else None
    # A string ``config`` is the old name of ``stackConfigDir`` (the CLI reads it as such).
    config_dir = data.get("stackConfigDir") or data.get("config")
    runtime, options = _runtime(data["runtime"], path)
    return Project(
        name=str(data["name"]),
        backend_url=str(url) if url else None,
        path=path,
        stack_config_dir=config_dir if isinstance(config_dir, str) else "",
        runtime=runtime,
        options=options,
    )


def _runtime(value: object, path: Path) -> tuple[str, dict[str, Any]]:
    """``runtime: nodejs`` or ``runtime: {name: nodejs, options: {…}}``, as the CLI reads it."""
    if isinstance(value, str):
        return value, {}
    name = value.get("name") if isinstance(value, dict) else None
    options = value.get("options") if isinstance(value, dict) else None
    if not isinstance(name, str) or not name or not isinstance(options, dict | None):
        raise StepFailedError(
            "project",
            ErrorKind.PROGRAM_INVALID,
            f"{path.name}: runtime must be a name or a mapping with a name and options",
        )
    return name, dict(options or {})


def qualifier(project: str) -> Callable[[str], str]:
    """Config keys without a namespace belong to the project (Pulumi's own rule)."""
    return lambda key: key if ":" in key else f"{project}:{key}"


def stack_leaf(stack: str) -> str:
    """``org/project/dev`` → ``dev``: the name in ``Pulumi.<name>.yaml``."""
    return stack.rsplit("/", 1)[-1]


def managed_keys_file(request: UpdateRequest) -> Path:
    """Where the config keys this runner set for the stack are remembered."""
    return request.work_dir / f".stack-operator-config.{stack_leaf(request.stack)}.json"


def read_keys(path: Path) -> set[str]:
    """The config keys remembered in ``path``; none when it is missing or unreadable."""
    try:
        keys = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def stack_file(project: Project, stack: str) -> Path:
    """The stack's settings file, where the CLI (3.274) looks for it.

    ``Pulumi.<stack>.<ext>`` in the project's ``stackConfigDir`` (default: next to the
    project file), with the project file's extension; ``<stack>`` is the last part of
    ``org/project/stack``.
    """
    name = f"Pulumi.{stack_leaf(stack)}{project.path.suffix}"
    return project.path.parent / project.stack_config_dir / name


def update_stack_file(path: Path, plain: Mapping[str, str], drop: Iterable[str]) -> None:
    """Set ``plain`` and remove ``drop`` under ``config`` in a stack settings file.

    Everything else stays: other keys and their values as written, ``secure:`` values,
    the secrets provider's settings (comments are lost, as when the CLI writes the file).
    Values stay strings (quoted where YAML would read another type). The file is
    replaced, never left half-written. A file that is not a settings file (bad YAML or
    JSON, not a mapping) is ``PROGRAM_INVALID``; a file system error ``SETUP_FAILED``.
    """
    merge = _merge_json if path.suffix == ".json" else _merge_yaml
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        updated = merge(text, plain, {*drop, *plain})
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise StepFailedError(
            "config", ErrorKind.PROGRAM_INVALID, f"cannot read {path.name}: {err}"
        ) from err
    except OSError as err:
        raise StepFailedError(
            "config", ErrorKind.SETUP_FAILED, f"cannot read {path.name}: {err.strerror}"
        ) from err
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(updated, encoding="utf-8")
        partial.replace(path)
    except OSError as err:
        raise StepFailedError(
            "config", ErrorKind.SETUP_FAILED, f"cannot write {path.name}: {err.strerror}"
        ) from err


def _merge_yaml(text: str, plain: Mapping[str, str], gone: set[str]) -> str:
    """``text`` with the ``config`` keys in ``gone`` removed and ``plain`` appended.

    Works on the YAML node tree, so that every other value keeps its text and style
    (loading and dumping would turn ``on`` into ``true`` and ``0777`` into ``511``).
    """
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None or _is_null(root):
        root = yaml.MappingNode(_YAML_MAP, [])
    if not isinstance(root, yaml.MappingNode):
        raise ValueError("the file is not a mapping")  # noqa: TRY004 - a parse error
    config = _config_node(root)
    config.value = [(k, v) for k, v in config.value if _scalar(k) not in gone]
    config.value += [(yaml.ScalarNode(_YAML_STR, k), _string_node(v)) for k, v in plain.items()]
    return str(yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True, width=sys.maxsize))


def _config_node(root: yaml.MappingNode) -> yaml.MappingNode:
    """The ``config`` mapping of a settings file's root, added if missing or empty."""
    for index, (key, value) in enumerate(root.value):
        if _scalar(key) != "config":
            continue
        if isinstance(value, yaml.MappingNode):
            return value
        if not _is_null(value):
            raise ValueError("config is not a mapping")
        config = yaml.MappingNode(_YAML_MAP, [])
        root.value[index] = (key, config)
        return config
    config = yaml.MappingNode(_YAML_MAP, [])
    root.value.append((yaml.ScalarNode(_YAML_STR, "config"), config))
    return config


def _scalar(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _YAML_NULL


def _string_node(value: str) -> yaml.ScalarNode:
    """A string scalar that every YAML reader reads as this string.

    PyYAML quotes what YAML 1.1 reads as another type (``0``, ``on``, ``null``, ``''``).
    The CLI's YAML 1.2 reader also takes ``0o17`` and ``1e3`` for numbers, which 1.1 does
    not: every value that starts like a number is double-quoted.
    """
    style = '"' if value[:1] in _NUMBER_STARTS else None
    return yaml.ScalarNode(_YAML_STR, value, style=style)


def _merge_json(text: str, plain: Mapping[str, str], gone: set[str]) -> str:
    """A ``Pulumi.<stack>.json`` with the keys in ``gone`` removed and ``plain`` added."""
    data = json.loads(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("the file is not an object")  # noqa: TRY004 - a parse error
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("config is not an object")  # noqa: TRY004 - a parse error
    kept = {k: v for k, v in config.items() if k not in gone}
    return json.dumps({**data, "config": {**kept, **plain}}, indent=4, ensure_ascii=False) + "\n"
