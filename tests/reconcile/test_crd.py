"""The Stack CRD against a real kube-apiserver: schema, CEL rules, status limits, columns.

Every check goes through the real apiserver and the real kubectl, so a schema that the
apiserver reads differently from how we meant it fails here.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from reconcile.spec import SpecError, parse_spec
from tests.testbed.control_plane import ControlPlane

pytestmark = pytest.mark.integration

CRD_PATH = Path(__file__).parents[2] / "manifests" / "crd" / "stacks.pulumi.com.yaml"
SHA = "2b0889718d3e63feeb6079ccd5e4488d8601e353"
TIME = "2026-01-02T03:04:05Z"

DEFAULTED_STATUS = {"observedGeneration": 0}  # the CRD's default: kstatus reads InProgress
DEFAULT_COLUMNS = ["NAME", "READY", "REASON", "LAST UPDATE", "COMMIT", "AGE"]
WIDE_COLUMNS = [
    *DEFAULT_COLUMNS,
    *("STACK", "RECONCILING", "STALLED", "SUSPENDED", "OBSERVED", "GENERATION", "MESSAGE"),
]


def secret(name: str, key: str) -> dict[str, Any]:
    """A ResourceRef to a Secret key."""
    return {"type": "Secret", "secret": {"name": name, "key": key}}


# Every field this operator supports, in a Pulumi Kubernetes Operator manifest.
FULL_SPEC: dict[str, Any] = {
    "stack": "organization/proj/dev",  # a file:// backend's only organisation
    "backend": "file:///state",
    "projectRepo": "https://github.com/example/infra",
    "branch": "refs/heads/main",
    "repoDir": "stacks/app",
    "gitAuth": {
        "accessToken": secret("git", "token"),
        "sshAuth": {"sshPrivateKey": secret("git", "ssh"), "password": secret("git", "phrase")},
        "basicAuth": {
            "userName": {"type": "Literal", "literal": {"value": "bot"}},
            "password": secret("git", "password"),
        },
    },
    "config": {
        "aws:region": "us-east-2",
        "app:replicas": 3,
        "app:ratio": 0.5,
        "app:debug": True,
        "app:tags": {"team": "a", "tier": ["web", "api"]},
    },
    "secretsRef": {"db:password": secret("db", "password")},
    "envRefs": {
        "PULUMI_ACCESS_TOKEN": secret("pulumi", "accessToken"),
        "AWS_REGION": {"type": "Literal", "literal": {"value": "us-east-2"}},
    },
    "secretsProvider": "passphrase",
    "refresh": True,
    "expectNoRefreshChanges": True,
    "preview": False,
    "targets": ["urn:pulumi:dev::proj::aws:s3/bucket:Bucket::logs"],
    "useLocalStackOnly": True,
    "destroyOnFinalize": True,
    "prerequisites": [
        {"name": "network", "requirement": {"succeededWithinDuration": "1h30m"}},
        {"name": "database"},
    ],
    "resyncFrequencySeconds": 120,
    "continueResyncOnCommitMatch": True,
    "retryOnUpdateConflict": True,
    "retryMaxBackoffDurationSeconds": 600,
    "timeoutSeconds": 1800,
    "suspend": False,
}

MINIMAL_SPEC: dict[str, Any] = {
    "stack": "org/proj/dev",
    "projectRepo": "https://github.com/example/infra",
    "branch": "main",
}


@pytest.fixture
def plane(control_plane: ControlPlane, stack_crd: Path) -> ControlPlane:
    """The control plane, once the Stack CRD is served."""
    del stack_crd
    return control_plane


def apply_stack(
    plane: ControlPlane, tmp_path: Path, namespace: str, spec: dict[str, Any], name: str = "app"
) -> subprocess.CompletedProcess[str]:
    """Server-side apply a Stack; the result says whether the apiserver accepted it."""
    manifest = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    # JSON, not YAML: kubectl's YAML 1.1 reads a bare n or y as a boolean.
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(manifest))
    return plane.kubectl("apply", "--server-side", "-f", str(path), check=False)


def patch_status(
    plane: ControlPlane, namespace: str, name: str, status: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Merge-patch ``status`` through the status subresource."""
    body = json.dumps({"status": status})
    return plane.kubectl(
        "patch", "stack", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", body,
        check=False,
    )  # fmt: skip


def get_stack(plane: ControlPlane, namespace: str, name: str = "app") -> dict[str, Any]:
    """The Stack as the apiserver stores it."""
    result: dict[str, Any] = json.loads(
        plane.kubectl("get", "stack", name, "-n", namespace, "-o", "json").stdout
    )
    return result


def condition(type_: str = "Ready", status: str = "True", **fields: Any) -> dict[str, Any]:
    """A valid condition, with ``fields`` overriding the defaults."""
    base = {
        "type": type_,
        "status": status,
        "observedGeneration": 1,
        "lastTransitionTime": TIME,
        "reason": "Succeeded",
        "message": "Up to date",
    }
    return {**base, **fields}


def table(output: str) -> list[list[str]]:
    """The lines of a kubectl table as lists of cells; an empty cell is "".

    kubectl aligns every cell under its header, and headers are separated by 2+ spaces
    (one header, LAST UPDATE, contains a space), so the header's offsets cut the rows.
    """
    header, *lines = output.rstrip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in [header, *lines]]


@pytest.fixture
def stack(plane: ControlPlane, tmp_path: Path, namespace: str) -> str:
    """A minimal valid Stack named "app" in the test's namespace."""
    apply_stack(plane, tmp_path, namespace, MINIMAL_SPEC).check_returncode()
    return "app"


# -- the CRD itself ------------------------------------------------------------------------


def test_crd_names_versions_and_subresource(plane: ControlPlane) -> None:
    """The CRD serves pulumi.com/v1 Stack, namespaced, in category pulumi, with /status."""
    crd = json.loads(plane.kubectl("get", "crd", "stacks.pulumi.com", "-o", "json").stdout)
    spec = crd["spec"]
    assert spec["group"] == "pulumi.com"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "Stack"
    assert spec["names"]["plural"] == "stacks"
    assert spec["names"]["singular"] == "stack"
    assert spec["names"]["categories"] == ["pulumi"]
    assert "shortNames" not in spec["names"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}


def _properties(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, prop in schema.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from _properties(prop, f"{path}.{name}")
        if isinstance(prop.get("items"), dict):
            yield from _properties(prop["items"], f"{path}.{name}[]")
        if isinstance(prop.get("additionalProperties"), dict):
            yield from _properties(prop["additionalProperties"], f"{path}.{name}{{}}")


def test_every_field_has_a_description() -> None:
    """Every spec and status field carries a description for kubectl explain."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = [
        (path, prop)
        for part in ("spec", "status")
        for path, prop in _properties(root["properties"][part], part)
    ]
    assert len(fields) > 100
    assert [path for path, prop in fields if not prop.get("description")] == []


def test_kubectl_explain_shows_descriptions(plane: ControlPlane) -> None:
    """``kubectl explain`` shows field descriptions, including the resync clamp."""
    deadline = time.monotonic() + 30
    while True:  # the apiserver publishes a new CRD's OpenAPI asynchronously
        result = plane.kubectl("explain", "stacks.spec.resyncFrequencySeconds", check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "Values below 60, including 0 and unset, are treated as 60" in text


# -- spec validation -----------------------------------------------------------------------


def test_pko_manifest_is_accepted_unchanged(
    plane: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """A Stack using every supported field is stored as written (nothing pruned) and parses."""
    result = apply_stack(plane, tmp_path, namespace, FULL_SPEC)
    assert result.returncode == 0, result.stderr
    stored = get_stack(plane, namespace)
    assert stored["spec"] == FULL_SPEC
    parsed = parse_spec(stored["spec"], namespace)
    assert (parsed.branch, parsed.timeout_seconds) == ("main", 1800)


@pytest.mark.parametrize(
    ("fields", "path", "message"),
    [
        pytest.param(
            {"commit": SHA},
            "spec.branch",
            "commit and branch are mutually exclusive: set only one of them",
            id="commit-and-branch",
        ),
        pytest.param(
            {"branch": None},
            "spec.projectRepo",
            "projectRepo requires a commit or a branch: set exactly one of them",
            id="repo-without-commit-or-branch",
        ),
        pytest.param(
            {"branch": "", "commit": ""},
            "spec.projectRepo",
            "projectRepo requires a commit or a branch",
            id="empty-commit-and-branch",
        ),
        pytest.param(
            {"resyncFrequencySeconds": -1},
            "spec.resyncFrequencySeconds",
            "should be greater than or equal to 0",
            id="resync-negative",
        ),
        pytest.param(
            {"retryMaxBackoffDurationSeconds": 0},
            "spec.retryMaxBackoffDurationSeconds",
            "should be greater than or equal to 1",
            id="retry-backoff-zero",
        ),
        pytest.param(
            {"envRefs": {"A": {"type": "ConfigMap"}}},
            "spec.envRefs.A.type",
            'Unsupported value: "ConfigMap"',
            id="ref-type-enum",
        ),
        pytest.param(
            {"branch": None, "commit": "2b08897"},
            "spec.commit",
            "should match",
            id="commit-abbreviated",
        ),
        pytest.param(
            {"prerequisites": [{"name": "n", "requirement": {"succeededWithinDuration": "1 h"}}]},
            "spec.prerequisites[0].requirement.succeededWithinDuration",
            "should match",
            id="duration-pattern",
        ),
        pytest.param({"stack": None}, "spec.stack", "Required value", id="stack-required"),
        pytest.param(
            {"timeoutSeconds": 0},
            "spec.timeoutSeconds",
            "should be greater than or equal to 1",
            id="timeout-zero",
        ),
    ],
)
def test_apiserver_rejects_invalid_spec(
    plane: ControlPlane,
    tmp_path: Path,
    namespace: str,
    fields: dict[str, Any],
    path: str,
    message: str,
) -> None:
    """The apiserver refuses an invalid spec with the field path and our message."""
    spec = {k: v for k, v in {**MINIMAL_SPEC, **fields}.items() if v is not None}
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode != 0
    assert path in result.stderr
    assert message in result.stderr


TOKEN = "ghp_0123456789abcdefTOKEN"  # noqa: S105 - fake; errors must never echo it

# Specs that could only fail at run time: both the apiserver (CEL) and the parser refuse them.
DOOMED = [
    pytest.param(
        {"projectRepo": f"https://{TOKEN}@github.com/example/infra"},
        "spec.projectRepo",
        "credentials in the URL are refused",
        id="repo-token-in-url",
    ),
    pytest.param(
        {"projectRepo": f"https://bot:{TOKEN}@github.com/example/infra"},
        "spec.projectRepo",
        "remove them from projectRepo and set spec.gitAuth",
        id="repo-password-in-url",
    ),
    pytest.param(
        {"projectRepo": f"ssh://git:{TOKEN}@github.com/example/infra"},
        "spec.projectRepo",
        "credentials in the URL are refused",
        id="repo-ssh-password-in-url",
    ),
    pytest.param(
        {"projectRepo": f"ftp://{TOKEN}@github.com/example/infra"},
        "spec.projectRepo",
        "not a git URL the operator fetches",
        id="repo-ftp-with-token",
    ),
    pytest.param(
        {"projectRepo": "file:///srv/git/infra.git"},
        "spec.projectRepo",
        "not a git URL the operator fetches",
        id="repo-file-url",
    ),
    pytest.param(
        {"projectRepo": "/srv/git/infra.git"},
        "spec.projectRepo",
        "file:// and local paths are refused",
        id="repo-local-path",
    ),
    pytest.param(
        {"projectRepo": "ftp://host/infra.git"},
        "spec.projectRepo",
        "not a git URL the operator fetches",
        id="repo-ftp",
    ),
    pytest.param(
        {"projectRepo": "ssh://-oProxyCommand=touch%20x/r"},
        "spec.projectRepo",
        "starting with - is refused",
        id="repo-option-host",
    ),
    pytest.param(
        {"projectRepo": "git@-oProxyCommand=x:r"},
        "spec.projectRepo",
        "starting with - is refused",
        id="repo-scp-option-host",
    ),
    pytest.param(
        {"secretsRef": {":pw": secret("db", "pw")}},
        "spec.secretsRef",
        "no empty part",
        id="secret-config-key-empty-namespace",
    ),
    pytest.param(
        {"secretsRef": {"db:pw:x": secret("db", "pw")}},
        "spec.secretsRef",
        "config keys are name or namespace:name",
        id="secret-config-key-two-colons",
    ),
    pytest.param(
        {"secretsProvider": "vault"},
        "spec.secretsProvider",
        "unknown secrets provider: use default, passphrase, awskms://...",
        id="secrets-provider-unknown",
    ),
    pytest.param(
        {"secretsProvider": "awskms"},
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-without-key",
    ),
    pytest.param(
        {"stack": "acme/proj/dev", "backend": "file:///state"},
        "spec.stack",
        'knows only the organization "organization"',
        id="stack-org-on-file-backend",
    ),
    pytest.param(
        {"stack": "acme/dev", "backend": "s3://bucket"},
        "spec.stack",
        "use organization/project/stack or stack",
        id="stack-org-on-s3-backend",
    ),
]


@pytest.mark.parametrize(("fields", "path", "message"), DOOMED)
def test_apiserver_and_parser_refuse_what_could_only_fail_later(
    plane: ControlPlane,
    tmp_path: Path,
    namespace: str,
    fields: dict[str, Any],
    path: str,
    message: str,
) -> None:
    """The CEL rules refuse what the parser refuses; neither error repeats a URL's token."""
    spec = {**MINIMAL_SPEC, **fields}
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode != 0
    assert path in result.stderr
    assert message in " ".join(result.stderr.split())
    assert TOKEN not in result.stderr
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, namespace)
    assert refused.value.path.startswith(path)
    assert TOKEN not in str(refused.value)


def test_config_keys_are_left_to_the_parser(
    plane: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    """CEL cannot type config (any JSON values): a bad key is stored, and the parser refuses it."""
    spec = {**MINIMAL_SPEC, "config": {"a:b:c": "v"}}
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode == 0, result.stderr
    with pytest.raises(SpecError) as refused:
        parse_spec(get_stack(plane, namespace)["spec"], namespace)
    assert refused.value.path == "spec.config[a:b:c]"


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"projectRepo": "git@github.com:example/infra.git"}, id="scp-like"),
        pytest.param({"projectRepo": "github.com:example/infra.git"}, id="scp-like-no-user"),
        pytest.param({"projectRepo": "git@[::1]:infra.git"}, id="scp-like-ipv6"),
        pytest.param({"projectRepo": "ssh://git@github.com:22/example/infra"}, id="ssh-user"),
        pytest.param({"projectRepo": "git://127.0.0.1:9418/infra.git"}, id="git-daemon"),
        pytest.param({"projectRepo": "http://127.0.0.1:8080/infra.git"}, id="http"),
        pytest.param({"projectRepo": "https://host/path@v2/infra"}, id="at-in-path"),
        pytest.param({"config": {"name": "v", "aws:region": "w"}}, id="config-keys"),
        pytest.param({"secretsRef": {"app:pw": secret("db", "pw")}}, id="secret-config-key"),
        pytest.param({"secretsProvider": "default"}, id="provider-default"),
        pytest.param({"secretsProvider": "awskms:///arn:aws:kms:us-east-1:1:key/1"}, id="awskms"),
        pytest.param({"secretsProvider": "hashivault://key"}, id="hashivault"),
        pytest.param({"secretsProvider": ""}, id="provider-empty"),
        pytest.param({"stack": "organization/proj/dev", "backend": "file:///s"}, id="diy-org"),
        pytest.param({"stack": "dev", "backend": "gs://b"}, id="diy-plain-stack"),
        pytest.param({"stack": "acme/proj/dev", "backend": "https://api.pulumi.com"}, id="cloud"),
        pytest.param({"timeoutSeconds": 1}, id="timeout-1"),
    ],
)
def test_apiserver_and_parser_accept_what_can_work(
    plane: ControlPlane, tmp_path: Path, namespace: str, fields: dict[str, Any]
) -> None:
    """Every form the parser accepts passes the CEL rules too, and is stored unchanged."""
    spec = {**MINIMAL_SPEC, **fields}
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode == 0, result.stderr
    assert get_stack(plane, namespace)["spec"] == spec
    parse_spec(spec, namespace)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"branch": None, "commit": SHA}, id="commit-only"),
        pytest.param({"commit": ""}, id="empty-commit-is-unset"),
        pytest.param({"projectRepo": None, "branch": None}, id="no-source-left-to-the-operator"),
    ],
)
def test_apiserver_accepts_valid_sources(
    plane: ControlPlane, tmp_path: Path, namespace: str, fields: dict[str, Any]
) -> None:
    """Sources the CEL rules allow are accepted (the operator reports a missing source)."""
    spec = {k: v for k, v in {**MINIMAL_SPEC, **fields}.items() if v is not None}
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        pytest.param({"secrets": {"db:password": "hunter2"}}, "spec.secrets", id="secrets"),
        pytest.param({"envs": ["settings"]}, "spec.envs", id="envs"),
        pytest.param({"envSecrets": ["creds"]}, "spec.envSecrets", id="env-secrets"),
        pytest.param({"accessTokenSecret": "tok"}, "spec.accessTokenSecret", id="token-secret"),
        pytest.param({"gitAuthSecret": "git"}, "spec.gitAuthSecret", id="git-auth-secret"),
        pytest.param({"programRef": {"name": "p"}}, "spec.programRef", id="program-ref"),
        pytest.param(
            {"fluxSource": {"sourceRef": {"apiVersion": "v1", "kind": "K", "name": "n"}}},
            "spec.fluxSource",
            id="flux-source",
        ),
        pytest.param(
            {"envRefs": {"HOME_DIR": {"type": "Env", "env": {"name": "HOME"}}}},
            "spec.envRefs[HOME_DIR].type",
            id="env-ref",
        ),
        pytest.param(
            {"secretsRef": {"k": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}},
            "spec.secretsRef[k].type",
            id="fs-ref",
        ),
    ],
)
def test_refused_fields_reach_the_operator(
    plane: ControlPlane, tmp_path: Path, namespace: str, fields: dict[str, Any], path: str
) -> None:
    """Deprecated and unsupported PKO fields are kept, not pruned, so the parser refuses them."""
    result = apply_stack(plane, tmp_path, namespace, {**MINIMAL_SPEC, **fields})
    assert result.returncode == 0, result.stderr
    stored = get_stack(plane, namespace)["spec"]
    assert stored == {**MINIMAL_SPEC, **fields}
    with pytest.raises(SpecError) as refused:
        parse_spec(stored, namespace)
    assert refused.value.path == path


# -- status validation ---------------------------------------------------------------------


def test_a_new_stack_has_a_defaulted_status(
    plane: ControlPlane, tmp_path: Path, namespace: str, api_client: client.ApiClient
) -> None:
    """Before anyone writes status, create, GET, LIST and watch all show observedGeneration 0.

    kstatus reads observedGeneration < generation as InProgress: a Stack is never "Current"
    before the operator has seen it.
    """
    manifest = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": "fresh", "namespace": namespace},
        "spec": MINIMAL_SPEC,
    }
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(manifest))
    created = json.loads(plane.kubectl("create", "-f", str(path), "-o", "json").stdout)
    assert created["status"] == DEFAULTED_STATUS
    assert created["metadata"]["generation"] == 1
    assert get_stack(plane, namespace, "fresh")["status"] == DEFAULTED_STATUS
    listed = json.loads(plane.kubectl("get", "stacks", "-n", namespace, "-o", "json").stdout)
    assert [item["status"] for item in listed["items"]] == [DEFAULTED_STATUS]
    api = client.CustomObjectsApi(api_client)
    events = watch.Watch().stream(
        api.list_namespaced_custom_object,
        "pulumi.com",
        "v1",
        namespace,
        "stacks",
        timeout_seconds=30,
    )
    first = next(events)
    events.close()
    assert (first["type"], first["object"]["status"]) == ("ADDED", DEFAULTED_STATUS)


def test_status_writes_replace_the_default(plane: ControlPlane, namespace: str, stack: str) -> None:
    """A status patch lands on top of the default; the written observedGeneration wins."""
    patch_status(plane, namespace, stack, {"conditions": [condition()]}).check_returncode()
    assert get_stack(plane, namespace)["status"] == {
        "observedGeneration": 0,
        "conditions": [condition()],
    }
    patch_status(plane, namespace, stack, {"observedGeneration": 1}).check_returncode()
    assert get_stack(plane, namespace)["status"]["observedGeneration"] == 1


def test_valid_status_is_accepted(plane: ControlPlane, namespace: str, stack: str) -> None:
    """A status with every field the operator writes is accepted and stored as sent."""
    status = {
        "observedGeneration": 1,
        "conditions": [
            condition("Ready", "False", reason="UpdateFailed", message="boom"),
            condition("Reconciling", "True", reason="ProgressingWithRetry", message="retry"),
        ],
        "outputs": {"url": "https://example.com", "port": 80, "password": "[secret]"},
        "lastUpdate": {
            "state": "failed",
            "type": "up",
            "generation": 1,
            "lastAttemptedCommit": SHA,
            "lastSuccessfulCommit": SHA,
            "shortCommit": SHA[:7],
            "permalink": "https://app.pulumi.com/org/proj/dev/updates/3",
            "lastResyncTime": TIME,
            "message": "boom",
            "failures": 2,
            "reconcileRequest": "r1",
        },
        "currentUpdate": {
            "generation": 1,
            "commit": SHA,
            "type": "up",
            "startTime": TIME,
            "reconcileRequest": "r1",
        },
        "progress": {
            "step": "up",
            "resourcesDone": 3,
            "resourcesTotal": 5,
            "resourcesFailed": 0,
            "current": "urn:pulumi:dev::proj::aws:s3/bucket:Bucket::logs",
            "updatedAt": TIME,
        },
        "history": [
            {
                "type": "up",
                "result": "failed",
                "generation": 1,
                "commit": SHA,
                "startTime": TIME,
                "durationSeconds": 12.5,
                "resourceChanges": {"create": 2, "same": 1},
            }
        ],
        "observedReconcileRequest": "r1",
        "lastHandledReconcileAt": "2026-01-02T03:04:05.000000000Z",
    }
    result = patch_status(plane, namespace, stack, status)
    assert result.returncode == 0, result.stderr
    assert get_stack(plane, namespace)["status"] == status


@pytest.mark.parametrize(
    ("status", "path", "message"),
    [
        pytest.param(
            {"conditions": [condition(reason="not a reason")]},
            "status.conditions[0].reason",
            "should match",
            id="reason-pattern",
        ),
        pytest.param(
            {"conditions": [condition(reason="")]},
            "status.conditions[0].reason",
            "should be at least 1 chars long",
            id="reason-empty",
        ),
        pytest.param(
            {"conditions": [condition(status="Maybe")]},
            "status.conditions[0].status",
            'Unsupported value: "Maybe"',
            id="status-enum",
        ),
        pytest.param(
            {"conditions": [condition(message="x" * 40000)]},
            "status.conditions[0].message",
            "Too long",
            id="message-too-long",
        ),
        pytest.param(
            {"conditions": [condition(), condition(status="False")]},
            "status.conditions[1]",
            "Duplicate value",
            id="duplicate-type",
        ),
        pytest.param(
            {"conditions": [condition(type_="Not Ready")]},
            "status.conditions[0].type",
            "should match",
            id="type-pattern",
        ),
        pytest.param(
            {"conditions": [condition(lastTransitionTime="yesterday")]},
            "status.conditions[0].lastTransitionTime",
            "date-time",
            id="time-format",
        ),
        pytest.param(
            {"conditions": [{k: v for k, v in condition().items() if k != "message"}]},
            "status.conditions[0].message",
            "Required value",
            id="message-required",
        ),
        pytest.param(
            {"conditions": [condition(observedGeneration=-1)]},
            "status.conditions[0].observedGeneration",
            "should be greater than or equal to 0",
            id="observed-generation-negative",
        ),
        pytest.param(
            {"lastUpdate": {"state": "unknown"}},
            "status.lastUpdate.state",
            'Unsupported value: "unknown"',
            id="last-update-state",
        ),
        pytest.param(
            {"history": [{"type": "up", "result": "succeeded"}] * 11},
            "status.history",
            "must have at most 10 items",
            id="history-max-items",
        ),
    ],
)
def test_apiserver_rejects_invalid_status(
    plane: ControlPlane,
    namespace: str,
    stack: str,
    status: dict[str, Any],
    path: str,
    message: str,
) -> None:
    """A status patch that breaks the condition or status schema is refused and changes nothing."""
    result = patch_status(plane, namespace, stack, status)
    assert result.returncode != 0
    assert path in result.stderr
    assert message in result.stderr
    assert get_stack(plane, namespace)["status"] == DEFAULTED_STATUS


def test_status_writes_never_bump_generation(
    plane: ControlPlane, namespace: str, stack: str
) -> None:
    """Status patches leave metadata.generation alone; a spec change bumps it."""
    assert get_stack(plane, namespace)["metadata"]["generation"] == 1
    for n in range(3):
        status = {"observedGeneration": 1, "conditions": [condition(message=f"write {n}")]}
        patch_status(plane, namespace, stack, status).check_returncode()
    assert get_stack(plane, namespace)["metadata"]["generation"] == 1
    plane.kubectl(
        "patch", "stack", stack, "-n", namespace, "--type=merge", "-p", '{"spec":{"refresh":true}}'
    )
    assert get_stack(plane, namespace)["metadata"]["generation"] == 2


def test_main_resource_ignores_status(plane: ControlPlane, namespace: str, stack: str) -> None:
    """Status sent to the main resource is dropped: only /status can write it."""
    body = json.dumps({"status": {"observedGeneration": 7}})
    plane.kubectl("patch", "stack", stack, "-n", namespace, "--type=merge", "-p", body)
    assert get_stack(plane, namespace)["status"] == DEFAULTED_STATUS


# -- printer columns and category -----------------------------------------------------------


@pytest.fixture
def two_stacks(plane: ControlPlane, tmp_path: Path, namespace: str) -> None:
    """A Stack failing with retries ("retrying") and a suspended, stalled one ("stalled")."""
    apply_stack(plane, tmp_path, namespace, MINIMAL_SPEC, "retrying").check_returncode()
    stalled_spec = {**MINIMAL_SPEC, "stack": "org/proj/prod", "suspend": True}
    apply_stack(plane, tmp_path, namespace, stalled_spec, "stalled").check_returncode()
    retrying = {
        "observedGeneration": 1,
        "conditions": [
            condition("Ready", "False", reason="UpdateFailed", message="pulumi up failed: boom"),
            condition("Reconciling", "True", reason="ProgressingWithRetry", message="attempt 2"),
        ],
        "lastUpdate": {"state": "failed", "shortCommit": "2b08897"},
    }
    stalled = {
        "conditions": [
            condition("Ready", "False", reason="InvalidSpec", message="spec.stack: bad"),
            condition("Stalled", "True", reason="InvalidSpec", message="spec.stack: bad"),
        ],
    }
    patch_status(plane, namespace, "retrying", retrying).check_returncode()
    patch_status(plane, namespace, "stalled", stalled).check_returncode()


@pytest.mark.usefixtures("two_stacks")
def test_default_columns(plane: ControlPlane, namespace: str) -> None:
    """``kubectl get stacks`` shows Ready, its reason, the last update, commit and age."""
    header, *rows = table(plane.kubectl("get", "stacks", "-n", namespace).stdout)
    assert header == DEFAULT_COLUMNS
    by_name = {row[0]: row[1:] for row in rows}
    retrying_age = by_name["retrying"].pop()
    stalled_age = by_name["stalled"].pop()
    assert by_name == {
        "retrying": ["False", "UpdateFailed", "failed", "2b08897"],
        "stalled": ["False", "InvalidSpec", "", ""],
    }
    assert re.fullmatch(r"\d+[smhd]\S*", retrying_age)
    assert re.fullmatch(r"\d+[smhd]\S*", stalled_age)


@pytest.mark.usefixtures("two_stacks")
def test_wide_columns(plane: ControlPlane, namespace: str) -> None:
    """-o wide adds the stack, Reconciling/Stalled reasons, suspend, generations, message."""
    header, *rows = table(plane.kubectl("get", "stacks", "-n", namespace, "-o", "wide").stdout)
    assert header == WIDE_COLUMNS
    by_name = {row[0]: row[1:5] + row[6:] for row in rows}  # without AGE
    assert by_name == {
        "retrying": [
            *("False", "UpdateFailed", "failed", "2b08897"),
            *("org/proj/dev", "ProgressingWithRetry", "", "", "1", "1"),
            "pulumi up failed: boom",
        ],
        "stalled": [
            *("False", "InvalidSpec", "", ""),
            *("org/proj/prod", "", "InvalidSpec", "true", "0", "1"),  # the defaulted status
            "spec.stack: bad",
        ],
    }


@pytest.mark.usefixtures("two_stacks")
def test_category_lists_stacks(plane: ControlPlane, namespace: str) -> None:
    """``kubectl get pulumi`` lists Stacks (the CRD is in category pulumi)."""
    names = plane.kubectl("get", "pulumi", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(names) == ["stack.pulumi.com/retrying", "stack.pulumi.com/stalled"]
