"""No module of the repository imports itself, directly or through others, read with ``ast``.

Every ``.py`` module of the repository's own packages (``PACKAGES``; not ``testbed/programs/``,
which holds users' programs, nor a virtualenv or build output) is parsed, and each import
in it, at module level or inside a function (a ``TYPE_CHECKING`` block too), becomes an
edge to the repository module it names:

- ``import a.b.c`` and ``from a.b import c``, where ``a/b/c.py`` (or ``a/b/c/``) exists,
  both point to ``a.b.c``; ``from a.b import name`` of anything else points to ``a.b``;
- a package's ``__init__.py`` is the package itself, and importing ``a.b.c`` draws no edge
  to ``a`` or ``a.b`` (a package's ``__init__`` importing its own modules is not a cycle);
- relative imports are resolved against the importing module's package; third-party and
  standard-library imports are not edges.

A cycle is a strongly connected component of more than one module, or a module importing
itself; the test fails listing each, with the imports (``path:line``) that close it.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Container, Iterator, Mapping

from tests.test_layers import REPO, module_of, python_files

PACKAGES = (
    "controller",
    "status",
    "workspace",
    "reconcile",
    "pulumi_stack_operator",
    "testbed",
    "hack",
    "bench",
)
EXCLUDED = ("testbed/programs/",)  # users' Pulumi programs, run by the CLI, not imported


@dataclasses.dataclass(frozen=True)
class Module:
    """One module's dotted name, source and where it came from (for messages)."""

    name: str
    source: str
    is_package: bool = False  # an ``__init__.py``: its name is the package's
    path: str = ""


@dataclasses.dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``line``."""

    importer: str
    imported: str
    line: int


def repository_modules() -> dict[str, Module]:
    """Every module of ``PACKAGES``, by dotted name."""
    modules = {}
    for top in PACKAGES:
        for path in python_files(REPO / top):
            relative = path.relative_to(REPO).as_posix()
            if relative.startswith(EXCLUDED):
                continue
            name = ".".join(module_of(path))
            source = path.read_text(encoding="utf-8")
            modules[name] = Module(name, source, path.name == "__init__.py", relative)
    return modules


def _known(dotted: list[str], known: Container[str]) -> str | None:
    """The longest prefix of ``dotted`` that is a known module, or None."""
    for end in range(len(dotted), 0, -1):
        candidate = ".".join(dotted[:end])
        if candidate in known:
            return candidate
    return None


def _from_base(node: ast.ImportFrom, module: Module) -> list[str]:
    """The dotted module a ``from … import`` reads from, relative ones resolved."""
    named = node.module.split(".") if node.module else []
    if node.level == 0:
        return named
    package = module.name.split(".")
    if not module.is_package:
        package = package[:-1]
    return package[: len(package) - (node.level - 1)] + named


def _targets(
    node: ast.Import | ast.ImportFrom, module: Module, known: Container[str]
) -> Iterator[str | None]:
    """The known module each name of one import statement points to (None: not ours)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield _known(alias.name.split("."), known)
        return
    base = _from_base(node, module)
    for alias in node.names:
        submodule = ".".join([*base, alias.name])
        yield submodule if submodule in known else _known(base, known)


def imports_of(module: Module, known: Mapping[str, Module]) -> Iterator[Edge]:
    """Each import in ``module`` that names a module of ``known``, as an edge."""
    for node in ast.walk(ast.parse(module.source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node, module, known):
                if target is not None:
                    yield Edge(module.name, target, node.lineno)


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (each sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def import_cycles(modules: Mapping[str, Module]) -> list[str]:
    """One line per cycle among ``modules``: its members, then the imports that close it."""
    edges = [edge for module in modules.values() for edge in imports_of(module, modules)]
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for edge in edges:
        graph[edge.importer].add(edge.imported)
    found = []
    for component in strongly_connected(graph):
        members = set(component)
        if len(component) == 1 and component[0] not in graph[component[0]]:
            continue
        closing = sorted(
            f"{modules[e.importer].path or e.importer}:{e.line} imports {e.imported}"
            for e in edges
            if e.importer in members and e.imported in members
        )
        found.append(" <-> ".join(component) + " (" + "; ".join(dict.fromkeys(closing)) + ")")
    return found


def test_no_module_of_the_repository_is_in_an_import_cycle() -> None:
    """The repository's modules import each other as a DAG (lazy imports count)."""
    modules = repository_modules()
    assert {name.split(".")[0] for name in modules} == set(PACKAGES), "a package is missing"
    assert import_cycles(modules) == []


def test_the_checker_finds_a_synthetic_cycle() -> None:
    """Positive control: lazy, relative and ``import a.b.c`` imports close cycles; others don't.

    ``pkg.a`` -> ``pkg.b`` (inside a function) -> ``pkg.c`` (relative ``from . import c``)
    -> ``pkg.a`` (``import pkg.a``) is one cycle; ``pkg.selfish`` imports itself; the
    package ``pkg``, importing its modules, and ``pkg.leaf``, imported by all, are in none.
    """
    modules = {
        "pkg": Module("pkg", "from pkg.a import thing\nfrom . import leaf\n", is_package=True),
        "pkg.a": Module("pkg.a", "import os\ndef f():\n    from pkg import b\nthing = 1\n"),
        "pkg.b": Module("pkg.b", "from . import c\nfrom pkg.leaf import x\n"),
        "pkg.c": Module("pkg.c", "import pkg.a\nimport pkg.leaf\n"),
        "pkg.selfish": Module("pkg.selfish", "from pkg import selfish\n"),
        "pkg.leaf": Module("pkg.leaf", "import json\nx = 1\n"),
    }
    closing = "pkg.a:3 imports pkg.b; pkg.b:1 imports pkg.c; pkg.c:1 imports pkg.a"
    assert import_cycles(modules) == [
        f"pkg.a <-> pkg.b <-> pkg.c ({closing})",
        "pkg.selfish (pkg.selfish:1 imports pkg.selfish)",
    ]


def test_imports_resolve_to_modules_and_packages() -> None:
    """``from p import m`` is module ``p.m``; ``from p import name`` and ``from .. import`` p."""
    modules = {
        "p": Module("p", "", is_package=True),
        "p.m": Module("p.m", ""),
        "p.sub": Module("p.sub", "", is_package=True),
        "p.sub.n": Module(
            "p.sub.n",
            "from p import m, name\nfrom .. import m\nfrom ..m import y\nimport p.sub\n"
            "import p.m.nothing\nfrom . import *\nimport yaml\n",
        ),
    }
    edges = [(e.imported, e.line) for e in imports_of(modules["p.sub.n"], modules)]
    assert sorted(edges) == [
        ("p", 1),
        ("p.m", 1),
        ("p.m", 2),
        ("p.m", 3),
        ("p.m", 5),
        ("p.sub", 4),
        ("p.sub", 6),
    ]
