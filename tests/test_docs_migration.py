"""The migration page's field table says exactly what differs from PKO, in step with the parser.

``docs/migrating-from-pko.md`` has a table with one row per PKO v2 Stack field or group of
fields: "the same", or what differs. Its fields are probed here, each by a PKO-shaped spec
that sets it, through ``parse_spec``; so is every field the parser refuses, taken from its
own declarations (PKO's deprecated fields, the ref types it refuses, the keys of the
``workspaceTemplate`` it refuses by name or does not read) and a few values it refuses on
purpose. Then:

- every refused probe is named in a row that does not say "the same" and says "refused":
  by its path, or as a code span in the row of its parent (``initContainers`` in the row
  of ``workspaceTemplate.spec.podTemplate.spec``);
- every field a "the same" row names has a probe the parser accepts, and no refused probe
  lies under it;
- every top-level field of PKO v2's Stack is in the table.

A control plants false rows, each of which the check catches.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import pytest

from reconcile.spec import (
    DEPRECATED_FIELDS,
    REFUSED_CONTAINER_FIELDS,
    REFUSED_POD_FIELDS,
    REFUSED_REF_TYPES,
    WORKSPACE_FIELDS,
    SpecError,
    parse_spec,
)
from tests.reconcile.crd.test_pko_superset import PKO_V2_FIELDS
from tests.test_docs import CODE, DOCS, section, table

MIGRATING = DOCS / "migrating-from-pko.md"
HEADING = "## Every PKO v2 Stack field"
HEADER = "| field | here |"
SAME = "the same"

SHA = "2b0889718d3e63feeb6079ccd5e4488d8601e353"
SECRET: Final = {"type": "Secret", "secret": {"name": "creds", "key": "token"}}
NO_GIT: Final = {"projectRepo": None, "branch": None}
FLUX: Final = {
    "sourceRef": {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "s"}
}
TEMPLATE = "workspaceTemplate.spec"
POD = f"{TEMPLATE}.podTemplate.spec"
CONTAINERS = f"{POD}.containers"

PKO_WORKSPACE_FIELDS: Final = frozenset(
    {
        "serviceAccountName",
        "securityProfile",
        "image",
        "imagePullPolicy",
        "git",
        "flux",
        "local",
        "projectInfo",
        "envFrom",
        "env",
        "resources",
        "podTemplate",
        "serviceTemplate",
        "pulumiLogLevel",
        "stacks",
    }
)
"""The keys of PKO v2's WorkspaceSpec, the type of a Stack's ``workspaceTemplate.spec``."""

Spec = dict[str, Any]


def ws(**spec: Any) -> Spec:
    """A fragment setting ``workspaceTemplate.spec`` to ``spec``."""
    return {"workspaceTemplate": {"spec": spec}}


def pod(**spec: Any) -> Spec:
    """A fragment setting the pod template's ``spec`` to ``spec``."""
    return ws(podTemplate={"spec": spec})


def container(**fields: Any) -> Spec:
    """A fragment setting the ``pulumi`` container's ``fields``."""
    return pod(containers=[{"name": "pulumi", **fields}])


_FLAGS = (
    "shallow",
    "targetDependents",
    "refresh",
    "expectNoRefreshChanges",
    "preview",
    "destroyOnFinalize",
    "runProgram",
    "continueResyncOnCommitMatch",
    "retryOnUpdateConflict",
    "useLocalStackOnly",
)

ACCEPTED_PROBES: Final[Mapping[str, Spec]] = {
    "stack": {"stack": "moolumi/k8s-nginx/dev"},
    "backend": {"backend": "https://api.pulumi.com"},
    "secretsProvider": {"secretsProvider": "passphrase"},
    "projectRepo": {"projectRepo": "https://github.com/pulumi/examples"},
    "branch": {"branch": "refs/heads/master"},
    "commit": {"branch": None, "commit": SHA},
    "repoDir": {"repoDir": "/kubernetes-ts-nginx"},
    "fluxSource.dir": {**NO_GIT, "fluxSource": {**FLUX, "dir": "/random-yaml"}},
    "fluxSource.sourceRef": {**NO_GIT, "fluxSource": FLUX},
    "programRef": {**NO_GIT, "programRef": {"name": "random-yaml"}},
    "gitAuth.accessToken": {"gitAuth": {"accessToken": SECRET}},
    "gitAuth.sshAuth": {"gitAuth": {"sshAuth": {"sshPrivateKey": SECRET, "password": SECRET}}},
    "gitAuth.basicAuth": {"gitAuth": {"basicAuth": {"userName": SECRET, "password": SECRET}}},
    "config": {"config": {"aws:region": "us-east-2", "app:tags": {"tier": ["web"]}}},
    "configRef": {"configRef": {"app": {"name": "settings", "key": "app.json", "json": True}}},
    "secretsRef": {"secretsRef": {"app:password": SECRET}},
    "envRefs": {"envRefs": {"A": SECRET, "B": {"type": "Literal", "literal": {"value": "b"}}}},
    "environment": {"environment": ["infra/dev"]},
    "targets": {"targets": ["urn:pulumi:dev::app::kubernetes:core/v1:Namespace::ns"]},
    "prerequisites": {
        "prerequisites": [{"name": "net", "requirement": {"succeededWithinDuration": "1h"}}]
    },
    "resyncFrequencySeconds": {"resyncFrequencySeconds": 30},
    "retryMaxBackoffDurationSeconds": {"retryMaxBackoffDurationSeconds": 600},
    "serviceAccountName": {"serviceAccountName": "runner"},
    f"{TEMPLATE}.serviceAccountName": ws(serviceAccountName="runner"),
    f"{TEMPLATE}.image": ws(image="pulumi/pulumi:3.202.0-nonroot"),
    f"{TEMPLATE}.imagePullPolicy": ws(imagePullPolicy="IfNotPresent"),
    f"{TEMPLATE}.securityProfile": ws(securityProfile="baseline"),
    f"{TEMPLATE}.resources": ws(resources={"requests": {"cpu": "1", "memory": "1Gi"}}),
    f"{TEMPLATE}.env": ws(env=[{"name": "AWS_REGION", "value": "us-east-2"}]),
    f"{TEMPLATE}.envFrom": ws(envFrom=[{"configMapRef": {"name": "settings"}}]),
    "workspaceTemplate.metadata": {"workspaceTemplate": {"metadata": {"labels": {"team": "a"}}}},
    f"{TEMPLATE}.podTemplate.metadata": ws(podTemplate={"metadata": {"labels": {"team": "a"}}}),
    POD: pod(nodeSelector={"pool": "pulumi"}),
    CONTAINERS: container(env=[{"name": "A", "value": "1"}]),
    "workspaceReclaimPolicy": {"workspaceReclaimPolicy": "Retain"},
    "updateTemplate": {"updateTemplate": {"spec": {"ttlAfterCompleted": "1h"}}},
    **{flag: {flag: True} for flag in _FLAGS},
}
"""Each field the table may call "the same", set as PKO's manifests set it."""


def refused_probes() -> dict[str, Spec]:
    """Every field the parser refuses by its own declarations, and values it refuses on purpose.

    Keyed by the field's path; a refused ref type is ``<field>.<type>``.
    """
    probes: dict[str, Spec] = {name: {name: "x"} for name in DEPRECATED_FIELDS}
    probes["gitAuth.githubApp"] = {"gitAuth": {"githubApp": {"appID": SECRET}}}
    for kind in REFUSED_REF_TYPES:
        ref = {"type": kind}
        probes[f"envRefs.{kind}"] = {"envRefs": {"A": ref}}
        probes[f"secretsRef.{kind}"] = {"secretsRef": {"app:a": ref}}
        probes[f"gitAuth.accessToken.{kind}"] = {"gitAuth": {"accessToken": ref}}
    for key in sorted(PKO_WORKSPACE_FIELDS - WORKSPACE_FIELDS):
        probes[f"{TEMPLATE}.{key}"] = ws(**{key: "x"})
    probes |= {f"{POD}.{key}": pod(**{key: True}) for key in REFUSED_POD_FIELDS}
    probes |= {f"{CONTAINERS}.{key}": container(**{key: "x"}) for key in REFUSED_CONTAINER_FIELDS}
    return probes | {
        "commit": {"branch": None, "commit": SHA[:7]},
        "repoDir": {"repoDir": "../other"},
        "fluxSource.dir": {**NO_GIT, "fluxSource": {**FLUX, "dir": "app/../../other"}},
        "projectRepo": {"projectRepo": "file:///srv/git/infra.git"},
        f"{TEMPLATE}.serviceAccountName": {"serviceAccountName": "a", **ws(serviceAccountName="b")},
        f"{TEMPLATE}.env": ws(env=[{"name": "HOME", "value": "/"}]),
        "workspaceTemplate.metadata": {
            "workspaceTemplate": {"metadata": {"labels": {"sidecar.istio.io/inject": "false"}}}
        },
    }


def spec_with(fragment: Spec) -> Spec:
    """A minimal valid spec (tracking ``main``) with ``fragment`` over it; None removes a key."""
    merged = {"stack": "org/proj/dev", "projectRepo": "https://example.com/r", "branch": "main"}
    merged |= copy.deepcopy(fragment)
    return {key: value for key, value in merged.items() if value is not None}


def parses(fragment: Spec) -> bool:
    """Whether the parser accepts the minimal spec with ``fragment``."""
    try:
        parse_spec(spec_with(fragment), "team-a")
    except SpecError:
        return False
    return True


# -- reading the table ---------------------------------------------------------------------

Row = tuple[tuple[str, ...], str]


def rows(text: str) -> list[Row]:
    """The table's spec rows: the fields of the first cell, and the second cell."""
    found = []
    for cells in table(text, HEADER):
        if cells[0].startswith("status"):
            continue
        found.append((tuple(CODE.findall(cells[0])), cells[1]))
    return found


def is_same(cell: str) -> bool:
    """Whether a row says that nothing differs."""
    return cell.startswith(SAME)


def says_refused(path: str, table_rows: list[Row]) -> bool:
    """Whether a row that says what differs names ``path`` as refused.

    By its path in the first cell, or (the last part as a code span) in its parent's row.
    """
    parent, _, leaf = path.rpartition(".")
    for names, cell in table_rows:
        named = path in names or (parent in names and f"`{leaf}`" in cell)
        if named and not is_same(cell) and "refused" in cell:
            return True
    return False


# -- the checks ----------------------------------------------------------------------------


def refusals_missing(table_rows: list[Row]) -> Iterator[str]:
    """Fields the parser refuses that no row names as refused (and probes it accepts)."""
    for path, fragment in refused_probes().items():
        if parses(fragment):
            yield f"{path}: probed as refused, but the parser accepts it"
        elif not says_refused(path, table_rows):
            yield f"{path}: the parser refuses it, and no row names it as refused"


def false_sames(table_rows: list[Row]) -> Iterator[str]:
    """Fields a "the same" row names that lack a probe, are refused, or hold a refused field."""
    refused = refused_probes()
    for names, cell in table_rows:
        if not is_same(cell):
            continue
        for name in names:
            probe = ACCEPTED_PROBES.get(name)
            if probe is None:
                yield f"{name}: said to be the same, with no probe here to check it"
            elif not parses(probe):
                yield f"{name}: said to be the same, but the parser refuses PKO's value"
            under = [p for p in refused if p == name or p.startswith(f"{name}.")]
            if under:
                yield f"{name}: said to be the same, but the parser refuses {under}"


def pko_fields_missing(table_rows: list[Row]) -> Iterator[str]:
    """Top-level fields of PKO v2's Stack spec that no row names."""
    named = {name for names, _ in table_rows for name in names}
    top = {match[1] for path in PKO_V2_FIELDS if (match := re.match(r"spec\.(\w+)", path))}
    for field in sorted(top):
        if not any(name == field or name.startswith(f"{field}.") for name in named):
            yield f"{field}: a field of PKO v2's Stack that the table does not name"


CHECKS: Final[tuple[Callable[[list[Row]], Iterator[str]], ...]] = (
    refusals_missing,
    false_sames,
    pko_fields_missing,
)


def problems(text: str) -> list[str]:
    """Everything wrong with the table in ``text`` (the page's section)."""
    table_rows = rows(text)
    return [problem for check in CHECKS for problem in check(table_rows)]


def test_the_table_says_exactly_what_differs() -> None:
    """Every refusal is a difference, every "the same" is accepted, every PKO field is there."""
    assert problems(section(MIGRATING, HEADING)) == []


def test_the_probes_are_pkos_fields_and_the_parsers() -> None:
    """The workspace keys read here are PKO's; every probe says what it claims to."""
    assert WORKSPACE_FIELDS <= PKO_WORKSPACE_FIELDS
    assert not [name for name, probe in ACCEPTED_PROBES.items() if not parses(probe)]
    assert not [name for name, probe in refused_probes().items() if parses(probe)]


def _replace_row(text: str, first_cell: str, new_row: str) -> str:
    start = text.index(f"| {first_cell} |")
    end = text.index("\n", start)
    return text[:start] + new_row + text[end:]


def _add_row(text: str, new_row: str) -> str:
    return text.replace("| --- | --- |\n", f"| --- | --- |\n{new_row}\n", 1)


DEPRECATED_ROW = "`accessTokenSecret`, `envs`, `envSecrets`, `secrets`, `gitAuthSecret`"
PLANTED: Final[Mapping[str, tuple[Callable[[str], str], str]]] = {
    "deprecated-said-same": (
        lambda text: _replace_row(text, DEPRECATED_ROW, f"| {DEPRECATED_ROW} | the same |"),
        "accessTokenSecret",
    ),
    "refused-pod-field-said-same": (
        lambda text: _add_row(text, f"| `{POD}.hostNetwork` | the same |"),
        f"{POD}.hostNetwork",
    ),
    "template-said-same": (
        lambda text: _add_row(text, "| `workspaceTemplate` | the same |"),
        "workspaceTemplate: said to be the same, but the parser refuses",
    ),
    "refusal-left-out": (
        lambda text: _replace_row(text, "`gitAuth.githubApp`", ""),
        "gitAuth.githubApp: the parser refuses it",
    ),
    "same-without-probe": (
        lambda text: _add_row(text, "| `spec.stackName` | the same |"),
        "spec.stackName: said to be the same, with no probe",
    ),
    "pko-field-left-out": (
        lambda text: _replace_row(text, "`useLocalStackOnly`", ""),
        "useLocalStackOnly: a field of PKO v2's Stack",
    ),
}


@pytest.mark.parametrize("planted", list(PLANTED))
def test_a_false_row_is_caught(planted: str) -> None:
    """Control: each planted falsehood in the real table is reported, naming its field."""
    plant, expected = PLANTED[planted]
    found = problems(plant(section(MIGRATING, HEADING)))
    assert any(expected in problem for problem in found), found
