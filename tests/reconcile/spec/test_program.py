"""``reconcile.spec.program``: PKO's Programs parse and render as PKO's; errors name paths.

The CRD side (``manifests/crd/programs.pulumi.com.yaml``) is checked here as a file: it
declares every field of PKO v2's Program CRD with the same type (``PKO_FIELDS``, taken from
PKO's ``deploy/crds/pulumi.com_programs.yaml``), and exactly the fields the parser reads.
``tests/reconcile/crd/test_program_crd.py`` puts the same programs through a real apiserver.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.spec.model import SpecError
from reconcile.spec.program import (
    CONFIG_TYPES,
    PROGRAM_FIELDS,
    ProgramSpec,
    parse_program,
    program_revision,
    render_project,
)
from tests.reconcile.spec.helpers import freeze

PROGRAM_CRD = Path(__file__).parents[3] / "manifests" / "crd" / "programs.pulumi.com.yaml"

# -- PKO's examples and what PKO renders of them --------------------------------------------

# PKO v2's examples/program-source/program.yaml, as published (less a line of trailing spaces).
PKO_PROGRAM_SOURCE = """\
apiVersion: pulumi.com/v1
kind: Program
metadata:
  name: random-yaml
program:
  resources:
    randomPassword:
      type: random:RandomPassword
      properties:
        length: 16
        special: true
        overrideSpecial: "_%@"

  outputs:
    password: ${randomPassword.result}"""

# The project file PKO serves for it (programToProject, then sigs.k8s.io/yaml: keys sorted).
PKO_PROGRAM_SOURCE_PROJECT = """\
name: random-yaml
outputs:
  password: ${randomPassword.result}
resources:
  randomPassword:
    properties:
      length: 16
      overrideSpecial: _%@
      special: true
    type: random:RandomPassword
runtime: yaml
"""

# The Program of PKO v2's examples/preview-demo/stack.yaml: configuration stays configuration.
PKO_PREVIEW_DEMO = """\
apiVersion: pulumi.com/v1
kind: Program
metadata:
  name: nginx-deployment
  namespace: default
program:
  resources:
    nginx-deployment:
      type: kubernetes:apps/v1:Deployment
      properties:
        metadata:
          name: nginx
        spec:
          replicas: ${replicas}
          selector:
            matchLabels:
              app: nginx
          template:
            metadata:
              labels:
                app: nginx
            spec:
              containers:
                - name: nginx
                  image: nginx:1.27-alpine
                  ports:
                    - containerPort: 80
  configuration:
    replicas:
      type: Number
      default: 2
"""

PKO_PREVIEW_DEMO_PROJECT = """\
configuration:
  replicas:
    default: 2
    type: Number
name: nginx-deployment
resources:
  nginx-deployment:
    properties:
      metadata:
        name: nginx
      spec:
        replicas: ${replicas}
        selector:
          matchLabels:
            app: nginx
        template:
          metadata:
            labels:
              app: nginx
          spec:
            containers:
            - image: nginx:1.27-alpine
              name: nginx
              ports:
              - containerPort: 80
    type: kubernetes:apps/v1:Deployment
runtime: yaml
"""

PKO_EXAMPLES = {
    "program-source": (PKO_PROGRAM_SOURCE, PKO_PROGRAM_SOURCE_PROJECT),
    "preview-demo": (PKO_PREVIEW_DEMO, PKO_PREVIEW_DEMO_PROJECT),
}

# Every field the CRD declares, each set to a value that survives normalisation unchanged.
FULL_PROGRAM: dict[str, Any] = {
    "configuration": {
        "region": {"type": "String", "default": "eu-west-1"},
        "replicas": {"type": "Number", "default": 2},
        "zones": {"type": "List<String>"},
        "token": {"type": "String", "secret": True},
        "tags": {"default": {"team": "a"}},
    },
    "resources": {
        "provider": {
            "type": "pulumi:providers:kubernetes",
            "name": "k8s",
            "defaultProvider": True,
            "properties": {"namespace": "apps"},
        },
        "bucket": {
            "type": "aws:s3/bucket:Bucket",
            "properties": {"forceDestroy": False, "tags": {"team": "${tags.team}"}},
            "options": {
                "additionalSecretOutputs": ["arn"],
                "aliases": ["urn:pulumi:dev::proj::aws:s3/bucket:Bucket::old"],
                "customTimeouts": {"create": "10m", "delete": "5m", "update": "1h"},
                "deleteBeforeReplace": True,
                "dependsOn": ["${provider}"],
                "ignoreChanges": ["tags"],
                "import": "my-bucket",
                "parent": "${provider}",
                "protect": True,
                "provider": "${provider}",
                "providers": {"kubernetes": "${provider}"},
                "version": "6.0.0",
                "retainOnDelete": True,
                "replaceOnChanges": ["bucketPrefix"],
                "pluginDownloadURL": "https://example.com/plugins",
                "deletedWith": "${provider}",
            },
        },
        "existing": {
            "type": "aws:ec2:Vpc",
            "get": {"id": "vpc-123", "state": {"cidrBlock": "10.0.0.0/16"}},
        },
    },
    "variables": {
        "ami": {"fn::invoke": {"function": "aws:ec2:getAmi", "arguments": {"owners": ["self"]}}},
        "label": "${region}-${replicas}",
    },
    "outputs": {"arn": "${bucket.arn}", "answer": 42, "flags": [True, None]},
    "packages": {
        "talos-go-component": "https://github.com/dirien/pulumi-talos-go-component@0.0.1",
        "custom-component": "file://./custom",
    },
}


def example(name: str) -> dict[str, Any]:
    """The ``program`` of PKO example ``name``."""
    program: dict[str, Any] = yaml.safe_load(PKO_EXAMPLES[name][0])["program"]
    return program


def assert_refused(program: Any, path: str, fragment: str) -> SpecError:
    """``parse_program(program)`` raises on ``path`` with ``fragment`` in the problem."""
    with pytest.raises(SpecError) as refused:
        parse_program(program)
    assert refused.value.path == path, str(refused.value)
    assert str(refused.value).startswith(f"{path}: ")
    assert fragment in refused.value.problem, refused.value.problem
    return refused.value


def with_resource(**fields: Any) -> dict[str, Any]:
    """A program with one resource "bucket" of ``fields`` (type defaulted)."""
    return {"resources": {"bucket": {"type": "aws:s3:Bucket", **fields}}}


# -- valid programs render as PKO renders them ---------------------------------------------


@pytest.mark.parametrize("name", list(PKO_EXAMPLES))
def test_pko_example_renders_as_pko_renders_it(name: str) -> None:
    """PKO's example Programs render to the project file PKO serves, key for key."""
    manifest = yaml.safe_load(PKO_EXAMPLES[name][0])
    text = render_project(manifest["metadata"]["name"], parse_program(manifest["program"]))
    assert text == PKO_EXAMPLES[name][1]


def test_every_field_is_kept_and_rendered_in_sections() -> None:
    """A program setting every field renders every section under its own name."""
    spec = parse_program(FULL_PROGRAM)
    assert spec.program() == FULL_PROGRAM
    text = render_project("full", spec)
    assert yaml.safe_load(text) == {"name": "full", "runtime": "yaml", **FULL_PROGRAM}
    top_level = [line.split(":")[0] for line in text.splitlines() if not line.startswith(" ")]
    assert top_level == sorted(["name", "runtime", *PROGRAM_FIELDS])


def test_rendering_is_deterministic_and_sorted() -> None:
    """Key order in the input does not matter; every level of the output is sorted."""
    reordered = json.loads(json.dumps(FULL_PROGRAM), object_pairs_hook=lambda p: dict(p[::-1]))
    assert list(reordered) != list(FULL_PROGRAM)
    text = render_project("p", parse_program(FULL_PROGRAM))
    assert render_project("p", parse_program(reordered)) == text
    assert_sorted(yaml.safe_load(text))  # dicts keep the document's order


def assert_sorted(value: Any) -> None:
    """Every mapping in ``value``, at any depth, has its keys in sorted order."""
    if isinstance(value, dict):
        assert list(value) == sorted(value)
        for item in value.values():
            assert_sorted(item)
    elif isinstance(value, list):
        for item in value:
            assert_sorted(item)


def test_unset_values_are_left_out_as_pko_omits_them() -> None:
    """null, "", [], {} and false options are unset (omitempty); expressions keep falsy values."""
    noisy = {
        "configuration": {"c": {"type": "", "default": 0, "secret": False}},
        "resources": {
            "bucket": {
                "type": "aws:s3:Bucket",
                "name": "",
                "defaultProvider": False,
                "properties": {"forceDestroy": False, "acl": None},
                "options": {
                    "protect": False,
                    "aliases": [],
                    "providers": {},
                    "import": "",
                    "parent": None,
                    "customTimeouts": {"create": ""},
                    "dependsOn": None,
                },
                "get": None,
            },
            "plain": {"type": "random:RandomPet", "options": {}, "properties": {}},
        },
        "variables": None,
        "outputs": {},
        "packages": None,
    }
    assert parse_program(noisy).program() == {
        "configuration": {"c": {"default": 0}},
        "resources": {
            "bucket": {
                "type": "aws:s3:Bucket",
                "properties": {"forceDestroy": False, "acl": None},
            },
            "plain": {"type": "random:RandomPet"},
        },
    }
    assert parse_program(None) == parse_program({}) == ProgramSpec()
    assert render_project("empty", parse_program(None)) == "name: empty\nruntime: yaml\n"


def test_cached_forms_parse_the_same_and_nothing_is_mutated() -> None:
    """Read-only mappings and tuples (the informer cache) read as dicts and lists do."""
    before = copy.deepcopy(FULL_PROGRAM)
    assert parse_program(freeze(FULL_PROGRAM)) == parse_program(FULL_PROGRAM)
    assert before == FULL_PROGRAM


def test_every_configuration_type_is_accepted() -> None:
    """Each of Pulumi YAML's configuration types, PKO's four among them, parses."""
    program = {"configuration": {f"c{i}": {"type": t} for i, t in enumerate(CONFIG_TYPES)}}
    types = [entry["type"] for entry in parse_program(program).program()["configuration"].values()]
    assert sorted(types) == sorted(CONFIG_TYPES)
    assert {"String", "Number", "List<Number>", "List<String>"} <= set(CONFIG_TYPES)


NUMBER_LIKE = ["1e3", "0o17", "0x1F", "1_000", ".5", "+1", "-2.5e-3", "1.0e3", ".inf", "007"]


def test_strings_a_yaml_1_2_reader_could_take_for_numbers_are_quoted() -> None:
    """PyYAML (YAML 1.1) would write 1e3 or 0o17 plain; Pulumi YAML (1.2) reads numbers there."""
    text = render_project("p", parse_program({"outputs": {"values": NUMBER_LIKE, "n": 1}}))
    for value in NUMBER_LIKE:
        assert f'- "{value}"\n' in text
    assert "  n: 1\n" in text
    assert yaml.safe_load(text)["outputs"]["values"] == NUMBER_LIKE


def test_multi_line_and_unicode_strings_round_trip() -> None:
    """Multi-line strings are literal blocks; non-ASCII text is written as is."""
    outputs = {"script": "#!/bin/sh\necho ok\n", "greeting": "héllo ☃", "key\nwith newline": 1}
    text = render_project("p", parse_program({"outputs": outputs}))
    assert "  script: |\n    #!/bin/sh\n    echo ok\n" in text
    assert "héllo ☃" in text
    assert yaml.safe_load(text)["outputs"] == outputs


@pytest.mark.parametrize("name", ["random-yaml", "a", "A.b_c-1", "_x", ".x", "a" * 100])
def test_project_names_accepted(name: str) -> None:
    """Any Pulumi project name works, Kubernetes object names included."""
    assert yaml.safe_load(render_project(name, ProgramSpec())) == {"name": name, "runtime": "yaml"}


@pytest.mark.parametrize("name", ["", "1abc", "-a", "a b", "a/b", "a:b", "a" * 101, "é"])
def test_project_names_refused(name: str) -> None:
    """What tokens.ValidateProjectName refuses is refused before any text is written."""
    with pytest.raises(ValueError, match="not a Pulumi project name"):
        render_project(name, ProgramSpec())


# -- the revision ---------------------------------------------------------------------------


def test_revision_is_the_sha256_of_the_text() -> None:
    """``sha256:<hex>`` of the UTF-8 text."""
    text = render_project("p", parse_program(FULL_PROGRAM))
    revision = program_revision(text)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", revision)
    assert revision == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert program_revision("é") != program_revision("e")


def variants() -> Iterator[tuple[str, dict[str, Any]]]:
    """(project name, program) pairs, some rendering alike and some not."""
    base = example("program-source")
    yield "random-yaml", base
    yield "random-yaml", copy.deepcopy(base)
    yield "random-yaml", {**base, "variables": {}, "configuration": None}  # unset: same text
    yield "random-yaml", dict(reversed(base.items()))  # key order: same text
    yield "other-name", base
    length = copy.deepcopy(base)
    length["resources"]["randomPassword"]["properties"]["length"] = 17
    yield "random-yaml", length
    as_string = copy.deepcopy(base)
    as_string["resources"]["randomPassword"]["properties"]["length"] = "16"
    yield "random-yaml", as_string
    protected = copy.deepcopy(base)
    protected["resources"]["randomPassword"]["options"] = {"protect": True}
    yield "random-yaml", protected
    yield "random-yaml", {**base, "packages": {"random": "random@4.16.0"}}


def test_revision_changes_if_and_only_if_the_text_changes() -> None:
    """Two renders have the same revision exactly when their texts are equal."""
    texts = [render_project(name, parse_program(program)) for name, program in variants()]
    assert len(set(texts)) == 6  # the first four render alike; the other five differ
    for a, b in itertools.combinations(texts, 2):
        assert (program_revision(a) == program_revision(b)) == (a == b)


# -- ProgramSpec ----------------------------------------------------------------------------


def test_program_spec_is_hashable_and_canonical() -> None:
    """Equal programs make equal, hashable values; one built by hand is re-encoded."""
    reordered = dict(reversed(FULL_PROGRAM.items()))
    assert len({parse_program(FULL_PROGRAM), parse_program(reordered)}) == 1
    by_hand = ProgramSpec('{ "outputs": {"b": 1, "a": 2} }')
    assert by_hand.program_json == '{"outputs":{"a":2,"b":1}}'
    fresh = by_hand.program()
    fresh["outputs"]["a"] = 3
    assert by_hand.program() == {"outputs": {"a": 2, "b": 1}}


@pytest.mark.parametrize("text", ["[]", '"x"', '{"name": "evil"}', '{"runtime": "nodejs"}'])
def test_program_spec_holds_only_sections(text: str) -> None:
    """A hand-built value must be an object of sections: it can never replace name or runtime."""
    with pytest.raises(ValueError, match="program_json"):
        ProgramSpec(text)


# -- refusals name the field and the fix -----------------------------------------------------

B = "program.resources.bucket"

REFUSED: list[Any] = [
    pytest.param([], "program", "must be an object", id="program-not-object"),
    pytest.param({"resource": {}}, "program.resource", "unknown field", id="unknown-section"),
    pytest.param(with_resource(typo=1), f"{B}.typo", "unknown field: remove it", id="resource"),
    pytest.param(
        with_resource(options={"protected": True}),
        f"{B}.options.protected",
        "unknown field",
        id="option",
    ),
    pytest.param(
        with_resource(options={"customTimeouts": {"read": "1m"}}),
        f"{B}.options.customTimeouts.read",
        "unknown field",
        id="timeout",
    ),
    pytest.param(
        with_resource(get={"id": "x", "State": {}}), f"{B}.get.State", "unknown field", id="get"
    ),
    pytest.param(
        {"configuration": {"c": {"type": "String", "description": "d"}}},
        "program.configuration.c.description",
        "unknown field",
        id="configuration",
    ),
    pytest.param({"resources": {"bucket": {}}}, f"{B}.type", "is required", id="no-type"),
    pytest.param(
        {"resources": {"bucket": {"type": ""}}}, f"{B}.type", "is required", id="empty-type"
    ),
    pytest.param(
        {"resources": {"bucket": {"properties": {"a": 1}}}}, f"{B}.type", "is required", id="type"
    ),
    pytest.param(with_resource(type=7), f"{B}.type", "must be a string", id="type-not-string"),
    pytest.param(
        with_resource(type="RandomPassword"),
        f"{B}.type",
        "use package:Type or package:module:Type",
        id="type-one-part",
    ),
    pytest.param(
        with_resource(type="a:b:c:d"), f"{B}.type", "not a resource type token", id="four-parts"
    ),
    pytest.param(
        with_resource(type="aws::Bucket"), f"{B}.type", "not a resource type token", id="empty"
    ),
    pytest.param(
        with_resource(type=" aws:s3:Bucket"), f"{B}.type", "not a resource type token", id="space"
    ),
    pytest.param(
        with_resource(properties=["a"]), f"{B}.properties", "must be an object", id="properties"
    ),
    pytest.param(
        with_resource(properties={"length": 1}, get={"id": "x"}),
        f"{B}.get",
        "properties and get are mutually exclusive",
        id="properties-and-get",
    ),
    pytest.param(with_resource(get={"state": {}}), f"{B}.get.id", "is required", id="get-id"),
    pytest.param(
        with_resource(options={"protect": "yes"}),
        f"{B}.options.protect",
        "must be true or false",
        id="protect",
    ),
    pytest.param(
        with_resource(options={"aliases": ["a", ""]}),
        f"{B}.options.aliases[1]",
        "non-empty string",
        id="alias",
    ),
    pytest.param(
        with_resource(options={"dependsOn": "${a}"}),
        f"{B}.options.dependsOn",
        "must be a list",
        id="depends-on",
    ),
    pytest.param(
        with_resource(options={"customTimeouts": {"create": 5}}),
        f"{B}.options.customTimeouts.create",
        "must be a string",
        id="timeout-type",
    ),
    pytest.param(
        {"configuration": {"c": {"type": "int"}}},
        "program.configuration.c.type",
        "use one of String, Number, Integer, Boolean, Object, List<String>",
        id="config-type",
    ),
    pytest.param(
        {"configuration": {"c": {"type": "string"}}},
        "program.configuration.c.type",
        "unknown configuration type 'string'",
        id="config-type-case",
    ),
    pytest.param(
        {"configuration": {"c": {}}},
        "program.configuration.c",
        "set type, default or both",
        id="config-untyped",
    ),
    pytest.param(
        {"configuration": {"c": {"secret": True, "default": None}}},
        "program.configuration.c",
        "set type, default or both",
        id="config-null-default",
    ),
    pytest.param(
        {"configuration": {"c": "hello"}},
        "program.configuration.c",
        "must be an object",
        id="config-shorthand",
    ),
    pytest.param(
        {"resources": {"": {"type": "a:b"}}}, "program.resources", "empty name", id="empty-name"
    ),
    pytest.param({"outputs": {"": 1}}, "program.outputs", "empty name", id="empty-output"),
    pytest.param(
        {"variables": {"pulumi": 1}},
        "program.variables.pulumi",
        "reserves the name pulumi",
        id="reserved-variable",
    ),
    pytest.param(
        {"resources": {"pulumi": {"type": "a:b"}}},
        "program.resources.pulumi",
        "rename the resource",
        id="reserved-resource",
    ),
    pytest.param(
        {"configuration": {"pulumi": {"type": "String"}}},
        "program.configuration.pulumi",
        "rename the configuration",
        id="reserved-configuration",
    ),
    pytest.param(
        {"configuration": {"x": {"type": "String"}}, "resources": {"x": {"type": "a:b"}}},
        "program.resources.x",
        "the configuration 'x' has this name already",
        id="config-and-resource",
    ),
    pytest.param(
        {"resources": {"x": {"type": "a:b"}}, "variables": {"x": 1}},
        "program.variables.x",
        "the resource 'x' has this name already",
        id="resource-and-variable",
    ),
    pytest.param(
        {"packages": {"p": ""}}, "program.packages.p", "package's source", id="empty-source"
    ),
    pytest.param(
        {"packages": {"p": {"source": "x"}}},
        "program.packages.p",
        "package's source",
        id="source-object",
    ),
    pytest.param(
        {"packages": {"p": "a b"}}, "program.packages.p", "without spaces", id="source-space"
    ),
    pytest.param(
        {"packages": {"a:b": "x"}}, "program.packages", "not a package name", id="package-name"
    ),
    pytest.param({"outputs": {"x": float("nan")}}, "program", "must be JSON", id="nan"),
]


@pytest.mark.parametrize(("program", "path", "fragment"), REFUSED)
def test_refused(program: Any, path: str, fragment: str) -> None:
    """The error names the field's path and says what to do."""
    assert_refused(program, path, fragment)


def test_outputs_may_share_names_with_anything() -> None:
    """Outputs live apart: an output may be named after a resource (or pulumi)."""
    program = {"resources": {"x": {"type": "a:b"}}, "outputs": {"x": "${x}", "pulumi": 1}}
    assert set(parse_program(program).program()["outputs"]) == {"x", "pulumi"}


# -- the CRD declares PKO's fields, and the parser reads exactly the CRD's -----------------

# Every field path of PKO v2's Program CRD (deploy/crds/pulumi.com_programs.yaml) with its
# schema type: "*" is a map's entries, "[]" a list's items, "any" preserve-unknown-fields.
PKO_FIELDS = {
    "program": "object",
    "program.configuration": "object",
    "program.configuration.*": "object",
    "program.configuration.*.default": "any",
    "program.configuration.*.type": "string",
    "program.outputs": "object",
    "program.outputs.*": "any",
    "program.packages": "object",
    "program.packages.*": "string",
    "program.resources": "object",
    "program.resources.*": "object",
    "program.resources.*.get": "object",
    "program.resources.*.get.id": "string",
    "program.resources.*.get.state": "object",
    "program.resources.*.get.state.*": "any",
    "program.resources.*.options": "object",
    "program.resources.*.options.additionalSecretOutputs": "array",
    "program.resources.*.options.additionalSecretOutputs[]": "string",
    "program.resources.*.options.aliases": "array",
    "program.resources.*.options.aliases[]": "string",
    "program.resources.*.options.customTimeouts": "object",
    "program.resources.*.options.customTimeouts.create": "string",
    "program.resources.*.options.customTimeouts.delete": "string",
    "program.resources.*.options.customTimeouts.update": "string",
    "program.resources.*.options.deleteBeforeReplace": "boolean",
    "program.resources.*.options.dependsOn": "array",
    "program.resources.*.options.dependsOn[]": "any",
    "program.resources.*.options.ignoreChanges": "array",
    "program.resources.*.options.ignoreChanges[]": "string",
    "program.resources.*.options.import": "string",
    "program.resources.*.options.parent": "any",
    "program.resources.*.options.protect": "boolean",
    "program.resources.*.options.provider": "any",
    "program.resources.*.options.providers": "object",
    "program.resources.*.options.providers.*": "any",
    "program.resources.*.options.version": "string",
    "program.resources.*.properties": "object",
    "program.resources.*.properties.*": "any",
    "program.resources.*.type": "string",
    "program.variables": "object",
    "program.variables.*": "any",
    "status": "object",
    "status.artifact": "object",
    "status.artifact.digest": "string",
    "status.artifact.lastUpdateTime": "string/date-time",
    "status.artifact.metadata": "object",
    "status.artifact.metadata.*": "string",
    "status.artifact.path": "string",
    "status.artifact.revision": "string",
    "status.artifact.size": "integer/int64",
    "status.artifact.url": "string",
    "status.observedGeneration": "integer/int64",
}

# PKO's enum of configuration types.
PKO_CONFIG_TYPES = ("String", "Number", "List<Number>", "List<String>")


def crd_root() -> dict[str, Any]:
    """The openAPIV3Schema of our Program CRD."""
    crd = yaml.safe_load(PROGRAM_CRD.read_text())
    [version] = crd["spec"]["versions"]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def kind(schema: dict[str, Any]) -> str:
    """A schema's type (with its format), or "any" for an untyped preserve-unknown-fields."""
    if "type" not in schema:
        assert schema.get("x-kubernetes-preserve-unknown-fields") is True
        return "any"
    return "/".join(filter(None, (schema["type"], schema.get("format"))))


def schema_fields(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of ``schema`` and everything under it, in PKO_FIELDS' notation."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from schema_fields(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_fields(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from schema_fields(schema["items"], f"{path}[]")


def crd_fields(*parts: str) -> dict[str, str]:
    """Path → kind of every field under the root's ``parts``."""
    root = crd_root()
    return {
        path: kind(schema)
        for part in parts
        for path, schema in schema_fields(root["properties"][part], part)
    }


def value_fields(schema: dict[str, Any], value: Any, path: str) -> Iterator[str]:
    """The paths (PKO_FIELDS' notation) of ``schema`` that ``value`` sets."""
    yield path
    if isinstance(value, dict):
        for name, sub in value.items():
            if name in schema.get("properties", {}):
                yield from value_fields(schema["properties"][name], sub, f"{path}.{name}")
            elif isinstance(schema.get("additionalProperties"), dict):
                yield from value_fields(schema["additionalProperties"], sub, f"{path}.*")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from value_fields(schema["items"], item, f"{path}[]")


def test_crd_declares_every_pko_field_with_its_type() -> None:
    """Our CRD's field set is a superset of PKO v2's, each field with PKO's type."""
    ours = crd_fields("program", "status")
    assert {path: ours.get(path) for path in PKO_FIELDS} == PKO_FIELDS
    beyond = sorted(set(ours) - set(PKO_FIELDS))
    assert all(path.startswith("program.") for path in beyond), beyond


def test_crd_keeps_pko_shape_and_preserves_what_pko_preserves() -> None:
    """Top-level program (no spec); PKO's required fields only; expressions stay any JSON."""
    root = crd_root()
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "program", "status"}
    assert "required" not in root
    fields = dict(schema_fields(root["properties"]["program"], "program"))
    assert {path for path, schema in fields.items() if "required" in schema} == {
        "program.resources.*",
        "program.resources.*.get",
    }
    assert fields["program.resources.*"]["required"] == ["type"]
    assert fields["program.resources.*.get"]["required"] == ["id"]
    preserved = {
        path
        for path, schema in fields.items()
        if schema.get("x-kubernetes-preserve-unknown-fields")
    }
    pko_any = {path for path, k in PKO_FIELDS.items() if k == "any"}
    assert pko_any <= preserved
    assert preserved - pko_any == {"program.resources.*.options.deletedWith"}


def test_crd_configuration_types_are_the_parsers_and_include_pkos() -> None:
    """The CRD's enum is CONFIG_TYPES exactly, PKO's four among them."""
    fields = dict(schema_fields(crd_root()["properties"]["program"], "program"))
    enum = fields["program.configuration.*.type"]["enum"]
    assert tuple(enum) == CONFIG_TYPES
    assert set(PKO_CONFIG_TYPES) <= set(enum)


def test_parser_reads_exactly_the_crds_fields() -> None:
    """FULL_PROGRAM sets every field the CRD declares, and the parser keeps every one."""
    schema = crd_root()["properties"]["program"]
    declared = set(crd_fields("program"))
    assert set(value_fields(schema, FULL_PROGRAM, "program")) == declared
    assert parse_program(FULL_PROGRAM).program() == FULL_PROGRAM
    assert set(schema["properties"]) == PROGRAM_FIELDS


def test_every_crd_field_has_a_description() -> None:
    """Every program and status field has a description (for ``kubectl explain``)."""
    root = crd_root()
    undescribed = [
        path
        for part in ("program", "status")
        for path, schema in schema_fields(root["properties"][part], part)
        if not schema.get("description") and not path.endswith("[]")
    ]
    assert undescribed == []
