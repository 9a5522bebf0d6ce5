"""The Program CRD against the real apiserver: PKO's Programs apply unchanged, strictly.

Each Program goes through the real apiserver and kubectl (server-side apply, strict field
validation), then through the parser, so that the CRD and ``reconcile.spec.program`` are
checked to agree: what the CRD stores parses (or is refused by the parser for what CEL cannot
see), and what the CRD refuses never reaches the operator.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.spec.model import SpecError
from reconcile.spec.program import parse_program, render_project
from testbed.control_plane import ControlPlane, wait_established
from tests.reconcile.crd.helpers import table
from tests.reconcile.spec.test_program import FULL_PROGRAM, PKO_EXAMPLES, PROGRAM_CRD

pytestmark = pytest.mark.integration

CRD_NAME = "programs.pulumi.com"


@pytest.fixture(scope="module")
def programs(control_plane: ControlPlane) -> ControlPlane:
    """The control plane, once the Program CRD is served (applied as the stack_crd fixture)."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(PROGRAM_CRD))
    wait_established(control_plane.kubectl, CRD_NAME)
    # kubectl caches discovery: refresh it so that "programs" resolves.
    control_plane.kubectl("api-resources", "--api-group=pulumi.com")
    return control_plane


def manifest(name: str, namespace: str, program: dict[str, Any] | None) -> dict[str, Any]:
    """A Program object: ``program`` at the top level, as PKO has it."""
    obj: dict[str, Any] = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Program",
        "metadata": {"name": name, "namespace": namespace},
    }
    if program is not None:
        obj["program"] = program
    return obj


def apply(
    plane: ControlPlane, tmp_path: Path, obj: dict[str, Any], validate: str = "strict"
) -> subprocess.CompletedProcess[str]:
    """Server-side apply ``obj`` with ``--validate``; the result says whether it was accepted."""
    # JSON, not YAML: kubectl's YAML 1.1 reads a bare n or y as a boolean.
    path = tmp_path / f"{obj['metadata']['name']}.json"
    path.write_text(json.dumps(obj))
    return plane.kubectl(
        "apply", "--server-side", f"--validate={validate}", "-f", str(path), check=False
    )


def stored(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    """The Program as the apiserver stores it."""
    found: dict[str, Any] = json.loads(
        plane.kubectl("get", "program", name, "-n", namespace, "-o", "json").stdout
    )
    return found


# -- the CRD itself ------------------------------------------------------------------------


def test_crd_names_versions_and_subresource(programs: ControlPlane) -> None:
    """The CRD serves pulumi.com/v1 Program, namespaced, in category pulumi, with /status."""
    crd = json.loads(programs.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == ("pulumi.com", "Namespaced")
    assert spec["names"]["kind"] == "Program"
    assert (spec["names"]["plural"], spec["names"]["singular"]) == ("programs", "program")
    assert spec["names"]["categories"] == ["pulumi"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


# -- PKO's Programs are accepted unchanged ----------------------------------------------------


@pytest.mark.parametrize("example", list(PKO_EXAMPLES))
def test_pko_example_is_accepted_unchanged(
    programs: ControlPlane, tmp_path: Path, namespace: str, example: str
) -> None:
    """PKO's example Program applies with strict validation, is stored as written, renders."""
    text, project = PKO_EXAMPLES[example]
    obj = yaml.safe_load(text)
    obj["metadata"]["namespace"] = namespace
    result = apply(programs, tmp_path, obj)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    found = stored(programs, namespace, obj["metadata"]["name"])
    assert found["program"] == obj["program"]
    rendered = render_project(found["metadata"]["name"], parse_program(found["program"]))
    assert rendered == project


def test_every_field_is_stored_unchanged(
    programs: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """A Program setting every declared field (PKO's and ours) is stored as written."""
    result = apply(programs, tmp_path, manifest("full", namespace, FULL_PROGRAM))
    assert result.returncode == 0, result.stderr
    found = stored(programs, namespace, "full")["program"]
    assert found == FULL_PROGRAM
    assert parse_program(found).program() == FULL_PROGRAM


def test_a_program_without_program_is_accepted(
    programs: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """As in PKO, ``program`` is optional: an empty program renders name and runtime only."""
    result = apply(programs, tmp_path, manifest("empty", namespace, None))
    assert result.returncode == 0, result.stderr
    found = stored(programs, namespace, "empty")
    assert render_project("empty", parse_program(found.get("program"))) == (
        "name: empty\nruntime: yaml\n"
    )


# -- unknown fields ---------------------------------------------------------------------------


def pko_program() -> dict[str, Any]:
    """The ``program`` of PKO's program-source example (a fresh copy)."""
    program: dict[str, Any] = yaml.safe_load(PKO_EXAMPLES["program-source"][0])["program"]
    return copy.deepcopy(program)


def add(program: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``program`` with ``value`` set at the dotted ``path`` (intermediate objects created)."""
    *parents, leaf = path.split(".")
    node = program
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return program


UNKNOWN = [
    "resources.randomPassword.typo",
    "resources.randomPassword.options.protected",
    "resources.randomPassword.options.customTimeouts.read",
    "configuration.length.description",
    "config",
]


@pytest.mark.parametrize("path", UNKNOWN)
def test_unknown_field_is_rejected_with_its_path(
    programs: ControlPlane, tmp_path: Path, namespace: str, path: str
) -> None:
    """Strict validation refuses a field the schema does not declare, naming its path."""
    program = add(pko_program(), path, "x")
    if path.startswith("configuration."):
        program["configuration"]["length"]["type"] = "Number"
    result = apply(programs, tmp_path, manifest("random-yaml", namespace, program))
    assert result.returncode != 0
    assert f".program.{path}: field not declared in schema" in result.stderr, result.stderr
    # The parser names the same field, should a client skip validation and the apiserver
    # not prune it (it does: see below).
    with pytest.raises(SpecError) as refused:
        parse_program(program)
    assert refused.value.path == f"program.{path}"


def test_a_spec_field_is_rejected(programs: ControlPlane, tmp_path: Path, namespace: str) -> None:
    """A Program written with ``spec.program`` (not PKO's shape) is refused, not half-stored."""
    obj = manifest("random-yaml", namespace, None)
    obj["spec"] = {"program": pko_program()}
    result = apply(programs, tmp_path, obj)
    assert result.returncode != 0
    assert ".spec: field not declared in schema" in result.stderr, result.stderr


def test_without_validation_unknown_fields_are_pruned(
    programs: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """A create without validation stores the Program less the field: it never reaches us.

    (Server-side apply refuses undeclared fields whatever --validate says.)
    """
    program = add(pko_program(), "resources.randomPassword.typo", "x")
    path = tmp_path / "pruned.json"
    path.write_text(json.dumps(manifest("random-yaml", namespace, program)))
    result = programs.kubectl("create", "--validate=false", "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
    assert stored(programs, namespace, "random-yaml")["program"] == pko_program()


# -- what the CRD refuses, and what only the parser can ---------------------------------------


REFUSED_BY_CRD = [
    pytest.param(
        "1-random", pko_program(), "must start with a letter and be at most 100", id="name"
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "resources.randomPassword.type", "RandomPassword"),
        "program.resources.randomPassword.type",
        id="type-token",
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "resources.randomPassword", {"properties": {}}),
        "program.resources.randomPassword.type: Required value",
        id="no-type",
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "configuration.length.type", "int"),
        'program.configuration.length.type: Unsupported value: "int"',
        id="config-type",
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "configuration.pulumi.type", "String"),
        "pulumi is reserved by Pulumi YAML",
        id="reserved",
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "packages.random", ""),
        "program.packages.random",
        id="empty-package",
    ),
    pytest.param(
        "random-yaml",
        add(pko_program(), "resources.randomPassword.get", {"state": {}}),
        "program.resources.randomPassword.get.id: Required value",
        id="get-without-id",
    ),
]


@pytest.mark.parametrize(("name", "program", "fragment"), REFUSED_BY_CRD)
def test_crd_refuses_what_pulumi_yaml_would(
    programs: ControlPlane,
    tmp_path: Path,
    namespace: str,
    name: str,
    program: dict[str, Any],
    fragment: str,
) -> None:
    """The apiserver refuses, naming the field, what could only fail at run time."""
    result = apply(programs, tmp_path, manifest(name, namespace, program))
    assert result.returncode != 0
    assert fragment in " ".join(result.stderr.split()), result.stderr


STORED_THEN_REFUSED = [
    pytest.param(
        add(pko_program(), "resources.randomPassword.get", {"id": "x"}),
        "program.resources.randomPassword.get",
        id="properties-and-get",
    ),
    pytest.param(
        add(pko_program(), "variables.randomPassword", 1),
        "program.variables.randomPassword",
        id="shared-name",
    ),
    pytest.param(
        add(pko_program(), "configuration.length", {"secret": True}),
        "program.configuration.length",
        id="untyped-configuration",
    ),
    pytest.param(
        add(pko_program(), "variables.pulumi", 1), "program.variables.pulumi", id="reserved"
    ),
]


@pytest.mark.parametrize(("program", "path"), STORED_THEN_REFUSED)
def test_parser_refuses_what_cel_cannot_see(
    programs: ControlPlane, tmp_path: Path, namespace: str, program: dict[str, Any], path: str
) -> None:
    """CEL cannot read untyped fields: the CRD stores these, and the parser refuses them."""
    result = apply(programs, tmp_path, manifest("random-yaml", namespace, program))
    assert result.returncode == 0, result.stderr
    found = stored(programs, namespace, "random-yaml")["program"]
    assert found == program
    with pytest.raises(SpecError) as refused:
        parse_program(found)
    assert refused.value.path == path


# -- status and printer columns ----------------------------------------------------------------


def test_status_subresource_and_columns(
    programs: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """PKO's status fields go through /status; AGE by default, the status in -o wide."""
    apply(programs, tmp_path, manifest("random-yaml", namespace, pko_program())).check_returncode()
    artifact = {
        "path": "programs/ns/random-yaml/1.tar.gz",
        "url": "http://operator/programs/ns/random-yaml/1",
        "revision": "1",
        "digest": "sha256:" + "a" * 64,
        "lastUpdateTime": "2026-01-02T03:04:05Z",
        "size": 512,
        "metadata": {"k": "v"},
    }
    body = json.dumps({"status": {"observedGeneration": 1, "artifact": artifact}})
    programs.kubectl(
        "patch", "program", "random-yaml", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", body,
    )  # fmt: skip
    assert stored(programs, namespace, "random-yaml")["status"]["artifact"] == artifact
    default = table(programs.kubectl("get", "programs", "-n", namespace).stdout)
    assert default[0] == ["NAME", "AGE"]
    wide = table(programs.kubectl("get", "programs", "-n", namespace, "-o", "wide").stdout)
    assert wide[0] == ["NAME", "AGE", "OBSERVED", "DIGEST", "URL"]
    assert wide[1][0] == "random-yaml"
    assert wide[1][2:] == ["1", artifact["digest"], artifact["url"]]
    listed = programs.kubectl("get", "pulumi", "-n", namespace, "-o", "name").stdout
    assert "program.pulumi.com/random-yaml" in listed.split()
