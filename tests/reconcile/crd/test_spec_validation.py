"""Spec validation: the apiserver (schema and CEL rules) and the parser agree on what can work.

What the CRD refuses is refused with the field path and our message; what could only fail at
run time is refused by both; what the CRD cannot type (config) or keeps on purpose (deprecated
and unsupported PKO fields) is stored and left to the parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconcile.spec import SpecError, parse_spec
from testbed.control_plane import ControlPlane
from tests.reconcile.crd.helpers import MINIMAL_SPEC, SHA, apply_stack, get_stack, secret

pytestmark = pytest.mark.integration


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
        pytest.param({"serviceAccountName": "runner"}, id="service-account"),
        pytest.param(
            {"workspaceTemplate": {"spec": {"env": [{"name": "EMPTY", "value": ""}]}}},
            id="workspace-empty-env-value",
        ),
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
        pytest.param(
            {
                "workspaceTemplate": {
                    "spec": {
                        "podTemplate": {
                            "spec": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}
                        }
                    }
                }
            },
            "spec.workspaceTemplate.spec.podTemplate.spec.volumes[0].hostPath",
            id="workspace-host-path",
        ),
        pytest.param(
            {"serviceAccountName": "Not_A_Name"}, "spec.serviceAccountName", id="service-account"
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
