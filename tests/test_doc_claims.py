"""Claims in the docs that would drift from the code: checked, each with a planted control.

The other docs tests (``tests/test_docs.py``) check names (flags, reasons, metrics,
targets); these check sentences that state what is supported, what a command installs
and how long a tier takes:

- a "not yet supported" list names only fields the Stack CRD does not have;
- every ``kubectl apply`` of CRDs a page or the Makefile shows applies every CRD under
  ``manifests/crd`` (a directory, or every file by name);
- the unit tier's time in the development page is the Makefile's own;
- the installation page's compatibility table names the versions the tests run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from reconcile.spec.model import FLUX_API_VERSIONS
from testbed.assets.flux import FLUX_SOURCE_CONTROLLER_VERSION
from testbed.assets.kube import HELM_VERSION, K8S_VERSION
from testbed.assets.pulumi import PULUMI_VERSION

REPO = Path(__file__).resolve().parents[1]
CHART_README = REPO / "charts" / "pulumi-stack-operator" / "README.md"
MAKEFILE = REPO / "Makefile"
CRD_DIR = REPO / "manifests" / "crd"
SPAN = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
UNSUPPORTED = re.compile(r"not (?:yet )?supported:([^.]*)", re.IGNORECASE)
CRD_PATH = re.compile(r"(?:^|\s)(?:-[fk]\s+|--filename=|--kustomize=)(\S*crds?\b\S*)")


def pages() -> list[Path]:
    """The README, every page under ``docs/`` and the chart's README."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), CHART_README]


def crd_files() -> set[str]:
    """The file names of the CRDs the project ships (``manifests/crd``)."""
    return {p.name for p in CRD_DIR.glob("*.yaml") if p.name != "kustomization.yaml"}


def crd_fields() -> set[str]:
    """Every property name anywhere in the shipped CRDs' schemas."""
    names: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, Mapping):
            properties = node.get("properties")
            if isinstance(properties, Mapping):
                names.update(properties)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in crd_files():
        walk(yaml.safe_load((CRD_DIR / name).read_text()))
    return names


def unsupported_but_present(text: str, fields: set[str]) -> list[str]:
    """The fields a "not yet supported" list in ``text`` names that ``fields`` holds."""
    return [
        name
        for claim in UNSUPPORTED.findall(text)
        for name in SPAN.findall(claim)
        if name.split(".")[-1] in fields
    ]


def test_a_not_yet_supported_list_names_only_fields_the_crds_lack() -> None:
    """No page says a field is unsupported while the CRD serves it."""
    fields = crd_fields()
    wrong = {
        str(path.relative_to(REPO)): found
        for path in pages()
        if (found := unsupported_but_present(path.read_text(encoding="utf-8"), fields))
    }
    assert wrong == {}, f"these pages call shipped fields unsupported: {wrong}"


def test_a_planted_unsupported_claim_is_caught() -> None:
    """The control: the README's old sentence fails the check."""
    planted = "early. Not yet supported:\n> `fluxSource`, `programRef`."
    assert unsupported_but_present(planted, crd_fields()) == ["fluxSource", "programRef"]
    assert unsupported_but_present("Not yet supported: `noSuchField`.", crd_fields()) == []


def commands(text: str, *, recipes: bool = False) -> Iterator[str]:
    """Every ``kubectl apply`` command of a page's code spans and fenced blocks.

    ``recipes``: ``text`` is a Makefile, whose every line may be a command.
    """
    pieces = text.splitlines() if recipes else [*SPAN.findall(text), *FENCED.findall(text)]
    for piece in pieces:
        joined = piece.replace("\\\n", " ")
        for line in joined.splitlines():
            if re.search(r"\bkubectl\b.*\bapply\b|\$\(KUBECTL\) apply", line):
                yield line.strip()


def misses_a_crd(command: str, files: set[str]) -> bool:
    """Whether ``command`` applies CRDs but not every one of ``files``.

    A directory (``-f crds/``, ``-k manifests/crd``) applies them all; files named one
    by one must be all of them.
    """
    paths = CRD_PATH.findall(command)
    if not paths:
        return False
    named = {Path(p).name for p in paths if p.endswith((".yaml", ".yml"))}
    if len(named) < len(paths):
        return False  # a directory among them
    return not files <= named


def test_every_crd_apply_command_applies_every_crd() -> None:
    """Install and upgrade commands never leave ``programs.pulumi.com`` (or a next CRD) out."""
    files = crd_files()
    assert files >= {"stacks.pulumi.com.yaml", "programs.pulumi.com.yaml"}
    found = [
        (str(path.relative_to(REPO)), command)
        for path in [*pages(), MAKEFILE]
        for command in commands(path.read_text(encoding="utf-8"), recipes=path == MAKEFILE)
    ]
    assert any(CRD_PATH.search(command) for _, command in found), "no CRD command found"
    wrong = [(page, command) for page, command in found if misses_a_crd(command, files)]
    assert wrong == [], f"these commands apply only some CRDs: {wrong}"


def test_a_planted_partial_crd_command_is_caught() -> None:
    """The control: the chart README's old upgrade command fails the check."""
    files = crd_files()
    old = "apply it yourself: `kubectl apply --server-side -f crds/stacks.pulumi.com.yaml`."
    assert [misses_a_crd(c, files) for c in commands(old)] == [True]
    assert [misses_a_crd(c, files) for c in commands("`kubectl apply -k manifests/crd`")] == [False]


UNIT_TIME = re.compile(r"under (\d+) minutes?")


def unit_time_claims(development: str, makefile: str) -> tuple[set[str], set[str]]:
    """The unit tier's stated time bound in the development page and in the Makefile."""
    page = {
        m
        for line in development.splitlines()
        if line.startswith("| `make test-unit`")
        for m in UNIT_TIME.findall(line)
    }
    make: set[str] = {
        m
        for line in makefile.splitlines()
        if line.startswith("test-unit:")
        for m in UNIT_TIME.findall(line)
    }
    return page, make


def test_the_unit_tiers_stated_time_is_the_makefiles() -> None:
    """The development page states the unit tier's bound the Makefile's help states."""
    page, make = unit_time_claims(
        (REPO / "docs" / "development.md").read_text(encoding="utf-8"), MAKEFILE.read_text()
    )
    assert make, "the Makefile's test-unit help states no time"
    assert page == make


def test_a_planted_unit_time_is_caught() -> None:
    """The control: a page saying "about 30 s" states no bound; another bound differs."""
    makefile = "test-unit: venv ## The fast tier (under 2 minutes).\n"
    page, make = unit_time_claims("| `make test-unit` | the fast tier, about 30 s |\n", makefile)
    assert page != make
    page, make = unit_time_claims("| `make test-unit` | under 5 minutes |\n", makefile)
    assert page != make


def compatibility(text: str) -> dict[str, str]:
    """The installation page's compatibility table: component -> version cell."""
    section = text.split("## Compatibility", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): cells[1].strip() for cells in rows[1:] if len(cells) == 2}


def versions_run_here() -> dict[str, str]:
    """What the table must say, from the test bed's assets and the image's Dockerfile."""
    dockerfile = (REPO / "Dockerfile").read_text()
    python = re.search(r"ARG PYTHON_IMAGE=python:(\d+\.\d+)", dockerfile)
    node = re.search(r"ARG NODE_IMAGE=node:(\d+)", dockerfile)
    assert python, "the Dockerfile's Python base image moved"
    assert node, "the Dockerfile's Node.js base image moved"
    return {
        "Kubernetes": K8S_VERSION,
        "Flux source API": ", ".join(f"`{v}`" for v in FLUX_API_VERSIONS),
        "Flux source-controller": FLUX_SOURCE_CONTROLLER_VERSION,
        "Pulumi CLI": PULUMI_VERSION,
        "Python": python[1],
        "Node.js": node[1],
        "Helm": HELM_VERSION,
    }


def wrong_versions(table: dict[str, str], wanted: dict[str, str]) -> dict[str, str]:
    """Each wanted component whose row is missing or says another version."""
    found = {}
    for component, version in wanted.items():
        cells = [cell for name, cell in table.items() if _names(name, component)]
        if cells != [version]:
            found[component] = f"{cells} (tests run {version})"
    return found


def _names(row: str, component: str) -> bool:
    """Whether table row ``row`` is about ``component`` (its name, then a gloss)."""
    return row == component or row.startswith(component + " ")


def test_the_compatibility_table_names_the_versions_the_tests_run() -> None:
    """Kubernetes, Flux, the CLI, Python, Node.js and Helm: each row is what runs here."""
    table = compatibility((REPO / "docs" / "installation.md").read_text(encoding="utf-8"))
    assert wrong_versions(table, versions_run_here()) == {}


def test_a_planted_wrong_version_is_caught() -> None:
    """The control: a row naming another Kubernetes version, or none, fails the check."""
    wanted = versions_run_here()
    table = {"Kubernetes (kube-apiserver)": "1.30.0", "Helm": wanted["Helm"]}
    assert set(wrong_versions(table, wanted)) == set(wanted) - {"Helm"}
