"""Fixtures for the controller tests: a throw-away custom resource on the real apiserver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from testbed.control_plane import ControlPlane
from testbed.waits import wait_for

GROUP, VERSION, PLURAL = "testbed.example.com", "v1", "widgets"


@pytest.fixture(scope="session")
def widget_crd(control_plane: ControlPlane) -> Iterator[str]:
    """A namespaced CRD ``widgets.testbed.example.com`` that the informer tests watch."""
    api = control_plane.api_client()
    ext = client.ApiextensionsV1Api(api)
    name = f"{PLURAL}.{GROUP}"
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
    ext.create_custom_resource_definition(body)  # type: ignore[arg-type]

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, f"{name} to be Established", 30, 0.1)
    try:
        yield name
    finally:
        api.close()
