"""The operator imports the Kubernetes client's parts without the packages' eager imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What kubernetes/__init__ and kubernetes/config/__init__ import and the operator never uses.
EAGER = (
    "kubernetes.config.kube_config",
    "kubernetes.stream",
    "kubernetes.dynamic",
    "kubernetes.utils.create_from_yaml",
    "kubernetes.utils.quantity",
    "kubernetes.leaderelection",
    "kubernetes.informer",
    "requests",
    "requests_oauthlib",
    "oauthlib",
)


def loaded_after(program: str) -> list[str]:
    """Which of ``EAGER`` a fresh interpreter holds after ``program``."""
    held = f"sorted(m for m in {EAGER!r} if m in sys.modules)"
    check = f"{program}\nimport json, sys\nprint(json.dumps({held}))"
    out = subprocess.run(
        [sys.executable, "-c", check], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout
    names: list[str] = json.loads(out)
    return names


OPERATOR = """
from controller import kubeimports
kubeimports.lean()
import controller.manager, pulumi_stack_operator.wiring
from kubernetes import client, watch
from kubernetes.config import incluster_config
from controller.objectsapi import ObjectsApi
api = client.ApiClient()
ObjectsApi(api)
assert watch.Watch and incluster_config.load_incluster_config
"""


def test_the_operators_modules_load_none_of_the_eager_imports() -> None:
    """The request layer, the watch, the in-cluster loader: all there, nothing else."""
    assert loaded_after(OPERATOR) == []


def test_a_submodule_still_imports_on_demand() -> None:
    """The library's kubeconfig loader (exec plugins, auth providers) loads when asked for."""
    program = (
        f"{OPERATOR}from kubernetes.config import kube_config\nassert kube_config.Configuration"
    )

    assert "kubernetes.config.kube_config" in loaded_after(program)


def test_without_lean_the_package_imports_everything() -> None:
    """The control: what the plain import loads, which is what lean() spares."""
    assert loaded_after("import kubernetes") == sorted(EAGER)


def test_lean_leaves_an_imported_package_alone() -> None:
    """Once the full package is in, lean() registers nothing and replaces nothing."""
    program = (
        "import kubernetes\nfrom controller import kubeimports\n"
        "before = sys.modules['kubernetes']\nassert kubeimports.lean() == []\n"
        "assert sys.modules['kubernetes'] is before and kubernetes.config.load_kube_config"
    )

    assert loaded_after("import sys\n" + program) == sorted(EAGER)


def test_lean_twice_registers_once() -> None:
    """A second call finds the packages registered and changes nothing."""
    program = (
        "from controller import kubeimports\n"
        "assert kubeimports.lean() == list(kubeimports.LEAN_PACKAGES)\n"
        "assert kubeimports.lean() == []"
    )

    assert loaded_after(program) == []


def test_the_operators_entry_point_is_lean() -> None:
    """``python -m pulumi_stack_operator`` takes the lean imports (its --help path)."""
    program = (
        "import contextlib, io, runpy, sys\nsys.argv = ['pulumi-stack-operator', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    runpy.run_module('pulumi_stack_operator', run_name='__main__')\n"
        "import controller.manager"
    )

    assert loaded_after(program) == []
