"""``reconcile.spec.model``: values keep their invariants, never leak literals, never change."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reconcile.spec import (
    GitAuth,
    ResourceRef,
    SecretKeyRef,
    StackSpec,
    parse_spec,
    referenced_secrets,
)
from tests.reconcile.spec.helpers import NS, base, literal, secret

PASSWORD = secret("git", "password")


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
