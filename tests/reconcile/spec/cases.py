"""One table of Stack specs, each with two verdicts: the parser's and the apiserver's.

The spec is validated twice: by the operator's parser (``reconcile.spec.parse_spec``, an
InvalidSpec naming the field) and, earlier, by the apiserver (the CRD's OpenAPI schema and
CEL rules refuse the Stack outright). Each ``Case`` says what both do with one spec, so the
two cannot drift apart unseen:

- ``tests/reconcile/spec/test_parse.py`` asserts the parser's verdict on every case;
- ``tests/reconcile/crd/test_spec_validation.py`` asserts the apiserver's, against a real
  apiserver, and then the parser's on what the apiserver stored.

Where the verdicts differ, only one back end can catch the case, and its ``why`` says so:
the schema cannot type config, and stores ``workspaceTemplate`` as given; it checks the
type and length of names, not their form; it keeps PKO's deprecated and unsupported fields
and ref types on purpose, so that the parser can name what to use instead; it allows a
Stack without a source. The CRD takes any commit string, as PKO's does, so that the parser's
message (a full SHA, and how to get it) is what a user of a short one sees.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import pytest

from reconcile.spec import SpecError, parse_spec
from reconcile.spec.model import ConfigMapKeyRef, FluxSourceRef
from tests.reconcile.spec.helpers import SHA, base, secret

TOKEN: Final = "ghp_0123456789abcdefTOKEN"  # noqa: S105 - fake; no error may echo it


@dataclasses.dataclass(frozen=True)
class Refused:
    """A back end's refusal: the field path its error names, and a part of its message."""

    path: str
    message: str


ACCEPTED: Final = None
"""The parser parses the spec; the apiserver stores it unchanged (nothing pruned)."""

Verdict: TypeAlias = Refused | None


@dataclasses.dataclass(frozen=True)
class Case:
    """A spec (``fields`` over a minimal valid one; None removes a field) and its verdicts."""

    id: str
    fields: Mapping[str, Any]
    parser: Verdict
    apiserver: Verdict
    why: str = ""
    """Why only one back end refuses the spec; required exactly when the verdicts differ."""
    parsed: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """Attributes of the ``StackSpec`` an accepted spec parses into, and their values."""

    def __post_init__(self) -> None:
        """A one-sided case says why; a refused one expects no parsed values."""
        one_sided = (self.parser is ACCEPTED) != (self.apiserver is ACCEPTED)
        if one_sided != bool(self.why):
            msg = f"{self.id}: say why exactly when only one back end refuses the spec"
            raise ValueError(msg)
        if self.parsed and self.parser is not ACCEPTED:
            msg = f"{self.id}: a refused spec parses into nothing"
            raise ValueError(msg)

    @property
    def spec(self) -> dict[str, Any]:
        """A fresh copy of the spec: the minimal one with ``fields`` over it."""
        merged = base(**copy.deepcopy(dict(self.fields)))
        return {key: value for key, value in merged.items() if value is not None}


def each(cases: Iterable[Case]) -> pytest.MarkDecorator:
    """Parametrize a test's ``case`` argument with ``cases``, each named by its id."""
    chosen = list(cases)
    return pytest.mark.parametrize("case", chosen, ids=[case.id for case in chosen])


def check_parser_verdict(case: Case, spec: Any, namespace: str) -> None:
    """Assert ``parse_spec(spec)`` gives ``case``'s verdict (``spec`` may be cached or stored).

    A refusal names the field first and never repeats ``TOKEN``.
    """
    if not isinstance(case.parser, Refused):
        parsed = parse_spec(spec, namespace)
        for attribute, expected in case.parsed.items():
            assert getattr(parsed, attribute) == expected, attribute
        return
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, namespace)
    assert refused.value.path == case.parser.path
    assert str(refused.value).startswith(f"{case.parser.path}: ")
    assert case.parser.message in refused.value.problem
    assert TOKEN not in str(refused.value)


_NOT_SCHEMA = "the schema declares the field to keep it: the parser names the replacement"
_NO_SOURCE = "the schema allows a Stack without a source; the operator reports it as InvalidSpec"
_COMMIT_FORM = "the CRD takes any commit string (as PKO's): the parser says what to write"
_UNTYPED = "the schema stores workspaceTemplate as given (preserve-unknown-fields)"
_SA_FORM = "the schema checks only serviceAccountName's type and length, not its form"
_WS_SA = "spec.workspaceTemplate.spec.serviceAccountName"
_REF_TYPES = "the schema keeps PKO's ref types; the parser refuses those reading the operator"

# The program source, periods and other top-level fields.
SOURCE = [
    Case(
        "commit-and-branch",
        {"commit": SHA},
        parser=Refused("spec.branch", "mutually exclusive"),
        apiserver=Refused(
            "spec.branch", "commit and branch are mutually exclusive: set only one of them"
        ),
    ),
    Case(
        "repo-without-commit-or-branch",
        {"branch": None},
        parser=Refused("spec.projectRepo", "requires a commit or a branch"),
        apiserver=Refused(
            "spec.projectRepo",
            "projectRepo requires a commit or a branch: set exactly one of them",
        ),
    ),
    Case(
        "empty-commit-and-branch",
        {"branch": "", "commit": ""},
        parser=Refused("spec.projectRepo", "requires a commit or a branch"),
        apiserver=Refused("spec.projectRepo", "projectRepo requires a commit or a branch"),
    ),
    Case(
        "commit-abbreviated",
        {"branch": None, "commit": "2b08897"},
        parser=Refused(
            "spec.commit",
            "'2b08897' is an abbreviated SHA (7 hex digits): write the full SHA, 40 hex digits",
        ),
        apiserver=ACCEPTED,
        why=_COMMIT_FORM,
    ),
    Case(
        "commit-4-digits",
        {"branch": None, "commit": "2b08"},
        parser=Refused("spec.commit", "git rev-parse 2b08"),
        apiserver=ACCEPTED,
        why=_COMMIT_FORM,
    ),
    Case(
        "commit-a-name",
        {"branch": None, "commit": "main"},
        parser=Refused("spec.commit", "to follow a branch, set spec.branch instead"),
        apiserver=ACCEPTED,
        why=_COMMIT_FORM,
    ),
    Case(
        "commit-65-digits",
        {"branch": None, "commit": "b" * 65},
        parser=Refused("spec.commit", "full SHA"),
        apiserver=ACCEPTED,
        why=_COMMIT_FORM,
    ),
    Case(
        "commit-sha256",
        {"branch": None, "commit": "B" * 64},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"commit": "b" * 64},
    ),
    Case(
        "commit-only",
        {"branch": None, "commit": SHA},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"commit": SHA, "branch": None},
    ),
    Case(
        "empty-commit-is-unset",
        {"commit": ""},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"commit": None, "branch": "main"},
    ),
    Case(
        "no-source",
        {"projectRepo": None, "branch": None},
        parser=Refused("spec.projectRepo", "a program source is required"),
        apiserver=ACCEPTED,
        why=_NO_SOURCE,
    ),
    Case(
        "stack-required",
        {"stack": None},
        parser=Refused("spec.stack", "is required"),
        apiserver=Refused("spec.stack", "Required value"),
    ),
    Case(
        "resync-negative",
        {"resyncFrequencySeconds": -1},
        parser=Refused("spec.resyncFrequencySeconds", "must not be negative"),
        apiserver=Refused("spec.resyncFrequencySeconds", "should be greater than or equal to 0"),
    ),
    Case(
        "retry-backoff-zero",
        {"retryMaxBackoffDurationSeconds": 0},
        parser=Refused("spec.retryMaxBackoffDurationSeconds", "at least 1"),
        apiserver=Refused(
            "spec.retryMaxBackoffDurationSeconds", "should be greater than or equal to 1"
        ),
    ),
    Case(
        "timeout-zero",
        {"timeoutSeconds": 0},
        parser=Refused("spec.timeoutSeconds", "at least 1"),
        apiserver=Refused("spec.timeoutSeconds", "should be greater than or equal to 1"),
    ),
    Case(
        "timeout-1",
        {"timeoutSeconds": 1},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"timeout_seconds": 1},
    ),
    Case(
        "duration-pattern",
        {"prerequisites": [{"name": "n", "requirement": {"succeededWithinDuration": "1 h"}}]},
        parser=Refused(
            "spec.prerequisites[0].requirement.succeededWithinDuration", "use a Go duration"
        ),
        apiserver=Refused(
            "spec.prerequisites[0].requirement.succeededWithinDuration", "should match"
        ),
    ),
    *(
        Case(
            f"repo-dir-{name}",
            {"repoDir": given},
            parser=ACCEPTED,
            apiserver=ACCEPTED,
            parsed={"repo_dir": expected},
        )
        for name, given, expected in [
            ("leading-slash", "/kubernetes-ts-nginx", "kubernetes-ts-nginx"),
            ("slashes", "//stacks//app/", "stacks/app"),
            ("root", "/", None),
            ("dot-slash", "./app", "app"),
        ]
    ),
    *(
        Case(
            f"repo-dir-{name}",
            {"repoDir": given},
            parser=Refused("spec.repoDir", "must stay inside the repository: remove the .."),
            apiserver=ACCEPTED,
            why="the schema checks repoDir's type, not its form",
        )
        for name, given in [("up", ".."), ("escapes", "a/../../b"), ("root-up", "/../x")]
    ),
]

# projectRepo: what git cannot or must not fetch, and URLs holding credentials.
REPO_URL = [
    Case(
        "repo-token-in-url",
        {"projectRepo": f"https://{TOKEN}@github.com/example/infra"},
        parser=Refused("spec.projectRepo", "credentials in the URL are refused"),
        apiserver=Refused("spec.projectRepo", "credentials in the URL are refused"),
    ),
    Case(
        "repo-password-in-url",
        {"projectRepo": f"https://bot:{TOKEN}@github.com/example/infra"},
        parser=Refused("spec.projectRepo", "set spec.gitAuth"),
        apiserver=Refused("spec.projectRepo", "remove them from projectRepo and set spec.gitAuth"),
    ),
    Case(
        "repo-ssh-password-in-url",
        {"projectRepo": f"ssh://git:{TOKEN}@github.com/example/infra"},
        parser=Refused("spec.projectRepo", "a password in an ssh:// URL is refused"),
        apiserver=Refused("spec.projectRepo", "credentials in the URL are refused"),
    ),
    Case(
        "repo-ftp-with-token",
        {"projectRepo": f"ftp://{TOKEN}@github.com/example/infra"},
        parser=Refused("spec.projectRepo", "unsupported scheme 'ftp://'"),
        apiserver=Refused("spec.projectRepo", "not a git URL the operator fetches"),
    ),
    Case(
        "repo-file-url",
        {"projectRepo": "file:///srv/git/infra.git"},
        parser=Refused("spec.projectRepo", "file:// is refused"),
        apiserver=Refused("spec.projectRepo", "not a git URL the operator fetches"),
    ),
    Case(
        "repo-local-path",
        {"projectRepo": "/srv/git/infra.git"},
        parser=Refused("spec.projectRepo", "local paths are refused"),
        apiserver=Refused("spec.projectRepo", "file:// and local paths are refused"),
    ),
    Case(
        "repo-ftp",
        {"projectRepo": "ftp://host/infra.git"},
        parser=Refused("spec.projectRepo", "unsupported scheme 'ftp://'"),
        apiserver=Refused("spec.projectRepo", "not a git URL the operator fetches"),
    ),
    Case(
        "repo-option-host",
        {"projectRepo": "ssh://-oProxyCommand=touch%20x/r"},
        parser=Refused("spec.projectRepo", "starting with - is refused"),
        apiserver=Refused("spec.projectRepo", "starting with - is refused"),
    ),
    Case(
        "repo-scp-option-host",
        {"projectRepo": "git@-oProxyCommand=x:r"},
        parser=Refused("spec.projectRepo", "starting with - is refused"),
        apiserver=Refused("spec.projectRepo", "starting with - is refused"),
    ),
    *(
        Case(f"repo-{name}", {"projectRepo": url}, parser=ACCEPTED, apiserver=ACCEPTED)
        for name, url in [
            ("scp-like", "git@github.com:example/infra.git"),
            ("scp-like-no-user", "github.com:example/infra.git"),
            ("scp-like-ipv6", "git@[::1]:infra.git"),
            ("ssh-user", "ssh://git@github.com:22/example/infra"),
            ("git-daemon", "git://127.0.0.1:9418/infra.git"),
            ("http", "http://127.0.0.1:8080/infra.git"),
            ("at-in-path", "https://host/path@v2/infra"),
        ]
    ),
]

# config and secretsRef keys, envRefs and secretsRef refs.
CONFIG_AND_REFS = [
    Case(
        "config-keys",
        {"config": {"name": "v", "aws:region": "w"}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
    ),
    Case(
        "config-key-two-colons",
        {"config": {"a:b:c": "v"}},
        parser=Refused(
            "spec.config[a:b:c]", "not a Pulumi config key (at most one ':'): use namespace:name"
        ),
        apiserver=ACCEPTED,
        why="CEL cannot type config (any JSON values): a bad key is stored",
    ),
    Case(
        "secret-config-key",
        {"secretsRef": {"app:pw": secret("db", "pw")}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
    ),
    Case(
        "secret-config-key-empty-namespace",
        {"secretsRef": {":pw": secret("db", "pw")}},
        parser=Refused("spec.secretsRef[:pw]", "empty namespace or name"),
        apiserver=Refused("spec.secretsRef", "no empty part"),
    ),
    Case(
        "secret-config-key-two-colons",
        {"secretsRef": {"db:pw:x": secret("db", "pw")}},
        parser=Refused("spec.secretsRef[db:pw:x]", "at most one ':'"),
        apiserver=Refused("spec.secretsRef", "config keys are name or namespace:name"),
    ),
    Case(
        "ref-unknown-type",
        {"envRefs": {"A": {"type": "ConfigMap"}}},
        parser=Refused("spec.envRefs[A].type", "use Secret or Literal"),
        apiserver=Refused("spec.envRefs.A.type", 'Unsupported value: "ConfigMap"'),
    ),
    Case(
        "env-ref",
        {"envRefs": {"HOME_DIR": {"type": "Env", "env": {"name": "HOME"}}}},
        parser=Refused(
            "spec.envRefs[HOME_DIR].type",
            "operator's own process and is refused: put the value in a Secret",
        ),
        apiserver=ACCEPTED,
        why=_REF_TYPES,
    ),
    Case(
        "fs-ref",
        {"secretsRef": {"k": {"type": "FS", "filesystem": {"path": "/etc/passwd"}}}},
        parser=Refused("spec.secretsRef[k].type", "operator's own filesystem and is refused"),
        apiserver=ACCEPTED,
        why=_REF_TYPES,
    ),
]

# The stack and backend pair, and the secrets provider.
BACKEND = [
    Case(
        "stack-org-on-file-backend",
        {"stack": "acme/proj/dev", "backend": "file:///state"},
        parser=Refused(
            "spec.stack",
            "organization 'acme' does not exist on a self-managed file:// backend, whose only"
            " organization is 'organization': use 'organization/proj/dev' or 'dev'",
        ),
        apiserver=Refused("spec.stack", 'knows only the organization "organization"'),
    ),
    Case(
        "stack-org-on-s3-backend",
        {"stack": "acme/dev", "backend": "s3://bucket"},
        parser=Refused("spec.stack", "s3:// backend"),
        apiserver=Refused("spec.stack", "use organization/project/stack or stack"),
    ),
    Case(
        "secrets-provider-unknown",
        {"secretsProvider": "vault"},
        parser=Refused(
            "spec.secretsProvider",
            "unknown secrets provider: use default, passphrase, awskms://..., azurekeyvault://...,"
            " gcpkms://..., hashivault://...",
        ),
        apiserver=Refused(
            "spec.secretsProvider",
            "unknown secrets provider: use default, passphrase, awskms://...",
        ),
    ),
    Case(
        "secrets-provider-without-key",
        {"secretsProvider": "awskms"},
        parser=Refused("spec.secretsProvider", "unknown secrets provider"),
        apiserver=Refused("spec.secretsProvider", "unknown secrets provider"),
    ),
    *(
        Case(name, fields, parser=ACCEPTED, apiserver=ACCEPTED)
        for name, fields in [
            ("provider-default", {"secretsProvider": "default"}),
            ("awskms", {"secretsProvider": "awskms:///arn:aws:kms:us-east-1:1:key/1"}),
            ("hashivault", {"secretsProvider": "hashivault://key"}),
            ("provider-empty", {"secretsProvider": ""}),
            ("diy-org", {"stack": "organization/proj/dev", "backend": "file:///s"}),
            ("diy-plain-stack", {"stack": "dev", "backend": "gs://b"}),
            ("cloud", {"stack": "acme/proj/dev", "backend": "https://api.pulumi.com"}),
        ]
    ),
]

# The other program sources (fluxSource, programRef) and the PKO v2 fields around them.
_GIT_OFF: Final = {"projectRepo": None, "branch": None}
_FLUX_API = "source.toolkit.fluxcd.io/v1"
_FLUX_REF: Final = {"apiVersion": _FLUX_API, "kind": "GitRepository", "name": "infra"}
_NAME_FORM = "the schema checks the type of a source's fields, not their values or form"
PKO_V2 = [
    Case(
        "flux-source",
        {**_GIT_OFF, "fluxSource": {"sourceRef": _FLUX_REF, "dir": "stacks/app"}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={
            "flux_source": FluxSourceRef(_FLUX_API, "GitRepository", "infra", "stacks/app"),
            "project_repo": None,
            "source_kind": "flux",
        },
    ),
    *(
        Case(
            f"flux-{kind.lower()}-{version}",
            {
                **_GIT_OFF,
                "fluxSource": {"sourceRef": {**_FLUX_REF, "kind": kind, "apiVersion": api}},
            },
            parser=ACCEPTED,
            apiserver=ACCEPTED,
            parsed={"flux_source": FluxSourceRef(api, kind, "infra")},
        )
        for kind in ("OCIRepository", "Bucket")
        for version, api in (("v1", _FLUX_API), ("v1beta2", "source.toolkit.fluxcd.io/v1beta2"))
    ),
    Case(
        "flux-and-repo",
        {"fluxSource": {"sourceRef": _FLUX_REF}},
        parser=Refused("spec.fluxSource", "projectRepo and fluxSource are exclusive"),
        apiserver=Refused(
            "spec.fluxSource",
            "projectRepo and fluxSource are exclusive: set exactly one program source",
        ),
    ),
    Case(
        "program-and-repo",
        {"programRef": {"name": "p"}},
        parser=Refused("spec.programRef", "projectRepo and programRef are exclusive"),
        apiserver=Refused(
            "spec.programRef",
            "projectRepo and programRef are exclusive: set exactly one program source",
        ),
    ),
    Case(
        "flux-dir-leading-slash",
        {**_GIT_OFF, "fluxSource": {"sourceRef": _FLUX_REF, "dir": "/random-yaml/"}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"flux_source": FluxSourceRef(_FLUX_API, "GitRepository", "infra", "random-yaml")},
    ),
    Case(
        "flux-kind-unknown",
        {**_GIT_OFF, "fluxSource": {"sourceRef": {**_FLUX_REF, "kind": "HelmRepository"}}},
        parser=Refused("spec.fluxSource.sourceRef.kind", "not a Flux source kind"),
        apiserver=ACCEPTED,
        why=_NAME_FORM,
    ),
    Case(
        "flux-api-unknown",
        {**_GIT_OFF, "fluxSource": {"sourceRef": {**_FLUX_REF, "apiVersion": "v1"}}},
        parser=Refused("spec.fluxSource.sourceRef.apiVersion", "not a Flux source API"),
        apiserver=ACCEPTED,
        why=_NAME_FORM,
    ),
    Case(
        "flux-dir-escapes",
        {**_GIT_OFF, "fluxSource": {"sourceRef": _FLUX_REF, "dir": "../other"}},
        parser=Refused("spec.fluxSource.dir", "must stay inside the artifact"),
        apiserver=ACCEPTED,
        why=_NAME_FORM,
    ),
    Case(
        "flux-source-ref-required",
        {**_GIT_OFF, "fluxSource": {"dir": "app"}},
        parser=Refused("spec.fluxSource.sourceRef", "is required"),
        apiserver=Refused("spec.fluxSource.sourceRef", "Required value"),
    ),
    Case(
        "flux-with-branch",
        {"projectRepo": None, "fluxSource": {"sourceRef": _FLUX_REF}},
        parser=Refused("spec.branch", "applies to projectRepo only"),
        apiserver=ACCEPTED,
        why="the CEL rules pair branch with projectRepo only when projectRepo is set",
    ),
    Case(
        "program-ref",
        {**_GIT_OFF, "programRef": {"name": "random-yaml"}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"program_ref": "random-yaml", "source_kind": "program"},
    ),
    Case(
        "program-ref-name-form",
        {**_GIT_OFF, "programRef": {"name": "Random_YAML"}},
        parser=Refused("spec.programRef.name", "not a Program name"),
        apiserver=ACCEPTED,
        why=_NAME_FORM,
    ),
    Case(
        "program-and-flux",
        {**_GIT_OFF, "programRef": {"name": "p"}, "fluxSource": {"sourceRef": _FLUX_REF}},
        parser=Refused("spec.programRef", "fluxSource and programRef are exclusive"),
        apiserver=Refused(
            "spec.programRef",
            "fluxSource and programRef are exclusive: set exactly one program source",
        ),
    ),
    Case(
        "config-ref",
        {"configRef": {"app": {"name": "app-config", "key": "settings.json", "json": True}}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"config_ref": {"app": ConfigMapKeyRef("app-config", "settings.json", json=True)}},
    ),
    Case(
        "config-ref-key-required",
        {"configRef": {"app": {"name": "app-config"}}},
        parser=Refused("spec.configRef[app].key", "is required"),
        apiserver=Refused("spec.configRef.app.key", "Required value"),
    ),
    Case(
        "config-ref-bad-config-key",
        {"configRef": {"a:b:c": {"name": "cm", "key": "k"}}},
        parser=Refused("spec.configRef[a:b:c]", "not a Pulumi config key"),
        apiserver=ACCEPTED,
        why="the schema cannot check config keys (a map's keys)",
    ),
    Case(
        "environment",
        {"environment": ["infra/dev", "shared"]},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"environments": ("infra/dev", "shared")},
    ),
    Case(
        "environment-twice",
        {"environment": ["infra/dev", "infra/dev"]},
        parser=Refused("spec.environment[1]", "listed twice"),
        apiserver=ACCEPTED,
        why="an atomic list may repeat an item",
    ),
    Case(
        "reclaim-retain",
        {"workspaceReclaimPolicy": "Retain"},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"workspace_reclaim_policy": "Retain"},
    ),
    Case(
        "reclaim-unknown",
        {"workspaceReclaimPolicy": "Keep"},
        parser=Refused("spec.workspaceReclaimPolicy", "not a reclaim policy"),
        apiserver=Refused("spec.workspaceReclaimPolicy", "Unsupported value"),
    ),
    Case(
        "pko-v2-flags",
        {"targetDependents": True, "runProgram": True, "shallow": True, "targets": ["urn:a"]},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
        parsed={"target_dependents": True, "run_program": True, "shallow": True},
    ),
    Case(
        "github-app",
        {"gitAuth": {"githubApp": {"appID": {"type": "Literal", "literal": {"value": "1"}}}}},
        parser=Refused("spec.gitAuth.githubApp", "mint an installation token"),
        apiserver=ACCEPTED,
        why=_NOT_SCHEMA,
    ),
    Case(
        "update-template",
        {"updateTemplate": {"spec": {"ttlAfterCompleted": "1h"}}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
    ),
]

# Pulumi Kubernetes Operator fields the operator refuses: deprecated.
_REFUSED_FIELDS: Final[list[tuple[str, str, object, str]]] = [
    ("secrets", "secrets", {"db:password": "hunter2"}, "use secretsRef"),
    ("envs", "envs", ["settings"], "use envRefs"),
    ("env-secrets", "envSecrets", ["creds"], "use envRefs"),
    ("token-secret", "accessTokenSecret", "tok", "use envRefs.PULUMI_ACCESS_TOKEN"),
    ("git-auth-secret", "gitAuthSecret", "git", "use gitAuth"),
]
REFUSED_FIELDS = [
    Case(
        name,
        {field: value},
        parser=Refused(f"spec.{field}", message),
        apiserver=ACCEPTED,
        why=_NOT_SCHEMA,
    )
    for name, field, value, message in _REFUSED_FIELDS
]

# The run pod: serviceAccountName and workspaceTemplate.
RUN_POD = [
    *(
        Case(
            f"sa-{name}",
            {"serviceAccountName": account},
            parser=ACCEPTED,
            apiserver=ACCEPTED,
            parsed={"service_account_name": account},
        )
        for name, account in [
            ("default", "default"),
            ("word", "pulumi"),
            ("runner", "runner"),
            ("dots", "ci.runner-1"),
            ("253", "a" * 253),
        ]
    ),
    Case(
        "sa-upper",
        {"serviceAccountName": "Runner"},
        parser=Refused("spec.serviceAccountName", "DNS subdomain"),
        apiserver=ACCEPTED,
        why=_SA_FORM,
    ),
    Case(
        "sa-not-a-name",
        {"serviceAccountName": "Not_A_Name"},
        parser=Refused("spec.serviceAccountName", "DNS subdomain"),
        apiserver=ACCEPTED,
        why=_SA_FORM,
    ),
    Case(
        "sa-254",
        {"serviceAccountName": "a" * 254},
        parser=Refused("spec.serviceAccountName", "DNS subdomain"),
        apiserver=Refused("spec.serviceAccountName", "Too long"),
    ),
    Case(
        "sa-list",
        {"serviceAccountName": ["a"]},
        parser=Refused("spec.serviceAccountName", "must be a string"),
        # The schema ("must be of type string") or server-side apply ("expected string").
        apiserver=Refused("spec.serviceAccountName", "string"),
    ),
    *(
        Case(
            f"sa-{name}",
            {"serviceAccountName": top, "workspaceTemplate": {"spec": {"serviceAccountName": ws}}},
            parser=ACCEPTED,
            apiserver=ACCEPTED,
            parsed={"service_account_name": expected, "service_account_field": field},
        )
        for name, top, ws, expected, field in [
            ("in-workspace", None, "runner", "runner", _WS_SA),
            ("both-the-same", "runner", "runner", "runner", "spec.serviceAccountName"),
            ("workspace-empty", "runner", "", "runner", "spec.serviceAccountName"),
        ]
    ),
    Case(
        "sa-both-differ",
        {"serviceAccountName": "a", "workspaceTemplate": {"spec": {"serviceAccountName": "b"}}},
        parser=Refused(
            _WS_SA,
            '"b" differs from spec.serviceAccountName "a": name the run\'s ServiceAccount in one'
            " of the two (or the same in both)",
        ),
        apiserver=ACCEPTED,
        why=_UNTYPED,
    ),
    Case(
        "sa-workspace-not-a-name",
        {"workspaceTemplate": {"spec": {"serviceAccountName": "Not_A_Name"}}},
        parser=Refused(_WS_SA, "DNS subdomain"),
        apiserver=ACCEPTED,
        why=_UNTYPED,
    ),
    Case(
        "sa-in-pod-template",
        {"workspaceTemplate": {"spec": {"podTemplate": {"spec": {"serviceAccountName": "b"}}}}},
        parser=Refused(
            "spec.workspaceTemplate.spec.podTemplate.spec.serviceAccountName",
            "refused here: set spec.serviceAccountName (or spec.workspaceTemplate.spec."
            "serviceAccountName)",
        ),
        apiserver=ACCEPTED,
        why=_UNTYPED,
    ),
    Case(
        "workspace-empty-env-value",
        {"workspaceTemplate": {"spec": {"env": [{"name": "EMPTY", "value": ""}]}}},
        parser=ACCEPTED,
        apiserver=ACCEPTED,
    ),
    Case(
        "workspace-host-path",
        {
            "workspaceTemplate": {
                "spec": {
                    "podTemplate": {
                        "spec": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
                    }
                }
            }
        },
        parser=Refused(
            "spec.workspaceTemplate.spec.podTemplate.spec.volumes[0].hostPath",
            "the run pod must satisfy the restricted/baseline Pod Security Standard;"
            " use a persistentVolumeClaim",
        ),
        apiserver=ACCEPTED,
        why=_UNTYPED,
    ),
]

CASES: Final = [
    *SOURCE,
    *REPO_URL,
    *CONFIG_AND_REFS,
    *BACKEND,
    *PKO_V2,
    *REFUSED_FIELDS,
    *RUN_POD,
]
"""Every case; their ids are unique."""

if len({case.id for case in CASES}) != len(CASES):
    raise ValueError("case ids must be unique")
