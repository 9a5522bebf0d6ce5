"""The packages import each other in one direction only, read from the source with ``ast``.

``controller`` is generic machinery for any resource (and the text rules every message
keeps), ``status`` writes and reports status with it, ``workspace`` (the workspace engine:
runners, sources, processes) runs a program's operations knowing nothing of Stacks or their
status, ``reconcile`` reconciles Stacks with all three, and
``pulumi_stack_operator`` (the composition root) wires them together. A lower layer never
imports a higher one, not even lazily inside a function. Shipped code imports neither the test
bed (``testbed``) nor the test suite; the test bed, ``bench`` and ``hack`` use ``testbed`` and
never import ``tests``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIPPED = {".venv", ".git", "build", "dist"}

FORBIDDEN: dict[str, frozenset[str]] = {
    "controller": frozenset(
        {"status", "workspace", "reconcile", "pulumi_stack_operator", "testbed", "tests"}
    ),
    "status": frozenset({"workspace", "reconcile", "pulumi_stack_operator", "testbed", "tests"}),
    "workspace": frozenset({"status", "reconcile", "pulumi_stack_operator", "testbed", "tests"}),
    "reconcile": frozenset({"pulumi_stack_operator", "testbed", "tests"}),
    "pulumi_stack_operator": frozenset({"testbed", "tests"}),
}
MAY_IMPORT_TESTS = frozenset({"tests"})


def python_files(root: Path) -> Iterator[Path]:
    """Every ``.py`` file under ``root``, skipping virtualenvs, git and build output."""
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).parts
        if not SKIPPED.intersection(parts) and not any(p.endswith(".egg-info") for p in parts):
            yield path


def module_of(path: Path) -> list[str]:
    """The module path of ``path``: ``controller/view.py`` -> [controller, view].

    A package's ``__init__.py`` is the package itself.
    """
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports_in(source: str, package: list[str]) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import in ``source``, a module of ``package``.

    Imports anywhere count (inside functions too); relative ones are resolved.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.lineno, (node.module or "").split(".")[0]
            else:
                base = package[: len(package) - (node.level - 1)]
                yield node.lineno, (base or [node.module or ""])[0]


def imported_packages(path: Path) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of every import in the file ``path``."""
    package = module_of(path)
    if path.name != "__init__.py":
        package = package[:-1]
    yield from imports_in(path.read_text(encoding="utf-8"), package)


def violations(top: str, forbidden: frozenset[str]) -> list[str]:
    """``path:line imports package`` for each forbidden import under ``top``."""
    found = []
    for path in python_files(REPO / top):
        for line, package in imported_packages(path):
            if package in forbidden:
                found.append(f"{path.relative_to(REPO)}:{line} imports {package}")
    return found


@pytest.mark.parametrize("top", sorted(FORBIDDEN))
def test_a_layer_imports_no_layer_above_it(top: str) -> None:
    """``controller`` < ``status`` < ``workspace`` < ``reconcile`` < ``pulumi_stack_operator``."""
    assert (REPO / top).is_dir(), f"{top}/ is missing: the layering below names it"
    assert violations(top, FORBIDDEN[top]) == []


def test_nothing_outside_tests_imports_the_test_suite() -> None:
    """Shipped code, the test bed, bench, hack and any new directory never import ``tests``."""
    tops = {p.relative_to(REPO).parts[0] for p in python_files(REPO)}
    found = []
    for top in sorted(tops - MAY_IMPORT_TESTS):
        if (REPO / top).is_dir():
            found += violations(top, frozenset({"tests"}))
        else:  # a module at the top of the repository
            found += [
                f"{top}:{line} imports tests"
                for line, package in imported_packages(REPO / top)
                if package == "tests"
            ]
    assert found == []


def test_the_checker_sees_lazy_and_relative_imports() -> None:
    """Positive control: imports inside functions and relative ones are found and resolved."""
    source = (
        "import os\n"
        "def f():\n"
        "    from reconcile.spec import parse_spec\n"
        "from . import view\n"
        "from ..status import writer\n"
    )
    found = list(imports_in(source, ["controller", "sub"]))
    assert sorted(found) == [(1, "os"), (3, "reconcile"), (4, "controller"), (5, "controller")]
