"""Unit tests of reconcile.spec: every validation rule, normalisation and PKO compatibility."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from reconcile.spec import (
    DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
    MAX_CONFIG_TOTAL_BYTES,
    MAX_CONFIG_VALUE_BYTES,
    MIN_RESYNC_SECONDS,
    SPEC_FIELDS,
    GitAuth,
    Prerequisite,
    ResourceRef,
    SecretKeyRef,
    SpecError,
    StackSpec,
    check_stack_for_backend,
    parse_go_duration,
    parse_spec,
    referenced_secrets,
)

NS = "team-a"
SHA = "2b0889718d3e63feeb6079ccd5e4488d8601e353"
REPO = "https://github.com/example/infra"
CRD = Path(__file__).parents[2] / "manifests" / "crd" / "stacks.pulumi.com.yaml"


def base(**fields: Any) -> dict[str, Any]:
    """A minimal valid spec (tracking ``main``) with ``fields`` merged in."""
    return {"stack": "org/proj/dev", "projectRepo": REPO, "branch": "main", **fields}


def without(spec: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``spec`` without ``keys``."""
    return {k: v for k, v in spec.items() if k not in keys}


def secret(name: str = "creds", key: str = "token", **extra: str) -> dict[str, Any]:
    """A ResourceRef to a Secret key."""
    return {"type": "Secret", "secret": {"name": name, "key": key, **extra}}


def literal(value: str) -> dict[str, Any]:
    """A literal ResourceRef."""
    return {"type": "Literal", "literal": {"value": value}}


def freeze(value: Any) -> Any:
    """``value`` as the informer cache holds it: read-only mappings and tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


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


@pytest.mark.parametrize(("manifest", "expected"), PKO_CASES)
def test_pko_manifest_parses(manifest: str, expected: StackSpec) -> None:
    """A Pulumi Kubernetes Operator spec parses into the expected values."""
    assert parse_spec(yaml.safe_load(manifest), NS) == expected


@pytest.mark.parametrize(("manifest", "expected"), PKO_CASES)
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
    pytest.param(without(base(), "stack"), "spec.stack", "is required", id="stack-missing"),
    pytest.param(base(stack=""), "spec.stack", "is required", id="stack-empty"),
    pytest.param(base(stack=7), "spec.stack", "must be a string", id="stack-number"),
    pytest.param(base(stack="a/b/c/d"), "spec.stack", "org/project/stack", id="stack-4-parts"),
    pytest.param(base(stack="--help"), "spec.stack", "no leading -", id="stack-option"),
    pytest.param(base(stack="my stack"), "spec.stack", "not a stack name", id="stack-space"),
    pytest.param(
        without(base(), "projectRepo", "branch"),
        "spec.projectRepo",
        "a program source is required",
        id="no-source",
    ),
    pytest.param(
        without(base(), "projectRepo"),
        "spec.projectRepo",
        "a program source is required",
        id="branch-without-repo",
    ),
    pytest.param(
        without(base(), "branch"),
        "spec.projectRepo",
        "requires a commit or a branch",
        id="repo-without-commit-or-branch",
    ),
    pytest.param(base(commit=SHA), "spec.branch", "mutually exclusive", id="commit-and-branch"),
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
    pytest.param(base(repoDir="/etc"), "spec.repoDir", "relative", id="repo-dir-absolute"),
    pytest.param(base(repoDir="a/../../b"), "spec.repoDir", "..", id="repo-dir-escapes"),
    pytest.param(
        base(fluxSource={"sourceRef": {"kind": "GitRepository", "name": "x"}}),
        "spec.fluxSource",
        "not supported yet",
        id="flux-source",
    ),
    pytest.param(
        without(base(programRef={"name": "p"}), "projectRepo", "branch"),
        "spec.programRef",
        "not supported yet",
        id="program-ref",
    ),
    pytest.param(
        base(accessTokenSecret="tok"),
        "spec.accessTokenSecret",
        "use envRefs.PULUMI_ACCESS_TOKEN",
        id="deprecated-access-token-secret",
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
    pytest.param(
        base(gitAuth={"token": secret()}), "spec.gitAuth.token", "unknown field", id="unknown-auth"
    ),
    pytest.param(
        base(envRefs={"A": {"type": "Secret", "secret": {"nmae": "s", "key": "k"}}}),
        "spec.envRefs[A].secret.nmae",
        "unknown field",
        id="unknown-ref-field",
    ),
    pytest.param(
        base(gitAuth={"basicAuth": {"userName": literal("bot")}}),
        "spec.gitAuth.basicAuth.password",
        "is required",
        id="basic-auth-without-password",
    ),
    pytest.param(
        base(gitAuth={"basicAuth": {"password": secret()}}),
        "spec.gitAuth.basicAuth.userName",
        "is required",
        id="basic-auth-without-user",
    ),
    pytest.param(
        base(gitAuth={"sshAuth": {"password": secret()}}),
        "spec.gitAuth.sshAuth.sshPrivateKey",
        "is required",
        id="ssh-auth-without-key",
    ),
    pytest.param(
        base(gitAuth={"accessToken": secret(), "basicAuth": {"userName": literal("u")}}),
        "spec.gitAuth.basicAuth.password",
        "is required",
        id="losing-method-still-validated",
    ),
    pytest.param(
        base(envRefs={"HOME_DIR": {"type": "Env", "env": {"name": "HOME"}}}),
        "spec.envRefs[HOME_DIR].type",
        "operator's own process and is refused: put the value in a Secret",
        id="env-ref-env",
    ),
    pytest.param(
        base(secretsRef={"k": {"type": "FS", "filesystem": {"path": "/var/run/token"}}}),
        "spec.secretsRef[k].type",
        "operator's own filesystem and is refused",
        id="secrets-ref-fs",
    ),
    pytest.param(
        base(gitAuth={"accessToken": {"type": "Env", "env": {"name": "GITHUB_TOKEN"}}}),
        "spec.gitAuth.accessToken.type",
        "is refused",
        id="git-token-env",
    ),
    pytest.param(
        base(envRefs={"A": {"secret": {"name": "s", "key": "k"}}}),
        "spec.envRefs[A].type",
        "is required",
        id="ref-without-type",
    ),
    pytest.param(
        base(envRefs={"A": {"type": "ConfigMap"}}),
        "spec.envRefs[A].type",
        "use Secret or Literal",
        id="ref-unknown-type",
    ),
    pytest.param(
        base(envRefs={"A": {"type": "Secret"}}),
        "spec.envRefs[A].secret",
        "set secret.name and secret.key",
        id="secret-ref-without-selector",
    ),
    pytest.param(
        base(envRefs={"A": {"type": "Secret", "secret": {"name": "s"}}}),
        "spec.envRefs[A].secret.key",
        "is required",
        id="secret-ref-without-key",
    ),
    pytest.param(
        base(envRefs={"A": {**secret(), "literal": {"value": "v"}}}),
        "spec.envRefs[A].literal",
        "does not go with type Secret",
        id="ref-two-selectors",
    ),
    pytest.param(
        base(envRefs={"A": {"type": "Literal"}}),
        "spec.envRefs[A].literal",
        "set literal.value",
        id="literal-ref-without-selector",
    ),
    pytest.param(
        base(envRefs={"A": {"type": "Literal", "literal": {"value": 5}}}),
        "spec.envRefs[A].literal.value",
        "must be a string",
        id="literal-not-string",
    ),
    pytest.param(
        base(envRefs={"A": secret(namespace="kube-system")}),
        "spec.envRefs[A].secret.namespace",
        "cross-namespace references are refused: copy the Secret into namespace 'team-a'",
        id="cross-namespace-secret",
    ),
    pytest.param(
        base(envRefs={"A": secret(name="My_Secret")}),
        "spec.envRefs[A].secret.name",
        "not a Secret name",
        id="secret-name-invalid",
    ),
    pytest.param(
        base(envRefs={"A": secret(key="a/b")}),
        "spec.envRefs[A].secret.key",
        "not a Secret key",
        id="secret-key-invalid",
    ),
    pytest.param(
        base(envRefs={"1BAD": literal("x")}),
        "spec.envRefs[1BAD]",
        "not an environment variable name",
        id="env-name-digit",
    ),
    pytest.param(
        base(envRefs={"MY-VAR": literal("x")}),
        "spec.envRefs[MY-VAR]",
        "not an environment variable name",
        id="env-name-dash",
    ),
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
        base(resyncFrequencySeconds=-1),
        "spec.resyncFrequencySeconds",
        "must not be negative",
        id="resync-negative",
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
    pytest.param(
        base(retryMaxBackoffDurationSeconds=0),
        "spec.retryMaxBackoffDurationSeconds",
        "at least 1",
        id="retry-backoff-zero",
    ),
    pytest.param(base(refresh="yes"), "spec.refresh", "true or false", id="bool-string"),
    pytest.param(base(timeoutSeconds=0), "spec.timeoutSeconds", "at least 1", id="timeout-zero"),
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

# Specs that would only fail at run time (in git or the Pulumi CLI) are refused at once.
DOOMED = [
    pytest.param(
        base(config={"a:b:c": "v"}),
        "spec.config[a:b:c]",
        "not a Pulumi config key (at most one ':'): use namespace:name",
        id="config-key-two-colons",
    ),
    pytest.param(
        base(config={"aws:config:region": "v"}),
        "spec.config[aws:config:region]",
        "use aws:region",
        id="config-key-old-config-form",
    ),
    pytest.param(
        base(config={":region": "v"}),
        "spec.config[:region]",
        "empty namespace",
        id="config-ns-empty",
    ),
    pytest.param(
        base(config={"aws:": "v"}), "spec.config[aws:]", "empty namespace or name", id="config-name"
    ),
    pytest.param(
        base(secretsRef={"db:pw:x": secret()}),
        "spec.secretsRef[db:pw:x]",
        "at most one ':'",
        id="secret-config-key-two-colons",
    ),
    pytest.param(
        base(stack="acme/proj/dev", backend="file:///state"),
        "spec.stack",
        "organization 'acme' does not exist on a self-managed file:// backend, whose only"
        " organization is 'organization': use 'organization/proj/dev' or 'dev'",
        id="stack-org-on-file-backend",
    ),
    pytest.param(
        base(stack="acme/dev", backend="s3://bucket/state?region=eu-west-1"),
        "spec.stack",
        "s3:// backend",
        id="stack-org-on-s3-backend",
    ),
    pytest.param(
        base(stack="acme/proj/dev", backend="/var/lib/pulumi"),
        "spec.stack",
        "local-path backend",
        id="stack-org-on-local-path",
    ),
    pytest.param(
        base(secretsProvider="vault"),
        "spec.secretsProvider",
        "unknown secrets provider: use default, passphrase, awskms://..., azurekeyvault://...,"
        " gcpkms://..., hashivault://...",
        id="secrets-provider-unknown",
    ),
    pytest.param(
        base(secretsProvider="awskms"),
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-kind-without-key",
    ),
    pytest.param(
        base(secretsProvider="gcpkms://"),
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-empty-key",
    ),
    pytest.param(
        base(secretsProvider="Passphrase"),
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-case",
    ),
    pytest.param(
        base(config={"big": "x" * (MAX_CONFIG_VALUE_BYTES + 1)}),
        "spec.config[big]",
        f"the value is {MAX_CONFIG_VALUE_BYTES + 1} bytes, more than {MAX_CONFIG_VALUE_BYTES}:"
        " move large data into the repository",
        id="config-value-too-big",
    ),
    pytest.param(
        base(config={"big": ["\u00e9" * (MAX_CONFIG_VALUE_BYTES // 2)]}),
        "spec.config[big]",
        "more than",
        id="config-structured-value-too-big-in-utf8",
    ),
    pytest.param(
        base(config={f"k{i}": "x" * MAX_CONFIG_VALUE_BYTES for i in range(8)}),
        "spec.config",
        f"more than {MAX_CONFIG_TOTAL_BYTES}",
        id="config-total-too-big",
    ),
]

_GIT_URL_FIX = "use https://host/path, ssh://[user@]host/path, git://host/path or user@host:path"

# projectRepo values git would refuse, could misuse, or that hold credentials.
BAD_REPOS = [
    pytest.param("file:///srv/git/infra.git", "file:// is refused", id="file-url"),
    pytest.param("/srv/git/infra.git", "local paths are refused", id="absolute-path"),
    pytest.param("./infra", "local paths are refused", id="relative-path"),
    pytest.param("infra", "local paths are refused", id="bare-word"),
    pytest.param("ftp://host/infra.git", "unsupported scheme 'ftp://'", id="ftp"),
    pytest.param("git+ssh://host/infra.git", "unsupported scheme", id="git-plus-ssh"),
    pytest.param("HTTPS://host/infra.git", "lower case only: write 'https://'", id="upper-case"),
    pytest.param("https:///infra.git", "the URL has no host", id="no-host"),
    pytest.param("https://host:abc/infra.git", "must be a number", id="port-not-a-number"),
    pytest.param("ssh://host:70000/infra.git", "from 0 to 65535", id="port-too-big"),
    pytest.param("http://[::1/infra.git", "malformed IPv6 host", id="ipv6-unclosed"),
    pytest.param("https:/host/infra.git", "'https:' is not a scheme without '//'", id="one-slash"),
    pytest.param("git@host:", "needs a repository path", id="scp-without-path"),
    pytest.param("@host:infra", "empty user name", id="scp-empty-user"),
    pytest.param("ssh://@host/infra", "empty user name", id="ssh-empty-user"),
    pytest.param("ssh://-oProxyCommand=touch%20x/r", "starting with - is refused", id="ssh-opt"),
    pytest.param("ssh://%2doProxyCommand=x/r", "starting with - is refused", id="ssh-opt-pct"),
    pytest.param("ssh://-oProxyCommand=x@host/r", "starting with - is refused", id="ssh-opt-user"),
    pytest.param("git@-oProxyCommand=x:r", "starting with - is refused", id="scp-opt-host"),
    pytest.param("https://ghp_secret123@github.com/o/r", "set spec.gitAuth", id="https-token"),
    pytest.param("https://bot:hunter2@github.com/o/r", "set spec.gitAuth", id="https-password"),
    pytest.param("http://bot@host/o/r", "set spec.gitAuth", id="http-user"),
    pytest.param("ssh://git:hunter2@host/o/r", "spec.gitAuth.sshAuth", id="ssh-password"),
    pytest.param("git://bot@host/o/r", "git:// takes no user name", id="git-user"),
]


@pytest.mark.parametrize(("repo", "fragment"), BAD_REPOS)
def test_unusable_repo_url_is_refused(repo: str, fragment: str) -> None:
    """A projectRepo git cannot or must not fetch is InvalidSpec on spec.projectRepo.

    The message never repeats the URL (it may hold credentials).
    """
    with pytest.raises(SpecError) as refused:
        parse_spec(base(projectRepo=repo), NS)
    assert refused.value.path == "spec.projectRepo"
    assert fragment in refused.value.problem
    for part in ("ghp_secret123", "hunter2", "bot", "oProxyCommand"):
        assert part not in str(refused.value)


@pytest.mark.parametrize(
    "repo",
    [
        pytest.param("https://github.com/example/infra.git", id="https"),
        pytest.param("http://127.0.0.1:8080/infra.git", id="http-port"),
        pytest.param("ssh://git@github.com/example/infra.git", id="ssh-user"),
        pytest.param("ssh://github.com:2222/example/infra.git", id="ssh-port"),
        pytest.param("ssh://[::1]:22/infra.git", id="ssh-ipv6"),
        pytest.param("git://127.0.0.1:9418/infra.git", id="git-daemon"),
        pytest.param("git@github.com:example/infra.git", id="scp-like"),
        pytest.param("github.com:example/infra.git", id="scp-like-without-user"),
        pytest.param("git@[::1]:infra.git", id="scp-like-ipv6"),
        pytest.param("https://host/path-with-@-in-it", id="at-in-path"),
    ],
)
def test_usable_repo_url_is_accepted(repo: str) -> None:
    """Every form of git URL the operator fetches parses unchanged."""
    assert parse_spec(base(projectRepo=repo), NS).project_repo == repo


@pytest.mark.parametrize(("spec", "path", "fragment"), DOOMED)
def test_spec_that_could_only_fail_at_run_time_is_refused(
    spec: Any, path: str, fragment: str
) -> None:
    """Config keys, stack names, secrets providers and sizes Pulumi would refuse are refused now."""
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, NS)
    assert refused.value.path == path
    assert str(refused.value).startswith(f"{path}: ")
    assert fragment in refused.value.problem


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"config": {"region": "v", "aws:region": "v"}}, id="config-keys"),
        pytest.param({"config": {"app:url": "https://a/b?x=1:2"}}, id="colon-in-value"),
        pytest.param({"config": {"k": "x" * MAX_CONFIG_VALUE_BYTES}}, id="value-at-the-limit"),
        pytest.param({"stack": "organization/proj/dev", "backend": "file:///s"}, id="diy-org"),
        pytest.param({"stack": "organization/dev", "backend": "gs://b"}, id="diy-org-stack"),
        pytest.param({"stack": "dev", "backend": "azblob://c"}, id="diy-plain-stack"),
        pytest.param({"stack": "acme/proj/dev", "backend": "https://api.pulumi.com"}, id="cloud"),
        pytest.param({"stack": "acme/proj/dev"}, id="backend-unset"),
        pytest.param({"secretsProvider": "default"}, id="provider-default"),
        pytest.param({"secretsProvider": "passphrase"}, id="provider-passphrase"),
        pytest.param(
            {"secretsProvider": "awskms://alias/ExampleAlias?region=us-east-1"}, id="awskms"
        ),
        pytest.param({"secretsProvider": "awskms:///arn:aws:kms:us-east-1:1:key/1"}, id="arn"),
        pytest.param(
            {"secretsProvider": "azurekeyvault://vault.vault.azure.net/keys/k"}, id="azure"
        ),
        pytest.param(
            {"secretsProvider": "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k"},
            id="gcpkms",
        ),
        pytest.param({"secretsProvider": "hashivault://mykey"}, id="hashivault"),
        pytest.param({"secretsProvider": ""}, id="provider-empty-is-unset"),
    ],
)
def test_specs_that_can_work_are_accepted(fields: dict[str, Any]) -> None:
    """Valid config keys, stack/backend pairs and secrets providers parse."""
    parse_spec(base(**fields), NS)


@pytest.mark.parametrize(
    ("stack", "backend", "fragment"),
    [
        pytest.param("acme/proj/dev", "file:///state", "file:// backend", id="file"),
        pytest.param("acme/proj/dev", "FILE:///state", "file:// backend", id="file-upper"),
        pytest.param("acme/dev", "gs://bucket", "use 'organization/dev' or 'dev'", id="gs-2"),
        pytest.param("acme/proj/dev", "azblob://c", "azblob:// backend", id="azblob"),
        pytest.param("acme/proj/dev", "~/state", "local-path backend", id="home-path"),
        pytest.param("acme/proj/dev", "./state", "local-path backend", id="relative-path"),
        pytest.param("dev", "file:///state", None, id="plain-stack"),
        pytest.param("organization/proj/dev", "s3://b", None, id="organization"),
        pytest.param("acme/proj/dev", "https://api.pulumi.com", None, id="cloud"),
        pytest.param("acme/proj/dev", "https://pulumi.example.com", None, id="self-hosted-cloud"),
        pytest.param("acme/proj/dev", None, None, id="cli-default"),
    ],
)
def test_check_stack_for_backend(stack: str, backend: str | None, fragment: str | None) -> None:
    """Only DIY backends restrict the organisation; the message names spec.stack, not the URL."""
    message = check_stack_for_backend(stack, backend)
    if fragment is None:
        assert message is None
        return
    assert message is not None
    assert message.startswith("spec.stack: organization 'acme' does not exist")
    assert fragment in message
    assert "state" not in message.replace("self-managed", "")


def test_stack_is_checked_against_the_backend_the_spec_names() -> None:
    """parse_spec applies check_stack_for_backend to spec.backend, with the same message."""
    spec = base(stack="acme/proj/dev", backend="file:///state")
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, NS)
    assert str(refused.value) == check_stack_for_backend("acme/proj/dev", "file:///state")


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_spec_names_field_and_fix(spec: Any, path: str, fragment: str) -> None:
    """An invalid spec raises SpecError whose message starts with the field path."""
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, NS)
    assert refused.value.path == path
    assert str(refused.value).startswith(f"{path}: ")
    assert fragment in refused.value.problem


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_cached_spec_is_refused_the_same(spec: Any, path: str, fragment: str) -> None:
    """The read-only cached form of an invalid spec is refused with the same path."""
    with pytest.raises(SpecError) as refused:
        parse_spec(freeze(spec), NS)
    assert refused.value.path == path
    assert fragment in refused.value.problem


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
        pytest.param({"timeoutSeconds": 1}, "timeout_seconds", 1, id="timeout-1"),
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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("plain", "plain", id="string-unchanged"),
        pytest.param("", "", id="empty-string"),
        pytest.param(3, "3", id="integer"),
        pytest.param(1.5, "1.5", id="float"),
        pytest.param(True, "true", id="boolean"),
        pytest.param([1, "b"], '[1,"b"]', id="array"),
        pytest.param({"a": {"b": [True]}}, '{"a":{"b":[true]}}', id="object"),
    ],
)
def test_config_values_are_strings(value: object, expected: str) -> None:
    """Config strings pass through; other JSON values are JSON-encoded, even when frozen."""
    assert parse_spec(base(config={"k": value}), NS).config == {"k": expected}
    assert parse_spec(freeze(base(config={"k": value})), NS).config == {"k": expected}


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


# -- git auth ------------------------------------------------------------------------------

TOKEN = secret("git", "token")
SSH_KEY = secret("git", "ssh")
USER = literal("bot")
PASSWORD = secret("git", "password")


@pytest.mark.parametrize(
    ("auth", "method", "expected"),
    [
        pytest.param(
            {"accessToken": TOKEN},
            "token",
            GitAuth(access_token=ResourceRef(SecretKeyRef("git", "token"))),
            id="token",
        ),
        pytest.param(
            {"sshAuth": {"sshPrivateKey": SSH_KEY}},
            "ssh",
            GitAuth(ssh_private_key=ResourceRef(SecretKeyRef("git", "ssh"))),
            id="ssh-without-password",
        ),
        pytest.param(
            {"basicAuth": {"userName": USER, "password": PASSWORD}},
            "basic",
            GitAuth(
                username=ResourceRef(literal="bot"),
                password=ResourceRef(SecretKeyRef("git", "password")),
            ),
            id="basic",
        ),
        pytest.param(
            {
                "accessToken": TOKEN,
                "sshAuth": {"sshPrivateKey": SSH_KEY},
                "basicAuth": {"userName": USER, "password": PASSWORD},
            },
            "ssh",
            GitAuth(ssh_private_key=ResourceRef(SecretKeyRef("git", "ssh"))),
            id="ssh-beats-token-and-basic",
        ),
        pytest.param(
            {"accessToken": TOKEN, "basicAuth": {"userName": USER, "password": PASSWORD}},
            "token",
            GitAuth(access_token=ResourceRef(SecretKeyRef("git", "token"))),
            id="token-beats-basic",
        ),
    ],
)
def test_git_auth_precedence(auth: dict[str, Any], method: str, expected: GitAuth) -> None:
    """Git credentials follow PKO's precedence ssh > token > basic and keep only the winner."""
    parsed = parse_spec(base(gitAuth=auth), NS).git_auth
    assert parsed == expected
    assert parsed is not None
    assert parsed.method == method


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="nothing"),
        pytest.param({"username": ResourceRef(literal="u")}, id="user-without-password"),
        pytest.param(
            {"access_token": ResourceRef(literal="t"), "ssh_private_key": ResourceRef(literal="k")},
            id="two-methods",
        ),
        pytest.param(
            {"access_token": ResourceRef(literal="t"), "ssh_password": ResourceRef(literal="p")},
            id="ssh-password-without-key",
        ),
    ],
)
def test_git_auth_invariants(fields: dict[str, ResourceRef]) -> None:
    """A GitAuth built by hand must still hold exactly one complete method."""
    with pytest.raises(ValueError, match="exactly one method"):
        GitAuth(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="neither"),
        pytest.param({"secret": SecretKeyRef("s", "k"), "literal": "v"}, id="both"),
    ],
)
def test_resource_ref_holds_exactly_one_source(fields: dict[str, Any]) -> None:
    """A ResourceRef built by hand must hold exactly one of secret or literal."""
    with pytest.raises(ValueError, match="exactly one of secret or literal"):
        ResourceRef(**fields)


# -- secrets never leak; referenced Secrets ------------------------------------------------


def test_repr_masks_literal_values() -> None:
    """Neither repr nor str of a parsed spec shows a literal value, but Secret names show."""
    spec = parse_spec(
        base(
            envRefs={"PULUMI_CONFIG_PASSPHRASE": literal("hunter2-env")},
            secretsRef={"db:password": literal("hunter2-config")},
            gitAuth={"basicAuth": {"userName": literal("hunter2-user"), "password": PASSWORD}},
        ),
        NS,
    )
    for text in (repr(spec), str(spec)):
        assert "hunter2" not in text
        assert "'***'" in text
        assert "SecretKeyRef(name='git', key='password')" in text


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, frozenset(), id="none"),
        pytest.param(
            {
                "envRefs": {"A": secret("env-a"), "B": literal("x")},
                "secretsRef": {"k": secret("config-k"), "j": secret("env-a", "other")},
                "gitAuth": {"accessToken": secret("git")},
            },
            frozenset({"env-a", "config-k", "git"}),
            id="env-config-and-git",
        ),
        pytest.param(
            {
                "gitAuth": {
                    "sshAuth": {"sshPrivateKey": secret("key"), "password": secret("phrase")},
                    "accessToken": secret("unused-token"),
                }
            },
            frozenset({"key", "phrase"}),
            id="only-the-winning-git-method",
        ),
        pytest.param(
            {"gitAuth": {"basicAuth": {"userName": secret("user"), "password": secret("pass")}}},
            frozenset({"user", "pass"}),
            id="basic-auth-user-and-password",
        ),
        pytest.param(
            {"config": {"k": "v"}, "secretsRef": {"a": literal("x")}},
            frozenset(),
            id="config-and-literals-reference-no-secret",
        ),
    ],
)
def test_referenced_secrets(fields: dict[str, Any], expected: frozenset[str]) -> None:
    """referenced_secrets lists every Secret the spec would read, and no literal."""
    assert referenced_secrets(parse_spec(base(**fields), NS)) == expected


# -- immutability ----------------------------------------------------------------------------


def test_spec_is_frozen_and_its_mappings_read_only() -> None:
    """A parsed spec cannot be changed: attributes are frozen and mappings are read-only."""
    spec = parse_spec(base(config={"a": "b"}, envRefs={"A": literal("x")}), NS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.stack = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.config["a"] = "c"  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.env_refs["B"] = ResourceRef(literal="y")  # type: ignore[index]


def test_hand_built_spec_copies_its_mappings() -> None:
    """A StackSpec built from plain dicts copies them into read-only mappings."""
    config = {"a": "b"}
    spec = StackSpec(stack="dev", config=config)
    config["a"] = "changed"
    assert spec.config == {"a": "b"}
    with pytest.raises(TypeError):
        spec.config["a"] = "c"  # type: ignore[index]
    assert hash(spec) == hash(StackSpec(stack="dev", config={"a": "b"}))


# -- Go durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("1h30m", 5400.0, id="hours-minutes"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("1.5h", 5400.0, id="fractional-hours"),
        pytest.param(".5h", 1800.0, id="leading-dot"),
        pytest.param("1.h", 3600.0, id="trailing-dot"),
        pytest.param("300ms", 0.3, id="milliseconds"),
        pytest.param("2us", 2e-6, id="microseconds-u"),
        pytest.param("2\u00b5s", 2e-6, id="microseconds-micro-sign"),
        pytest.param("2\u03bcs", 2e-6, id="microseconds-greek-mu"),
        pytest.param("5ns", 5e-9, id="nanoseconds"),
        pytest.param("1h0.5m10s", 3640.0, id="three-parts"),
        pytest.param("0", 0.0, id="bare-zero"),
        pytest.param("+2s", 2.0, id="plus-sign"),
        pytest.param("-1m", -60.0, id="negative"),
    ],
)
def test_go_duration(text: str, seconds: float) -> None:
    """Go duration strings convert to seconds as time.ParseDuration does."""
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1", id="no-unit"),
        pytest.param("h", id="no-number"),
        pytest.param(".h", id="dot-only"),
        pytest.param("1x", id="unknown-unit"),
        pytest.param("1h 30m", id="space"),
        pytest.param("1e3s", id="exponent"),
        pytest.param("-", id="sign-only"),
        pytest.param("1d", id="days"),
    ],
)
def test_go_duration_rejects(text: str) -> None:
    """Strings time.ParseDuration rejects raise ValueError."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)
