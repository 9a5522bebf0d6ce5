"""``reconcile.spec.resource_refs``: envRefs, secretsRef and gitAuth refs, PKO's precedence.

The cases shared with the CRD tests are in ``cases`` (``CONFIG_AND_REFS``), judged by
``test_parse``.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.spec import GitAuth, ResourceRef, SecretKeyRef, parse_spec
from tests.reconcile.spec.helpers import NS, assert_refused, base, freeze, literal, secret

INVALID = [
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
]


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_spec_names_field_and_fix(spec: Any, path: str, fragment: str) -> None:
    """An invalid spec raises SpecError whose message starts with the field path."""
    assert_refused(spec, path, fragment)


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_cached_spec_is_refused_the_same(spec: Any, path: str, fragment: str) -> None:
    """The read-only cached form of an invalid spec is refused with the same path."""
    assert_refused(freeze(spec), path, fragment)


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
