"""The operator imports the Kubernetes client's parts without the packages' eager imports."""

from __future__ import annotations

import ast
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


SHIPPED = ("controller", "reconcile", "status", "workspace", "pulumi_stack_operator")


def used_client_names() -> set[str]:
    """Every ``client.<Name>`` attribute the shipped code reads (docstrings aside)."""
    names = set()
    for package in SHIPPED:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "client"
                    and node.attr[:1].isupper()
                ):
                    names.add(node.attr)
    return names


def test_preload_covers_every_client_name_the_operator_uses() -> None:
    """No class of the client is first imported later, from a thread (module docstring)."""
    from controller import kubeimports  # noqa: PLC0415

    assert used_client_names() <= set(kubeimports.USED)


def test_after_preload_the_operator_imports_nothing_more_from_the_client() -> None:
    """Each used name resolves without a new module: all were imported by ``preload``."""
    program = (
        "from controller import kubeimports\nkubeimports.lean()\nkubeimports.preload()\n"
        "import sys\nfrom kubernetes import client\nbefore = set(sys.modules)\n"
        "for name in kubeimports.USED:\n    getattr(client, name)\n"
        "assert set(sys.modules) == before, sorted(set(sys.modules) - before)\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, cwd=REPO)
