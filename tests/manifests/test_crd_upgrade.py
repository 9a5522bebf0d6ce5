"""The CRDs only ever widen: whatever the previous CRDs accepted, the current ones keep.

An upgrade applies the new CRDs over objects written under the old ones
(``docs/installation.md``, "Upgrading"). The API server prunes what a schema no longer
declares when it reads an object, and refuses an update (the operator's own status patch
included) that breaks a new constraint. So, for every version the previous CRD served and
every field of its schema (``tests/manifests/previous-crds/``, as shipped at an earlier
commit), the current CRD must:

- still serve the version, and declare the field with the same type;
- keep every enum value, bound no tighter (``maxLength``, ``maxItems``, ``maximum``, their
  ``min`` counterparts) and add or change no ``pattern``;
- require nothing more of an object the previous one accepted, and keep unknown fields where
  it kept them.

New CEL rules cannot be compared this way: ``tests/e2e/test_install_lifecycle.py`` writes
Stacks under the previous CRDs, applies the current ones as the docs say, and reads and
updates them. A control plants each kind of narrowing and the check names it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.manifests.conftest import MANIFESTS

PREVIOUS: Final = Path(__file__).parent / "previous-crds"
CRDS: Final = ("stacks.pulumi.com", "programs.pulumi.com")
UPPER_BOUNDS: Final = ("maxLength", "maxItems", "maxProperties", "maximum")
LOWER_BOUNDS: Final = ("minLength", "minItems", "minProperties", "minimum")
Schema = Mapping[str, Any]


@functools.cache
def load(path: Path) -> dict[str, Any]:
    """A CRD file, parsed (once: callers copy before they change it)."""
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


def schemas(crd: Mapping[str, Any]) -> dict[str, Schema]:
    """Each served version's openAPIV3Schema, by version name."""
    return {
        version["name"]: version["schema"]["openAPIV3Schema"]
        for version in crd["spec"]["versions"]
        if version.get("served")
    }


def fields(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every node of ``schema`` by path: ``.name`` a property, ``[]`` items, ``{}`` map values."""
    yield path or ".", schema
    for name, child in (schema.get("properties") or {}).items():
        yield from fields(child, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        yield from fields(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from fields(schema["additionalProperties"], f"{path}{{}}")


def narrowings(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Every way ``current`` accepts or keeps less than ``previous`` did, in words."""
    found: list[str] = []
    now = schemas(current)
    for version, old_schema in schemas(previous).items():
        if version not in now:
            found.append(f"{version}: no longer served")
            continue
        new_fields = dict(fields(now[version]))
        for path, old in fields(old_schema):
            where = f"{version} {path}"
            new = new_fields.get(path)
            if new is None:
                found.append(f"{where}: dropped (the API server prunes it from stored objects)")
                continue
            found.extend(f"{where}: {problem}" for problem in node_narrowings(old, new))
    return found


def node_narrowings(old: Schema, new: Schema) -> Iterator[str]:
    """How one schema node ``new`` is narrower than ``old``."""
    if old.get("type") != new.get("type"):
        yield f"type {old.get('type')} became {new.get('type')}"
    if "enum" in new and ("enum" not in old or not set(old["enum"]) <= set(new["enum"])):
        yield f"enum {new['enum']} added or narrowed"
    for bound in UPPER_BOUNDS:
        if bound in new and (bound not in old or new[bound] < old[bound]):
            yield f"{bound} tightened to {new[bound]}"
    for bound in LOWER_BOUNDS:
        if bound in new and (bound not in old or new[bound] > old[bound]):
            yield f"{bound} raised to {new[bound]}"
    if "pattern" in new and new["pattern"] != old.get("pattern"):
        yield f"pattern {new['pattern']!r} added or changed"
    if added := set(new.get("required", ())) - set(old.get("required", ())):
        yield f"now requires {sorted(added)}"
    if old.get("x-kubernetes-preserve-unknown-fields") and not new.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        yield "no longer keeps unknown fields"


@pytest.mark.parametrize("name", CRDS)
def test_the_current_crd_keeps_everything_the_previous_one_accepted(name: str) -> None:
    """Every served version and field of the previous CRD, no narrower in the current one."""
    previous = load(PREVIOUS / f"{name}.yaml")
    current = load(MANIFESTS / "crd" / f"{name}.yaml")
    assert previous["metadata"]["name"] == current["metadata"]["name"] == name
    assert narrowings(previous, current) == []


def planted(change: str, crd: dict[str, Any]) -> dict[str, Any]:
    """``crd`` narrowed in one way, named by ``change``."""
    narrowed = copy.deepcopy(crd)
    versions = narrowed["spec"]["versions"]
    spec = versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    if change == "version":
        versions[-1]["served"] = False
    elif change == "dropped":
        del spec["properties"]["backend"]
    elif change == "type":
        spec["properties"]["backend"]["type"] = "integer"
    elif change == "enum":
        spec["properties"]["secretsProvider"]["enum"] = ["passphrase"]
    elif change == "bound":
        spec["properties"]["stack"]["maxLength"] = 3
    elif change == "pattern":
        spec["properties"]["stack"]["pattern"] = "^[a-z]+$"
    elif change == "required":
        spec["required"] = [*spec.get("required", ()), "backend"]
    elif change == "unknown":
        spec["properties"]["workspaceTemplate"].pop("x-kubernetes-preserve-unknown-fields")
    return narrowed


CHANGES: Final = {
    "version": "v1alpha1: no longer served",
    "dropped": "v1 .spec.backend: dropped",
    "type": "v1 .spec.backend: type string became integer",
    "enum": "v1 .spec.secretsProvider: enum ['passphrase'] added or narrowed",
    "bound": "v1 .spec.stack: maxLength tightened to 3",
    "pattern": "v1 .spec.stack: pattern '^[a-z]+$' added or changed",
    "required": "v1 .spec: now requires ['backend']",
    "unknown": "v1 .spec.workspaceTemplate: no longer keeps unknown fields",
}


@pytest.mark.parametrize("change", CHANGES)
def test_control_a_planted_narrowing_is_named(change: str) -> None:
    """Each kind of narrowing, planted in the current Stack CRD, is found and named."""
    previous = load(PREVIOUS / "stacks.pulumi.com.yaml")
    current = load(MANIFESTS / "crd" / "stacks.pulumi.com.yaml")
    assert narrowings(previous, current) == [], "the control needs a clean baseline"
    found = narrowings(previous, planted(change, current))
    assert any(problem.startswith(CHANGES[change]) for problem in found), found
