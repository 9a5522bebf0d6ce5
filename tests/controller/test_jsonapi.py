"""The operator's hand-written API clients stand in for the generated ones it never loads.

``CoreApi`` and ``ObjectsApi`` (both ``controller.jsonapi.JsonApi``) replace the generated
``CoreV1Api`` and ``CustomObjectsApi``: their models and per-method pydantic validators
cost the operator about 20 MiB and 2 MiB of resident memory. Their calls are proven
against a real API server in ``test_coreapi`` and ``test_objectsapi``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("controller", "reconcile", "status", "workspace", "pulumi_stack_operator")
# (the generated class, ours, modules of the generated client that must stay unloaded)
STAND_INS = [
    ("CoreV1Api", "controller.coreapi.CoreApi", ("core_v1_api", "v1_pod_spec")),
    (
        "CustomObjectsApi",
        "controller.objectsapi.ObjectsApi",
        ("custom_objects_api", "v1_api_resource_list"),
    ),
]


@pytest.mark.parametrize(("generated", "ours", "modules"), STAND_INS)
def test_shipped_code_never_uses_the_generated_client(
    generated: str, ours: str, modules: tuple[str, ...]
) -> None:
    """No shipped module makes the generated client (tests may)."""
    del ours, modules
    users = [
        str(path.relative_to(REPO))
        for package in SHIPPED
        for path in sorted((REPO / package).rglob("*.py"))
        if f"{generated}(" in path.read_text()
    ]
    assert users == []


@pytest.mark.parametrize(("generated", "ours", "modules"), STAND_INS)
def test_the_operator_process_does_not_load_the_generated_client(
    generated: str, ours: str, modules: tuple[str, ...]
) -> None:
    """Importing the operator and making our client loads neither the API nor its models."""
    del generated
    package, name = ours.rsplit(".", 1)
    program = (
        "import sys, kubernetes.client, pulumi_stack_operator.__main__, controller.manager; "
        f"from {package} import {name}; {name}(kubernetes.client.ApiClient()); "
        f"print(sorted(m for m in sys.modules if m.endswith({modules!r})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", program], check=True, capture_output=True, text=True
    ).stdout
    assert loaded.strip() == "[]"
