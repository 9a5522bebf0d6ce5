"""``spec.config``: Pulumi config keys and values, within the size the CLI can pass on.

Role: read ``spec.config`` into ``{key: string}`` and check every config key (``config``'s
and ``secretsRef``'s) the way ``pulumi config set`` would, so that a key Pulumi cannot parse
or a value too large to reach the program is refused at once instead of failing a run.

Guarantees: string values pass through; other JSON values (PKO v2 accepts any) are
JSON-encoded compactly, read-only cached forms included; sizes count UTF-8 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from controller.cache import thaw
from reconcile.spec.fields import SPEC, FieldPath, read_map
from reconcile.spec.model import ResourceRef, SpecError

MAX_CONFIG_VALUE_BYTES: Final = 64 * 1024
"""Largest ``config`` value (UTF-8 bytes, JSON-encoded if not a string) a Stack may set.

Config travels through the Stack object (etcd limits it to about 1.5 MiB) and reaches the
program through the language host, which passes all of a stack's config, secret values
included, in one environment variable (``PULUMI_CONFIG``): Linux refuses a variable over
128 KiB ("argument list too long"). Larger data belongs in the repository.
"""

MAX_CONFIG_TOTAL_BYTES: Final = 96 * 1024
"""Largest sum of the sizes of every ``config`` key and value of one Stack (UTF-8 bytes).

Below the 128 KiB of ``PULUMI_CONFIG`` (see ``MAX_CONFIG_VALUE_BYTES``), leaving room for
the project prefix of each key, JSON quoting and ``secretsRef`` values.
"""

_MOVE_DATA: Final = " move large data into the repository and read it from the program"


def read_config(root: Mapping[str, Any]) -> Mapping[str, str]:
    """``spec.config`` of the spec ``root`` as string values, every key and size checked.

    Raises:
        SpecError: a key Pulumi refuses, a null value, or a value or total over the budget.
    """
    path = SPEC / "config"
    entries = read_map(root, SPEC, "config")
    config = {config_key(k, path): _config_value(v, path.entry(k)) for k, v in entries.items()}
    total = sum(len(k.encode()) + len(v.encode()) for k, v in config.items())
    if total > MAX_CONFIG_TOTAL_BYTES:
        problem = f"keys and values total {total} bytes, more than {MAX_CONFIG_TOTAL_BYTES}:"
        raise SpecError(path, problem + _MOVE_DATA)
    return config


def _config_value(value: object, path: FieldPath) -> str:
    if value is None:
        raise SpecError(path, "null is not a config value: set a value or remove the key")
    # Structured values (PKO v2 accepts any JSON) travel JSON-encoded.
    text = value if isinstance(value, str) else json.dumps(thaw(value), separators=(",", ":"))
    size = len(text.encode())
    if size > MAX_CONFIG_VALUE_BYTES:
        problem = f"the value is {size} bytes, more than {MAX_CONFIG_VALUE_BYTES}:"
        raise SpecError(path, problem + _MOVE_DATA)
    return text


def config_key(key: str, path: FieldPath) -> str:
    """``key`` of the map at ``path`` if ``pulumi config set`` accepts it: ``name`` or ``ns:name``.

    Raises:
        SpecError: on ``path[key]``: empty, more than one ``:``, or an empty part.
    """
    if not key:
        raise SpecError(path.entry(key), "config keys must not be empty")
    namespace, colon, name = key.partition(":")
    if ":" in name:
        old = name.partition(":")
        fix = f"{namespace}:{old[2]}" if old[0] == "config" else "namespace:name"
        problem = f"not a Pulumi config key (at most one ':'): use {fix}"
        raise SpecError(path.entry(key), problem)
    if colon and not (namespace and name):
        problem = "not a Pulumi config key (empty namespace or name): use name or namespace:name"
        raise SpecError(path.entry(key), problem)
    return key


def check_no_overlap(config: Mapping[str, str], secrets_ref: Mapping[str, ResourceRef]) -> None:
    """Refuse a key set both in ``spec.config`` and in ``spec.secretsRef``.

    Raises:
        SpecError: on ``spec.secretsRef[key]`` for the first such key.
    """
    for key in secrets_ref:
        if key in config:
            problem = "also set in spec.config: a key is either plain or secret, remove one"
            raise SpecError((SPEC / "secretsRef").entry(key), problem)
