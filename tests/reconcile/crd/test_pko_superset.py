"""The Stack CRD declares every field PKO v2's does, in every version PKO v2 serves.

PKO v2.9's ``pulumi.com_stacks.yaml`` (``deploy/crds`` in its repository) is the reference:
its field paths are listed here as they were read from it (``[]`` an array's items, ``{}``
a map's values). ``workspaceTemplate`` and ``updateTemplate`` keep unknown fields here (the
operator validates the first itself and ignores the second), so their insides are not
listed. Without these fields, kubectl's strict validation would reject PKO's manifests, and
tools that only warn would prune what they set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import yaml

from tests.reconcile.crd.helpers import CRD_PATH

PKO_V2_VERSIONS: Final = ("v1", "v1alpha1")
PKO_V2_FIELDS: Final = (
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "spec.accessTokenSecret",
    "spec.backend",
    "spec.branch",
    "spec.commit",
    "spec.config",
    "spec.configRef",
    "spec.configRef{}.json",
    "spec.configRef{}.key",
    "spec.configRef{}.name",
    "spec.continueResyncOnCommitMatch",
    "spec.destroyOnFinalize",
    "spec.envRefs",
    "spec.envRefs{}.env",
    "spec.envRefs{}.env.name",
    "spec.envRefs{}.filesystem",
    "spec.envRefs{}.filesystem.path",
    "spec.envRefs{}.literal",
    "spec.envRefs{}.literal.value",
    "spec.envRefs{}.secret",
    "spec.envRefs{}.secret.key",
    "spec.envRefs{}.secret.name",
    "spec.envRefs{}.secret.namespace",
    "spec.envRefs{}.type",
    "spec.envSecrets",
    "spec.environment",
    "spec.envs",
    "spec.expectNoRefreshChanges",
    "spec.fluxSource",
    "spec.fluxSource.dir",
    "spec.fluxSource.sourceRef",
    "spec.fluxSource.sourceRef.apiVersion",
    "spec.fluxSource.sourceRef.kind",
    "spec.fluxSource.sourceRef.name",
    "spec.gitAuth",
    "spec.gitAuth.accessToken",
    "spec.gitAuth.accessToken.env",
    "spec.gitAuth.accessToken.env.name",
    "spec.gitAuth.accessToken.filesystem",
    "spec.gitAuth.accessToken.filesystem.path",
    "spec.gitAuth.accessToken.literal",
    "spec.gitAuth.accessToken.literal.value",
    "spec.gitAuth.accessToken.secret",
    "spec.gitAuth.accessToken.secret.key",
    "spec.gitAuth.accessToken.secret.name",
    "spec.gitAuth.accessToken.secret.namespace",
    "spec.gitAuth.accessToken.type",
    "spec.gitAuth.basicAuth",
    "spec.gitAuth.basicAuth.password",
    "spec.gitAuth.basicAuth.password.env",
    "spec.gitAuth.basicAuth.password.env.name",
    "spec.gitAuth.basicAuth.password.filesystem",
    "spec.gitAuth.basicAuth.password.filesystem.path",
    "spec.gitAuth.basicAuth.password.literal",
    "spec.gitAuth.basicAuth.password.literal.value",
    "spec.gitAuth.basicAuth.password.secret",
    "spec.gitAuth.basicAuth.password.secret.key",
    "spec.gitAuth.basicAuth.password.secret.name",
    "spec.gitAuth.basicAuth.password.secret.namespace",
    "spec.gitAuth.basicAuth.password.type",
    "spec.gitAuth.basicAuth.userName",
    "spec.gitAuth.basicAuth.userName.env",
    "spec.gitAuth.basicAuth.userName.env.name",
    "spec.gitAuth.basicAuth.userName.filesystem",
    "spec.gitAuth.basicAuth.userName.filesystem.path",
    "spec.gitAuth.basicAuth.userName.literal",
    "spec.gitAuth.basicAuth.userName.literal.value",
    "spec.gitAuth.basicAuth.userName.secret",
    "spec.gitAuth.basicAuth.userName.secret.key",
    "spec.gitAuth.basicAuth.userName.secret.name",
    "spec.gitAuth.basicAuth.userName.secret.namespace",
    "spec.gitAuth.basicAuth.userName.type",
    "spec.gitAuth.githubApp",
    "spec.gitAuth.githubApp.appID",
    "spec.gitAuth.githubApp.appID.env",
    "spec.gitAuth.githubApp.appID.env.name",
    "spec.gitAuth.githubApp.appID.filesystem",
    "spec.gitAuth.githubApp.appID.filesystem.path",
    "spec.gitAuth.githubApp.appID.literal",
    "spec.gitAuth.githubApp.appID.literal.value",
    "spec.gitAuth.githubApp.appID.secret",
    "spec.gitAuth.githubApp.appID.secret.key",
    "spec.gitAuth.githubApp.appID.secret.name",
    "spec.gitAuth.githubApp.appID.secret.namespace",
    "spec.gitAuth.githubApp.appID.type",
    "spec.gitAuth.githubApp.installationID",
    "spec.gitAuth.githubApp.installationID.env",
    "spec.gitAuth.githubApp.installationID.env.name",
    "spec.gitAuth.githubApp.installationID.filesystem",
    "spec.gitAuth.githubApp.installationID.filesystem.path",
    "spec.gitAuth.githubApp.installationID.literal",
    "spec.gitAuth.githubApp.installationID.literal.value",
    "spec.gitAuth.githubApp.installationID.secret",
    "spec.gitAuth.githubApp.installationID.secret.key",
    "spec.gitAuth.githubApp.installationID.secret.name",
    "spec.gitAuth.githubApp.installationID.secret.namespace",
    "spec.gitAuth.githubApp.installationID.type",
    "spec.gitAuth.githubApp.privateKey",
    "spec.gitAuth.githubApp.privateKey.env",
    "spec.gitAuth.githubApp.privateKey.env.name",
    "spec.gitAuth.githubApp.privateKey.filesystem",
    "spec.gitAuth.githubApp.privateKey.filesystem.path",
    "spec.gitAuth.githubApp.privateKey.literal",
    "spec.gitAuth.githubApp.privateKey.literal.value",
    "spec.gitAuth.githubApp.privateKey.secret",
    "spec.gitAuth.githubApp.privateKey.secret.key",
    "spec.gitAuth.githubApp.privateKey.secret.name",
    "spec.gitAuth.githubApp.privateKey.secret.namespace",
    "spec.gitAuth.githubApp.privateKey.type",
    "spec.gitAuth.sshAuth",
    "spec.gitAuth.sshAuth.password",
    "spec.gitAuth.sshAuth.password.env",
    "spec.gitAuth.sshAuth.password.env.name",
    "spec.gitAuth.sshAuth.password.filesystem",
    "spec.gitAuth.sshAuth.password.filesystem.path",
    "spec.gitAuth.sshAuth.password.literal",
    "spec.gitAuth.sshAuth.password.literal.value",
    "spec.gitAuth.sshAuth.password.secret",
    "spec.gitAuth.sshAuth.password.secret.key",
    "spec.gitAuth.sshAuth.password.secret.name",
    "spec.gitAuth.sshAuth.password.secret.namespace",
    "spec.gitAuth.sshAuth.password.type",
    "spec.gitAuth.sshAuth.sshPrivateKey",
    "spec.gitAuth.sshAuth.sshPrivateKey.env",
    "spec.gitAuth.sshAuth.sshPrivateKey.env.name",
    "spec.gitAuth.sshAuth.sshPrivateKey.filesystem",
    "spec.gitAuth.sshAuth.sshPrivateKey.filesystem.path",
    "spec.gitAuth.sshAuth.sshPrivateKey.literal",
    "spec.gitAuth.sshAuth.sshPrivateKey.literal.value",
    "spec.gitAuth.sshAuth.sshPrivateKey.secret",
    "spec.gitAuth.sshAuth.sshPrivateKey.secret.key",
    "spec.gitAuth.sshAuth.sshPrivateKey.secret.name",
    "spec.gitAuth.sshAuth.sshPrivateKey.secret.namespace",
    "spec.gitAuth.sshAuth.sshPrivateKey.type",
    "spec.gitAuthSecret",
    "spec.prerequisites",
    "spec.prerequisites[].name",
    "spec.prerequisites[].requirement",
    "spec.prerequisites[].requirement.succeededWithinDuration",
    "spec.preview",
    "spec.programRef",
    "spec.programRef.name",
    "spec.projectRepo",
    "spec.refresh",
    "spec.repoDir",
    "spec.resyncFrequencySeconds",
    "spec.retryMaxBackoffDurationSeconds",
    "spec.retryOnUpdateConflict",
    "spec.runProgram",
    "spec.secrets",
    "spec.secretsProvider",
    "spec.secretsRef",
    "spec.secretsRef{}.env",
    "spec.secretsRef{}.env.name",
    "spec.secretsRef{}.filesystem",
    "spec.secretsRef{}.filesystem.path",
    "spec.secretsRef{}.literal",
    "spec.secretsRef{}.literal.value",
    "spec.secretsRef{}.secret",
    "spec.secretsRef{}.secret.key",
    "spec.secretsRef{}.secret.name",
    "spec.secretsRef{}.secret.namespace",
    "spec.secretsRef{}.type",
    "spec.serviceAccountName",
    "spec.shallow",
    "spec.stack",
    "spec.targetDependents",
    "spec.targets",
    "spec.updateTemplate",
    "spec.useLocalStackOnly",
    "spec.workspaceReclaimPolicy",
    "spec.workspaceTemplate",
    "status",
    "status.conditions",
    "status.conditions[].lastTransitionTime",
    "status.conditions[].message",
    "status.conditions[].observedGeneration",
    "status.conditions[].reason",
    "status.conditions[].status",
    "status.conditions[].type",
    "status.currentUpdate",
    "status.currentUpdate.commit",
    "status.currentUpdate.generation",
    "status.currentUpdate.name",
    "status.currentUpdate.reconcileRequest",
    "status.lastUpdate",
    "status.lastUpdate.failures",
    "status.lastUpdate.generation",
    "status.lastUpdate.lastAttemptedCommit",
    "status.lastUpdate.lastResyncTime",
    "status.lastUpdate.lastSuccessfulCommit",
    "status.lastUpdate.message",
    "status.lastUpdate.name",
    "status.lastUpdate.permalink",
    "status.lastUpdate.reconcileRequest",
    "status.lastUpdate.state",
    "status.lastUpdate.type",
    "status.observedGeneration",
    "status.observedReconcileRequest",
    "status.outputs",
    "status.projectInfo",
    "status.projectInfo.name",
    "status.projectInfo.runtime",
)
KEEPS_UNKNOWN: Final = ("spec.workspaceTemplate", "spec.updateTemplate")


def field_paths(schema: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every property path of an OpenAPI schema (``[]``: array items, ``{}``: map values)."""
    found: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        found |= {path} | field_paths(sub, path)
        if sub.get("type") == "array" and "items" in sub:
            found |= field_paths(sub["items"], path + "[]")
        if isinstance(sub.get("additionalProperties"), Mapping):
            found |= field_paths(sub["additionalProperties"], path + "{}")
    return found


def versions() -> dict[str, Mapping[str, Any]]:
    """The CRD's versions by name: their OpenAPI schemas."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}


def test_every_pko_v2_stack_field_is_declared_in_every_version() -> None:
    """No PKO v2 field is missing from v1 or v1alpha1 (a superset; ours has more)."""
    schemas = versions()
    assert set(PKO_V2_VERSIONS) <= schemas.keys()
    for name in PKO_V2_VERSIONS:
        declared = field_paths(schemas[name])
        assert [f for f in PKO_V2_FIELDS if f not in declared] == [], name


def test_the_templates_keep_unknown_fields() -> None:
    """The workspace and update templates store what PKO v2 accepts in them."""
    spec = versions()["v1"]["properties"]["spec"]["properties"]
    for path in KEEPS_UNKNOWN:
        assert spec[path.split(".")[1]].get("x-kubernetes-preserve-unknown-fields") is True


def test_the_check_sees_a_missing_field() -> None:
    """Positive control: a schema without ``spec.shallow`` fails the superset check."""
    schema = versions()["v1"]
    spec = dict(schema["properties"]["spec"])
    spec["properties"] = {k: v for k, v in spec["properties"].items() if k != "shallow"}
    trimmed = {**schema, "properties": {**schema["properties"], "spec": spec}}
    assert "spec.shallow" not in field_paths(trimmed)
    assert "spec.shallow" in PKO_V2_FIELDS
