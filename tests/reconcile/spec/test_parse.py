"""``reconcile.spec.parse``: PKO manifests parse unchanged; every other field is checked.

Field-level rules of the other modules are tested beside them (``test_config``,
``test_resource_refs``, ``test_repo_url``, ``test_backend_rules``, ``test_workspace``,
``test_volumes``). The cases shared with the CRD tests (``cases``) are judged here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from reconcile.spec import (
    DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
    MIN_RESYNC_SECONDS,
    SPEC_FIELDS,
    GitAuth,
    Prerequisite,
    ResourceRef,
    SecretKeyRef,
    SpecError,
    StackSpec,
    Workspace,
    parse_spec,
)
from reconcile.spec.model import FluxSourceRef
from tests.reconcile.spec.cases import CASES, Case, check_parser_verdict, each
from tests.reconcile.spec.helpers import (
    CRD,
    NS,
    REPO,
    SHA,
    assert_refused,
    base,
    freeze,
    literal,
    secret,
    without,
)

# -- PKO manifests parse unchanged --------------------------------------------------------

PKO_NGINX = f"""
stack: moolumi/nginx/dev
projectRepo: https://github.com/pulumi/examples
repoDir: kubernetes-ts-nginx
commit: {SHA}
envRefs:
  PULUMI_ACCESS_TOKEN:
    type: Secret
    secret:
      name: pulumi-api-secret
      key: accessToken
config:
  kubernetes:namespace: default
destroyOnFinalize: true
"""

PKO_S3 = f"""
stack: joeduffy/s3-op-project/dev
projectRepo: https://github.com/joeduffy/test-s3-op-project
branch: refs/heads/master
gitAuth:
  accessToken:
    type: Secret
    secret:
      namespace: {NS}
      name: git-token
      key: token
envRefs:
  PULUMI_ACCESS_TOKEN:
    type: Secret
    secret: {{name: pulumi-api-secret, key: accessToken}}
  AWS_REGION:
    type: Literal
    literal: {{value: us-east-2}}
secretsRef:
  aws:secretKey:
    type: Secret
    secret: {{name: aws-creds, key: secretKey}}
config:
  aws:region: us-east-2
refresh: true
expectNoRefreshChanges: true
resyncFrequencySeconds: 30
continueResyncOnCommitMatch: true
retryOnUpdateConflict: true
useLocalStackOnly: true
"""

PKO_V2 = """
stack: dev
backend: file:///state
projectRepo: git@github.com:example/infra.git
branch: release/v2
repoDir: ./stacks/app/
secretsProvider: passphrase
gitAuth:
  sshAuth:
    sshPrivateKey: {type: Secret, secret: {name: deploy-key, key: id_ed25519}}
    password: {type: Secret, secret: {name: deploy-key, key: passphrase}}
envRefs:
  PULUMI_CONFIG_PASSPHRASE: {type: Literal, literal: {value: correct-horse}}
config:
  app:replicas: 3
  app:debug: false
  app:tags: {team: a, tier: [web, api]}
targets:
  - urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::web
prerequisites:
  - name: network
    requirement: {succeededWithinDuration: 1h30m}
  - name: database
preview: true
retryMaxBackoffDurationSeconds: 600
suspend: true
"""

PKO_CASES = [
    pytest.param(
        PKO_NGINX,
        StackSpec(
            stack="moolumi/nginx/dev",
            project_repo="https://github.com/pulumi/examples",
            commit=SHA,
            repo_dir="kubernetes-ts-nginx",
            env_refs={
                "PULUMI_ACCESS_TOKEN": ResourceRef(SecretKeyRef("pulumi-api-secret", "accessToken"))
            },
            config={"kubernetes:namespace": "default"},
            destroy_on_finalize=True,
        ),
        id="readme-nginx-pinned-commit",
    ),
    pytest.param(
        PKO_S3,
        StackSpec(
            stack="joeduffy/s3-op-project/dev",
            project_repo="https://github.com/joeduffy/test-s3-op-project",
            branch="master",
            git_auth=GitAuth(access_token=ResourceRef(SecretKeyRef("git-token", "token"))),
            env_refs={
                "PULUMI_ACCESS_TOKEN": ResourceRef(
                    SecretKeyRef("pulumi-api-secret", "accessToken")
                ),
                "AWS_REGION": ResourceRef(literal="us-east-2"),
            },
            secrets_ref={"aws:secretKey": ResourceRef(SecretKeyRef("aws-creds", "secretKey"))},
            config={"aws:region": "us-east-2"},
            refresh=True,
            expect_no_refresh_changes=True,
            resync_frequency_seconds=MIN_RESYNC_SECONDS,
            continue_resync_on_commit_match=True,
            retry_on_update_conflict=True,
            use_local_stack_only=True,
        ),
        id="s3-branch-token-secrets",
    ),
    pytest.param(
        PKO_V2,
        StackSpec(
            stack="dev",
            backend="file:///state",
            project_repo="git@github.com:example/infra.git",
            branch="release/v2",
            repo_dir="stacks/app",
            secrets_provider="passphrase",
            git_auth=GitAuth(
                ssh_private_key=ResourceRef(SecretKeyRef("deploy-key", "id_ed25519")),
                ssh_password=ResourceRef(SecretKeyRef("deploy-key", "passphrase")),
            ),
            env_refs={"PULUMI_CONFIG_PASSPHRASE": ResourceRef(literal="correct-horse")},
            config={
                "app:replicas": "3",
                "app:debug": "false",
                "app:tags": '{"team":"a","tier":["web","api"]}',
            },
            targets=("urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::web",),
            prerequisites=(Prerequisite("network", 5400.0), Prerequisite("database")),
            preview=True,
            retry_max_backoff_duration_seconds=600,
            suspend=True,
        ),
        id="v2-ssh-structured-config-prerequisites",
    ),
]

# The shapes PKO's own examples and e2e suite use, which once stalled here: a repoDir
# from the repository's root (stack-examples/yaml/nginx_k8s_stack.yaml) and the run's
# ServiceAccount in the workspaceTemplate (every Stack of its e2e suite).
PKO_NGINX_FROM_ROOT = """
envRefs:
  PULUMI_ACCESS_TOKEN:
    type: Secret
    secret: {name: pulumi-api-secret, key: accessToken}
stack: moolumi/k8s-nginx/dev
projectRepo: https://github.com/pulumi/examples
repoDir: /kubernetes-ts-nginx
branch: "refs/heads/master"
destroyOnFinalize: true
"""

PKO_E2E_NONROOT = """
fluxSource:
  sourceRef:
    apiVersion: source.toolkit.fluxcd.io/v1
    kind: GitRepository
    name: pulumi-examples
  dir: random-yaml
stack: dev
refresh: false
continueResyncOnCommitMatch: false
resyncFrequencySeconds: 60
destroyOnFinalize: false
envRefs:
  PULUMI_BACKEND_URL: {type: Literal, literal: {value: "file:///state/"}}
  PULUMI_CONFIG_PASSPHRASE: {type: Literal, literal: {value: "test"}}
workspaceTemplate:
  spec:
    image: pulumi/pulumi:3.202.0-nonroot
    serviceAccountName: random-yaml-nonroot
    podTemplate:
      spec:
        containers:
          - name: pulumi
            volumeMounts:
              - name: state
                mountPath: /state
        volumes:
          - name: state
            persistentVolumeClaim:
              claimName: state
"""

PKO_SHAPES = [
    pytest.param(
        PKO_NGINX_FROM_ROOT,
        StackSpec(
            stack="moolumi/k8s-nginx/dev",
            project_repo="https://github.com/pulumi/examples",
            branch="master",
            repo_dir="kubernetes-ts-nginx",
            env_refs={
                "PULUMI_ACCESS_TOKEN": ResourceRef(SecretKeyRef("pulumi-api-secret", "accessToken"))
            },
            destroy_on_finalize=True,
        ),
        id="stack-examples-nginx-repo-dir-from-root",
    ),
    pytest.param(
        PKO_E2E_NONROOT,
        StackSpec(
            stack="dev",
            flux_source=FluxSourceRef(
                "source.toolkit.fluxcd.io/v1", "GitRepository", "pulumi-examples", "random-yaml"
            ),
            env_refs={
                "PULUMI_BACKEND_URL": ResourceRef(literal="file:///state/"),
                "PULUMI_CONFIG_PASSPHRASE": ResourceRef(literal="test"),
            },
            service_account_name="random-yaml-nonroot",
            service_account_field="spec.workspaceTemplate.spec.serviceAccountName",
            workspace=Workspace(
                image="pulumi/pulumi:3.202.0-nonroot",
                pod_json=json.dumps(
                    {
                        "volumes": [
                            {"name": "state", "persistentVolumeClaim": {"claimName": "state"}}
                        ],
                        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                    }
                ),
            ),
        ),
        id="e2e-nonroot-service-account-in-workspace-template",
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), [*PKO_CASES, *PKO_SHAPES])
def test_pko_manifest_parses(manifest: str, expected: StackSpec) -> None:
    """A Pulumi Kubernetes Operator spec parses into the expected values."""
    assert parse_spec(yaml.safe_load(manifest), NS) == expected


@pytest.mark.parametrize(("manifest", "expected"), [*PKO_CASES, *PKO_SHAPES])
def test_cached_form_parses_the_same(manifest: str, expected: StackSpec) -> None:
    """The informer cache's read-only mappings and tuples parse like plain dicts and lists."""
    assert parse_spec(freeze(yaml.safe_load(manifest)), NS) == expected


@pytest.mark.parametrize(("manifest", "expected"), PKO_CASES)
def test_input_is_not_mutated_or_shared(manifest: str, expected: StackSpec) -> None:
    """Parsing leaves the input unchanged, and later input changes do not reach the result."""
    raw = yaml.safe_load(manifest)
    before = copy.deepcopy(raw)
    spec = parse_spec(raw, NS)
    assert raw == before
    raw["config"]["injected"] = "x"
    raw.setdefault("envRefs", {})["INJECTED"] = literal("x")
    assert spec == expected


def test_crd_declares_exactly_the_parsed_fields() -> None:
    """The CRD's spec properties are the fields the parser knows, so none is pruned unseen."""
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert set(schema["properties"]["spec"]["properties"]) == SPEC_FIELDS


# -- refusals name the field and the fix -------------------------------------------------

INVALID = [
    pytest.param("not a mapping", "spec", "must be an object", id="spec-not-object"),
    pytest.param(base(stack=""), "spec.stack", "is required", id="stack-empty"),
    pytest.param(base(stack=7), "spec.stack", "must be a string", id="stack-number"),
    pytest.param(base(stack="a/b/c/d"), "spec.stack", "org/project/stack", id="stack-4-parts"),
    pytest.param(base(stack="--help"), "spec.stack", "no leading -", id="stack-option"),
    pytest.param(base(stack="my stack"), "spec.stack", "not a stack name", id="stack-space"),
    pytest.param(
        without(base(), "projectRepo"),
        "spec.projectRepo",
        "a program source is required",
        id="branch-without-repo",
    ),
    pytest.param(
        without(base(commit="main"), "branch"), "spec.commit", "git rev-parse", id="commit-name"
    ),
    pytest.param(
        without(base(commit="-c1"), "branch"), "spec.commit", "commit SHA", id="commit-option"
    ),
    pytest.param(base(branch="refs/tags/v1"), "spec.branch", "only branches", id="branch-tag-ref"),
    pytest.param(base(branch="-f"), "spec.branch", "not a valid git branch", id="branch-option"),
    pytest.param(base(branch="a..b"), "spec.branch", "not a valid git branch", id="branch-dots"),
    pytest.param(base(branch="a b"), "spec.branch", "not a valid git branch", id="branch-space"),
    pytest.param(base(branch="x.lock"), "spec.branch", "not a valid git branch", id="branch-lock"),
    pytest.param(
        base(branch=".hidden"), "spec.branch", "not a valid git branch", id="branch-leading-dot"
    ),
    pytest.param(
        base(branch="a/.b"), "spec.branch", "not a valid git branch", id="branch-dot-component"
    ),
    pytest.param(
        base(branch="refs/remotes/origin/main"),
        "spec.branch",
        "only branches can be tracked (main or refs/heads/main): pin tags with commit",
        id="branch-remote-ref",
    ),
    pytest.param(
        base(projectRepo="--upload-pack=touch /tmp/x"),
        "spec.projectRepo",
        "no leading -",
        id="repo-option",
    ),
    pytest.param(
        base(projectRepo="ext::ssh-evil"),
        "spec.projectRepo",
        "remote-helper",
        id="repo-remote-helper",
    ),
    pytest.param(base(repoDir="a/../../b"), "spec.repoDir", "..", id="repo-dir-escapes"),
    pytest.param(
        base(fluxSource={"sourceRef": {"kind": "GitRepository", "name": "x"}}),
        "spec.fluxSource",
        "exclusive",
        id="flux-source-beside-repo",
    ),
    pytest.param(
        without(base(programRef={"name": "p"}, commit="abcd"), "projectRepo", "branch"),
        "spec.commit",
        "applies to projectRepo only",
        id="program-ref-with-commit",
    ),
    pytest.param(base(envs=["cm"]), "spec.envs", "use envRefs", id="deprecated-envs"),
    pytest.param(
        base(envSecrets=["s"]), "spec.envSecrets", "use envRefs", id="deprecated-env-secrets"
    ),
    pytest.param(
        base(secrets={"k": "v"}), "spec.secrets", "use secretsRef", id="deprecated-secrets"
    ),
    pytest.param(
        base(gitAuthSecret="s"), "spec.gitAuthSecret", "use gitAuth", id="deprecated-git-auth"
    ),
    pytest.param(base(stackName="x"), "spec.stackName", "unknown field", id="unknown-field"),
    pytest.param(base(config={"app:x": None}), "spec.config[app:x]", "null", id="config-null"),
    pytest.param(base(config={"": "v"}), "spec.config[]", "must not be empty", id="config-key"),
    pytest.param(base(config=["a"]), "spec.config", "must be an object", id="config-list"),
    pytest.param(
        base(config={"app:pw": "x"}, secretsRef={"app:pw": secret()}),
        "spec.secretsRef[app:pw]",
        "either plain or secret",
        id="config-and-secret",
    ),
    pytest.param(base(targets="urn:x"), "spec.targets", "must be a list", id="targets-string"),
    pytest.param(base(targets=[""]), "spec.targets[0]", "non-empty string", id="target-empty"),
    pytest.param(
        base(prerequisites=[{"requirement": {}}]),
        "spec.prerequisites[0].name",
        "is required",
        id="prerequisite-without-name",
    ),
    pytest.param(
        base(prerequisites=[{"name": "n", "requirement": {"succeededWithinDuration": "1 hour"}}]),
        "spec.prerequisites[0].requirement.succeededWithinDuration",
        'use a Go duration such as "90s"',
        id="prerequisite-bad-duration",
    ),
    pytest.param(
        base(prerequisites=[{"name": "n", "requirement": {"succeededWithinDuration": "0s"}}]),
        "spec.prerequisites[0].requirement.succeededWithinDuration",
        "not a positive duration",
        id="prerequisite-zero-duration",
    ),
    pytest.param(
        base(prerequisites=[{"name": "n", "requirement": {"succeededWithinDuration": "-5m"}}]),
        "spec.prerequisites[0].requirement.succeededWithinDuration",
        "not a positive duration",
        id="prerequisite-negative-duration",
    ),
    pytest.param(
        base(prerequisites=[{"name": "n"}, {"name": "n"}]),
        "spec.prerequisites[1].name",
        "listed twice",
        id="prerequisite-duplicate",
    ),
    pytest.param(
        base(resyncFrequencySeconds="60"),
        "spec.resyncFrequencySeconds",
        "must be an integer",
        id="resync-string",
    ),
    pytest.param(
        base(resyncFrequencySeconds=True),
        "spec.resyncFrequencySeconds",
        "must be an integer",
        id="resync-bool",
    ),
    pytest.param(base(refresh="yes"), "spec.refresh", "true or false", id="bool-string"),
    pytest.param(
        base(timeoutSeconds=-5), "spec.timeoutSeconds", "operator's default", id="timeout-negative"
    ),
    pytest.param(
        base(timeoutSeconds="600"), "spec.timeoutSeconds", "must be an integer", id="timeout-string"
    ),
    pytest.param(
        base(timeoutSeconds=1.5), "spec.timeoutSeconds", "must be an integer", id="timeout-float"
    ),
]


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_spec_names_field_and_fix(spec: Any, path: str, fragment: str) -> None:
    """An invalid spec raises SpecError whose message starts with the field path."""
    assert_refused(spec, path, fragment)


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_cached_spec_is_refused_the_same(spec: Any, path: str, fragment: str) -> None:
    """The read-only cached form of an invalid spec is refused with the same path."""
    assert_refused(freeze(spec), path, fragment)


# -- the table shared with the CRD tests -----------------------------------------------------


@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
@each(CASES)
def test_parser_verdict_on_the_shared_cases(case: Case, *, cached: bool) -> None:
    """The parser judges each spec of ``tests.reconcile.spec.cases`` as the table says.

    A refusal names the field and what to do, whether the spec is plain or cached.
    """
    check_parser_verdict(case, freeze(case.spec) if cached else case.spec, NS)


def test_spec_error_is_a_value_error() -> None:
    """SpecError is a ValueError, so generic validation handlers catch it."""
    assert issubclass(SpecError, ValueError)


# -- normalisation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "attribute", "expected"),
    [
        pytest.param({"branch": "refs/heads/main"}, "branch", "main", id="branch-full-ref"),
        pytest.param({"branch": "feature/x"}, "branch", "feature/x", id="branch-with-slash"),
        pytest.param(
            {"branch": None, "commit": SHA.upper()}, "commit", SHA, id="commit-lowercased"
        ),
        pytest.param({"branch": "", "commit": SHA}, "branch", None, id="empty-branch-is-unset"),
        pytest.param({"repoDir": "./infra/app/"}, "repo_dir", "infra/app", id="repo-dir-normal"),
        pytest.param({"repoDir": "."}, "repo_dir", None, id="repo-dir-dot"),
        pytest.param({"repoDir": ""}, "repo_dir", None, id="repo-dir-empty"),
        pytest.param({"backend": ""}, "backend", None, id="empty-backend-is-unset"),
        pytest.param({}, "resync_frequency_seconds", 60, id="resync-unset"),
        pytest.param({"resyncFrequencySeconds": 0}, "resync_frequency_seconds", 60, id="resync-0"),
        pytest.param({"resyncFrequencySeconds": 1}, "resync_frequency_seconds", 60, id="resync-1"),
        pytest.param(
            {"resyncFrequencySeconds": 59}, "resync_frequency_seconds", 60, id="resync-59"
        ),
        pytest.param(
            {"resyncFrequencySeconds": 61}, "resync_frequency_seconds", 61, id="resync-61"
        ),
        pytest.param({}, "retry_max_backoff_duration_seconds", 86400, id="retry-backoff-default"),
        pytest.param({}, "timeout_seconds", None, id="timeout-unset"),
        pytest.param({"timeoutSeconds": None}, "timeout_seconds", None, id="timeout-null"),
        pytest.param({"timeoutSeconds": 7200}, "timeout_seconds", 7200, id="timeout-2h"),
        pytest.param(
            {"retryMaxBackoffDurationSeconds": 1},
            "retry_max_backoff_duration_seconds",
            1,
            id="retry-backoff-1",
        ),
        pytest.param({}, "git_auth", None, id="no-git-auth"),
        pytest.param({"gitAuth": {}}, "git_auth", None, id="empty-git-auth"),
        pytest.param({"envs": [], "secrets": {}}, "env_refs", {}, id="empty-deprecated-fields"),
        pytest.param({"targets": ("a", "b")}, "targets", ("a", "b"), id="targets-tuple"),
        pytest.param({"targets": ["a", "b"]}, "targets", ("a", "b"), id="targets-list"),
        pytest.param(
            {"envRefs": {"A": secret(namespace=NS)}},
            "env_refs",
            {"A": ResourceRef(SecretKeyRef("creds", "token"))},
            id="same-namespace-secret-accepted",
        ),
        pytest.param(
            {"prerequisites": [{"name": "n", "requirement": {}}]},
            "prerequisites",
            (Prerequisite("n"),),
            id="prerequisite-empty-requirement",
        ),
    ],
)
def test_normalisation(fields: dict[str, Any], attribute: str, expected: object) -> None:
    """Fields are normalised to the form the reconciler uses."""
    assert getattr(parse_spec(base(**fields), NS), attribute) == expected


def test_defaults() -> None:
    """Unset flags are False, lists empty, and the periods take their documented defaults."""
    spec = parse_spec(base(), NS)
    assert spec == StackSpec(stack="org/proj/dev", project_repo=REPO, branch="main")
    assert spec.resync_frequency_seconds == MIN_RESYNC_SECONDS == 60
    assert spec.retry_max_backoff_duration_seconds == DEFAULT_RETRY_MAX_BACKOFF_SECONDS == 86400


def test_tracks_branch() -> None:
    """tracks_branch is True for a branch and False for a pinned commit."""
    assert parse_spec(base(), NS).tracks_branch
    assert not parse_spec(base(branch=None, commit=SHA), NS).tracks_branch


@pytest.mark.parametrize(
    ("commit", "accepted"),
    [
        pytest.param("a", False, id="1-digit"),
        pytest.param("abcd", False, id="4-digits"),
        pytest.param(SHA[:39], False, id="39-digits"),
        pytest.param(SHA, True, id="sha1"),
        pytest.param(SHA + "0", False, id="41-digits"),
        pytest.param("b" * 63, False, id="63-digits"),
        pytest.param("b" * 64, True, id="sha256"),
        pytest.param("b" * 65, False, id="65-digits"),
        pytest.param(SHA[:39] + "g", False, id="not-hex"),
        pytest.param("v1.2.0", False, id="a-tag"),
    ],
)
def test_a_commit_is_a_full_sha(commit: str, *, accepted: bool) -> None:
    """A commit is a full SHA (40 hex digits, 64 under SHA-256); the refusal says what to write."""
    spec = without(base(commit=commit), "branch")
    if accepted:
        assert parse_spec(spec, NS).commit == commit
        return
    refused = assert_refused(spec, "spec.commit", "write the full SHA, 40 hex digits")
    assert "64 in a SHA-256 repository" in refused.problem
    assert "git rev-parse" in refused.problem
