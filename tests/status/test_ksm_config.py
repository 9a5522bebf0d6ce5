"""The kube-state-metrics config's paths resolve on statuses the operator writes."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from status import conditions as c
from status.conditions import Reason

CONFIG = Path(__file__).parents[2] / "manifests" / "kube-state-metrics" / "stacks.yaml"
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def resolve(obj: Any, path: list[str]) -> Any:
    """Follow a KSM path, including ``[key=value]`` list selectors; None if absent."""
    for step in path:
        if isinstance(obj, list) and step.startswith("["):
            key, _, value = step.strip("[]").partition("=")
            obj = next((item for item in obj if item.get(key) == value), None)
        elif isinstance(obj, dict):
            obj = obj.get(step)
        else:
            return None
        if obj is None:
            return None
    return obj


def stack() -> dict[str, Any]:
    """A Ready Stack as the operator leaves it."""
    status = c.succeeded({}, 3, "ok", NOW)
    status["lastUpdate"] = {"state": "succeeded", "lastSuccessfulCommit": "abc", "failures": 0}
    return {
        "metadata": {"name": "s", "namespace": "ns", "generation": 3},
        "spec": {"stack": "dev", "suspend": False},
        "status": status,
    }


Paths = list[tuple[str, list[str], list[str]]]


def paths(config: dict[str, Any]) -> Paths:
    """Every (metric, base path, path relative to the base's value) in the config."""
    found: Paths = []
    for resource in config["spec"]["resources"]:
        found += [(f"label {k}", [], v) for k, v in resource["labelsFromPath"].items()]
        for metric in resource["metrics"]:
            each = metric["each"]
            body = each[each["type"][0].lower() + each["type"][1:]]
            base = body.get("path", [])
            if base:
                found.append((metric["name"], [], base))
            for key, path in body.get("labelsFromPath", {}).items():
                found.append((f"{metric['name']}.{key}", base, path))
            if "valueFrom" in body:
                found.append((f"{metric['name']}.value", base, body["valueFrom"]))
    return found


def test_config_targets_stacks() -> None:
    """The config is for pulumi.com/v1 Stack with the pulumi_stack prefix."""
    config = yaml.safe_load(CONFIG.read_text())
    resource = config["spec"]["resources"][0]
    assert config["kind"] == "CustomResourceStateMetrics"
    assert resource["groupVersionKind"] == {"group": "pulumi.com", "version": "v1", "kind": "Stack"}


@pytest.mark.parametrize(("metric", "base", "path"), paths(yaml.safe_load(CONFIG.read_text())))
def test_every_path_resolves_on_the_operators_statuses(
    metric: str, base: list[str], path: list[str]
) -> None:
    """Each path names a field the operator writes, on a Ready or a Stalled-while-retrying Stack."""
    ready = stack()
    busy = stack()
    busy["status"] = c.stalled(busy["status"], 3, Reason.INVALID_SPEC, "bad", NOW)
    retrying = stack()
    retrying["status"] = c.retrying(retrying["status"], 3, Reason.UPDATE_FAILED, "e", "r", NOW)
    values = []
    for obj in (ready, busy, retrying):
        scope = resolve(obj, base) if base else obj
        items = scope if isinstance(scope, list) else [scope]
        values += [resolve(item, path) for item in items]
    assert any(v is not None for v in values), f"{metric}: {base} {path}"
