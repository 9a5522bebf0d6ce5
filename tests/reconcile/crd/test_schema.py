"""The Stack CRD itself against the real apiserver: names, subresource, descriptions, PKO specs.

Every check goes through the real apiserver and the real kubectl, so a schema that the
apiserver reads differently from how we meant it fails here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.spec import parse_spec
from testbed.control_plane import ControlPlane
from testbed.waits import wait_for
from tests.reconcile.crd.helpers import CRD_PATH, FULL_SPEC, apply_stack, get_stack

pytestmark = pytest.mark.integration

# -- the CRD itself ------------------------------------------------------------------------


def test_crd_names_versions_and_subresource(plane: ControlPlane) -> None:
    """The CRD serves pulumi.com/v1 Stack, namespaced, in category pulumi, with /status.

    It also serves PKO v2's deprecated v1alpha1 (the same schema, stored as v1).
    """
    crd = json.loads(plane.kubectl("get", "crd", "stacks.pulumi.com", "-o", "json").stdout)
    spec = crd["spec"]
    assert spec["group"] == "pulumi.com"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "Stack"
    assert spec["names"]["plural"] == "stacks"
    assert spec["names"]["singular"] == "stack"
    assert spec["names"]["categories"] == ["pulumi"]
    assert "shortNames" not in spec["names"]
    version, alpha = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    assert (alpha["name"], alpha["served"], alpha["storage"]) == ("v1alpha1", True, False)
    assert alpha["deprecated"] is True
    assert alpha["schema"] == version["schema"]


def _properties(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, prop in schema.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from _properties(prop, f"{path}.{name}")
        if isinstance(prop.get("items"), dict):
            yield from _properties(prop["items"], f"{path}.{name}[]")
        if isinstance(prop.get("additionalProperties"), dict):
            yield from _properties(prop["additionalProperties"], f"{path}.{name}{{}}")


def test_every_field_has_a_description() -> None:
    """Every spec and status field carries a description for kubectl explain."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = [
        (path, prop)
        for part in ("spec", "status")
        for path, prop in _properties(root["properties"][part], part)
    ]
    assert len(fields) > 100
    assert [path for path, prop in fields if not prop.get("description")] == []


def test_kubectl_explain_shows_descriptions(plane: ControlPlane) -> None:
    """``kubectl explain`` shows field descriptions, including the resync clamp."""
    tried: list[subprocess.CompletedProcess[str]] = []

    def explained() -> subprocess.CompletedProcess[str] | None:
        tried.append(plane.kubectl("explain", "stacks.spec.resyncFrequencySeconds", check=False))
        return tried[-1] if tried[-1].returncode == 0 else None

    # The apiserver publishes a new CRD's OpenAPI asynchronously.
    result = wait_for(explained, "kubectl explain", 30, 0.5, detail=lambda: tried[-1].stderr)
    text = " ".join(result.stdout.split())
    assert "Values below 60, including 0 and unset, are treated as 60" in text


# -- spec validation -----------------------------------------------------------------------


def test_pko_manifest_is_accepted_unchanged(
    plane: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """A Stack using every supported field is stored as written (nothing pruned) and parses."""
    result = apply_stack(plane, tmp_path, namespace, FULL_SPEC)
    assert result.returncode == 0, result.stderr
    stored = get_stack(plane, namespace)
    assert stored["spec"] == FULL_SPEC
    parsed = parse_spec(stored["spec"], namespace)
    assert (parsed.branch, parsed.timeout_seconds) == ("main", 1800)
    assert parsed.service_account_name == "pulumi-runner"
    assert parsed.workspace.overrides()["volumeMounts"] == [{"name": "cache", "mountPath": "/c"}]
