"""Spec builders shared by the tests of ``reconcile.spec``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from reconcile.spec import SpecError, parse_spec

NS = "team-a"
SHA = "2b0889718d3e63feeb6079ccd5e4488d8601e353"
REPO = "https://github.com/example/infra"
CRD = Path(__file__).parents[3] / "manifests" / "crd" / "stacks.pulumi.com.yaml"


def base(**fields: Any) -> dict[str, Any]:
    """A minimal valid spec (tracking ``main``) with ``fields`` merged in."""
    return {"stack": "org/proj/dev", "projectRepo": REPO, "branch": "main", **fields}


def without(spec: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``spec`` without ``keys``."""
    return {k: v for k, v in spec.items() if k not in keys}


def secret(name: str = "creds", key: str = "token", **extra: str) -> dict[str, Any]:
    """A ResourceRef to a Secret key."""
    return {"type": "Secret", "secret": {"name": name, "key": key, **extra}}


def literal(value: str) -> dict[str, Any]:
    """A literal ResourceRef."""
    return {"type": "Literal", "literal": {"value": value}}


def freeze(value: Any) -> Any:
    """``value`` as the informer cache holds it: read-only mappings and tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def assert_refused(spec: Any, path: str, fragment: str) -> SpecError:
    """``parse_spec(spec)`` raises a SpecError on ``path`` whose problem holds ``fragment``."""
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, NS)
    assert refused.value.path == path
    assert str(refused.value).startswith(f"{path}: ")
    assert fragment in refused.value.problem
    return refused.value


# Paths of the workspaceTemplate, its spec, its pod spec and its (pulumi) container.
T = "spec.workspaceTemplate"
S = f"{T}.spec"
P = f"{S}.podTemplate.spec"
C = f"{P}.containers[0]"


def ws(**spec: Any) -> dict[str, Any]:
    """A valid Stack spec whose ``workspaceTemplate.spec`` is ``spec``."""
    return base(workspaceTemplate={"spec": spec})


def pod(**pod_spec: Any) -> dict[str, Any]:
    """A valid Stack spec whose ``workspaceTemplate.spec.podTemplate.spec`` is ``pod_spec``."""
    return ws(podTemplate={"spec": pod_spec})


def container(volumes: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A valid Stack spec whose pulumi container has ``fields``, beside ``volumes``."""
    return pod(volumes=volumes or [], containers=[{"name": "pulumi", **fields}])


def overrides(spec: dict[str, Any]) -> dict[str, Any]:
    """The pod overrides ``spec`` parses into."""
    return parse_spec(spec, NS).workspace.overrides()


CACHE = {"name": "cache", "persistentVolumeClaim": {"claimName": "pulumi-cache"}}
