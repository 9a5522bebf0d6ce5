"""``reconcile.spec.workspace``: serviceAccountName and the workspaceTemplate the pod runner uses.

PKO v2 manifests parse into the exact pod overrides; every key outside the supported subset,
and everything that would weaken the run pod or fight the runner, is refused on its path.
Volumes and mounts are ``test_volumes``'; the serviceAccountName cases, shared with the CRD
tests, are in ``cases`` (``RUN_POD``), judged by ``test_parse``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
import yaml

from reconcile.spec import DEFAULT_SERVICE_ACCOUNT, StackSpec, Workspace, parse_spec
from tests.reconcile.spec.helpers import (
    NS,
    REPO,
    C,
    P,
    S,
    T,
    assert_refused,
    base,
    container,
    freeze,
    literal,
    overrides,
    pod,
    ws,
)

# -- a PKO v2 manifest parses into the exact overrides ------------------------------------

PKO_V2 = f"""
stack: org/proj/dev
projectRepo: {REPO}
branch: main
serviceAccountName: pulumi-runner
envRefs:
  PULUMI_ACCESS_TOKEN: {{type: Secret, secret: {{name: pulumi-api, key: token}}}}
workspaceTemplate:
  metadata:
    labels: {{team: a, tier: infra}}
    annotations: {{example.com/owner: platform}}
  spec:
    image: pulumi/pulumi:3.150.0-nonroot
    imagePullPolicy: IfNotPresent
    securityProfile: baseline
    resources:
      requests: {{cpu: 500m, memory: 1Gi}}
      limits: {{memory: 2Gi, ephemeral-storage: 4}}
    env:
      - {{name: AWS_REGION, value: us-east-2}}
      - name: DB_PASSWORD
        valueFrom: {{secretKeyRef: {{name: db, key: password, optional: false}}}}
      - name: SETTING
        valueFrom: {{configMapKeyRef: {{name: settings, key: level}}}}
      - name: POD_NAME
        valueFrom: {{fieldRef: {{fieldPath: metadata.name, apiVersion: v1}}}}
      - name: MEMORY
        valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: 1Mi}}}}
    envFrom:
      - {{prefix: APP_, configMapRef: {{name: app-settings}}}}
    podTemplate:
      metadata:
        labels: {{tier: deploy}}
        annotations: {{cluster-autoscaler.kubernetes.io/safe-to-evict: "false"}}
      spec:
        nodeSelector: {{kubernetes.io/os: linux}}
        tolerations:
          - {{key: dedicated, operator: Equal, value: pulumi, effect: NoSchedule}}
          - {{operator: Exists, effect: NoExecute, tolerationSeconds: 300}}
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions: [{{key: pool, operator: In, values: [infra]}}]
        priorityClassName: high-priority
        volumes:
          - {{name: cache, persistentVolumeClaim: {{claimName: pulumi-cache}}}}
          - {{name: certs, secret: {{secretName: ca-bundle, defaultMode: 0444}}}}
          - {{name: scratch, emptyDir: {{}}}}
        containers:
          - name: pulumi
            resources:
              requests: {{cpu: 1}}
            env:
              - {{name: EXTRA, value: ""}}
            envFrom:
              - secretRef: {{name: cloud-creds, optional: true}}
            volumeMounts:
              - {{name: cache, mountPath: /cache/}}
              - {{name: certs, mountPath: /etc/ssl/extra, readOnly: true, subPath: ca.pem}}
"""

PKO_V2_OVERRIDES: dict[str, Any] = {
    "labels": {"team": "a", "tier": "deploy"},
    "annotations": {
        "example.com/owner": "platform",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    },
    "resources": {
        "requests": {"cpu": 1, "memory": "1Gi"},
        "limits": {"memory": "2Gi", "ephemeral-storage": 4},
    },
    "env": [
        {"name": "AWS_REGION", "value": "us-east-2"},
        {
            "name": "DB_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "db", "key": "password", "optional": False}},
        },
        {"name": "SETTING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
        {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v1"}},
        },
        {
            "name": "MEMORY",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {"name": "EXTRA", "value": ""},
    ],
    "envFrom": [
        {"prefix": "APP_", "configMapRef": {"name": "app-settings"}},
        {"secretRef": {"name": "cloud-creds", "optional": True}},
    ],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "pulumi", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["infra"]}]}
                ]
            }
        }
    },
    "priorityClassName": "high-priority",
    "volumes": [
        {"name": "cache", "persistentVolumeClaim": {"claimName": "pulumi-cache"}},
        {"name": "certs", "secret": {"secretName": "ca-bundle", "defaultMode": 0o444}},
        {"name": "scratch", "emptyDir": {}},
    ],
    "volumeMounts": [
        {"name": "cache", "mountPath": "/cache"},
        {"name": "certs", "mountPath": "/etc/ssl/extra", "readOnly": True, "subPath": "ca.pem"},
    ],
}


def test_pko_v2_manifest_parses_into_the_exact_overrides() -> None:
    """Every supported part of a PKO v2 workspaceTemplate lands where the runner reads it."""
    spec = parse_spec(yaml.safe_load(PKO_V2), NS)
    assert spec.service_account_name == "pulumi-runner"
    assert spec.workspace == Workspace(
        security_profile="baseline",
        image="pulumi/pulumi:3.150.0-nonroot",
        image_pull_policy="IfNotPresent",
        pod_json=json.dumps(PKO_V2_OVERRIDES),
    )
    assert spec.workspace.overrides() == PKO_V2_OVERRIDES


def test_cached_form_parses_the_same() -> None:
    """The informer cache's read-only mappings and tuples parse like plain dicts and lists."""
    raw = yaml.safe_load(PKO_V2)
    assert parse_spec(freeze(raw), NS) == parse_spec(raw, NS)


def test_input_is_not_mutated_or_shared() -> None:
    """Parsing leaves the input unchanged, and later input changes do not reach the result."""
    raw = yaml.safe_load(PKO_V2)
    before = copy.deepcopy(raw)
    spec = parse_spec(raw, NS)
    assert raw == before
    raw["workspaceTemplate"]["spec"]["podTemplate"]["spec"]["affinity"]["nodeAffinity"] = {}
    raw["workspaceTemplate"]["metadata"]["labels"]["injected"] = "x"
    assert spec.workspace.overrides() == PKO_V2_OVERRIDES


# -- defaults --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="unset"),
        pytest.param({"serviceAccountName": "", "workspaceTemplate": {}}, id="empty"),
        pytest.param({"serviceAccountName": None, "workspaceTemplate": None}, id="null"),
        pytest.param({"workspaceTemplate": {"metadata": {}, "spec": {}}}, id="empty-parts"),
        pytest.param(
            {"workspaceTemplate": {"spec": {"env": [], "podTemplate": {"spec": {"volumes": []}}}}},
            id="empty-lists",
        ),
    ],
)
def test_defaults(fields: dict[str, Any]) -> None:
    """Unset, null and empty mean the default ServiceAccount and an empty Workspace."""
    spec = parse_spec(base(**fields), NS)
    assert spec.service_account_name == DEFAULT_SERVICE_ACCOUNT == "default"
    assert spec.workspace == Workspace()
    assert spec.workspace.security_profile == "restricted"
    assert spec.workspace.overrides() == {}
    assert spec == StackSpec(stack="org/proj/dev", project_repo=REPO, branch="main")


# -- what is accepted, and how it is normalised ---------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            base(workspaceTemplate={"metadata": {"labels": {"a": "1", "b": "2"}}}),
            {"labels": {"a": "1", "b": "2"}},
            id="template-labels-only",
        ),
        pytest.param(
            base(
                workspaceTemplate={
                    "metadata": {"annotations": {"x": "template"}},
                    "spec": {"podTemplate": {"metadata": {"annotations": {"x": "pod", "y": ""}}}},
                }
            ),
            {"annotations": {"x": "pod", "y": ""}},
            id="pod-annotations-win",
        ),
        pytest.param(
            ws(
                resources={"requests": {"cpu": "1", "memory": "1Gi"}},
                podTemplate={
                    "spec": {
                        "containers": [{"name": "pulumi", "resources": {"requests": {"cpu": "2"}}}]
                    }
                },
            ),
            {"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            id="container-resources-win-per-resource",
        ),
        pytest.param(
            ws(resources={"requests": {"cpu": 0.5, "nvidia.com/gpu": 1, "hugepages-2Mi": "1e3"}}),
            {"resources": {"requests": {"cpu": 0.5, "nvidia.com/gpu": 1, "hugepages-2Mi": "1e3"}}},
            id="quantities-kept-as-given",
        ),
        pytest.param(
            ws(resources={"requests": {}, "limits": None}), {}, id="empty-resources-unset"
        ),
        pytest.param(
            ws(
                env=[{"name": "A", "value": "1"}],
                podTemplate={
                    "spec": {
                        "containers": [{"name": "pulumi", "env": [{"name": "B", "value": "2"}]}]
                    }
                },
            ),
            {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            id="env-then-container-env",
        ),
        pytest.param(
            pod(tolerations=[{"key": "k", "operator": "Exists", "value": None}]),
            {"tolerations": [{"key": "k", "operator": "Exists"}]},
            id="toleration-nulls-dropped",
        ),
        pytest.param(pod(containers=[]), {}, id="no-container"),
        pytest.param(
            pod(
                initContainers=[
                    {
                        "name": "extra",
                        "image": "busybox",
                        "command": ["sh", "-c", "echo A=1 >> $PULUMI_ENV"],
                        "volumeMounts": [{"name": "share", "mountPath": "/share"}],
                        "env": [{"name": "B", "value": ""}],
                        "imagePullPolicy": None,
                    }
                ]
            ),
            {
                "initContainers": [
                    {
                        "name": "extra",
                        "image": "busybox",
                        "command": ["sh", "-c", "echo A=1 >> $PULUMI_ENV"],
                        "volumeMounts": [{"name": "share", "mountPath": "/share"}],
                        "env": [{"name": "B", "value": ""}],
                    }
                ]
            },
            id="pko-issue-937-init-container",
        ),
        pytest.param(
            pod(containers=[{"name": "pulumi"}]), {}, id="pulumi-container-without-settings"
        ),
    ],
)
def test_accepted(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    """Accepted forms parse into the overrides the runner applies, normalised."""
    assert overrides(spec) == expected
    assert overrides(freeze(spec)) == expected


@pytest.mark.parametrize(
    ("profile", "policy"),
    [("restricted", "Always"), ("baseline", "Never"), ("restricted", "IfNotPresent")],
)
def test_profiles_and_pull_policies(profile: str, policy: str) -> None:
    """The securityProfile and imagePullPolicy take PKO's values."""
    workspace = parse_spec(ws(securityProfile=profile, imagePullPolicy=policy), NS).workspace
    assert (workspace.security_profile, workspace.image_pull_policy) == (profile, policy)


# -- the Workspace value ------------------------------------------------------------------------


def test_overrides_returns_a_fresh_dict() -> None:
    """Changing what overrides() returned changes neither the Workspace nor the next result."""
    workspace = parse_spec(yaml.safe_load(PKO_V2), NS).workspace
    first = workspace.overrides()
    first["labels"]["team"] = "changed"
    first["env"].clear()
    first["injected"] = True
    assert workspace.overrides() == PKO_V2_OVERRIDES
    assert workspace.overrides() is not workspace.overrides()


def test_canonical_json_does_not_depend_on_key_order() -> None:
    """Equal overrides written in any key order make equal (and equally hashed) Workspaces."""
    raw = yaml.safe_load(PKO_V2)
    reordered = json.loads(json.dumps(raw), object_pairs_hook=lambda pairs: dict(reversed(pairs)))
    assert list(reordered) == list(reversed(raw))
    first = parse_spec(raw, NS).workspace
    second = parse_spec(reordered, NS).workspace
    assert first.pod_json == second.pod_json
    assert first == second
    assert hash(first) == hash(second)
    assert first.pod_json == json.dumps(PKO_V2_OVERRIDES, sort_keys=True, separators=(",", ":"))


def test_hand_built_workspace_is_canonical() -> None:
    """A Workspace built by hand re-encodes its pod_json canonically."""
    workspace = Workspace(pod_json='{ "b": 1, "a": {"d": [2, 1], "c": null} }')
    assert workspace.pod_json == '{"a":{"c":null,"d":[2,1]},"b":1}'
    assert workspace == Workspace(pod_json='{"a": {"d": [2, 1], "c": null}, "b": 1}')


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"security_profile": "privileged"}, id="profile"),
        pytest.param({"image_pull_policy": "Sometimes"}, id="pull-policy"),
        pytest.param({"image": ""}, id="empty-image"),
        pytest.param({"image": "a b"}, id="image-space"),
        pytest.param({"pod_json": "[]"}, id="pod-json-list"),
        pytest.param({"pod_json": "{"}, id="pod-json-broken"),
        pytest.param({"pod_json": '{"a": NaN}'}, id="pod-json-nan"),
    ],
)
def test_workspace_invariants(fields: dict[str, Any]) -> None:
    """A Workspace built by hand still holds valid enums, image and a JSON object."""
    with pytest.raises(ValueError):  # noqa: PT011 - each invariant has its own message
        Workspace(**fields)


def test_spec_with_workspace_is_frozen_and_hashable() -> None:
    """The Workspace is frozen and hashable, so the StackSpec holding it is too."""
    spec = parse_spec(yaml.safe_load(PKO_V2), NS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.workspace.image = "other"  # type: ignore[misc]
    assert hash(spec) == hash(parse_spec(yaml.safe_load(PKO_V2), NS))
    assert "pulumi/pulumi:3.150.0-nonroot" in repr(spec)


# -- refusals name the field and the fix ---------------------------------------------------

SECRET_ENV = {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}

INVALID = [
    # the template's shape
    pytest.param(base(workspaceTemplate="pod"), T, "must be an object", id="template-string"),
    pytest.param(
        base(workspaceTemplate={"kind": "Workspace"}),
        f"{T}.kind",
        "unknown field; remove it (supported: metadata, spec)",
        id="template-unknown",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"name": "x"}}),
        f"{T}.metadata.name",
        "supported: annotations, labels",
        id="metadata-name",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": "x"}), f"{T}.metadata", "must be an object", id="meta"
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"labels": ["a"]}}),
        f"{T}.metadata.labels",
        "must be an object",
        id="labels-list",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"labels": {"a": 1}}}),
        f"{T}.metadata.labels[a]",
        "must be a string",
        id="label-number",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"labels": {"a b": "1"}}}),
        f"{T}.metadata.labels[a b]",
        "not a Kubernetes key",
        id="label-key",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"labels": {"a": "x" * 64}}}),
        f"{T}.metadata.labels[a]",
        "not a label value",
        id="label-value-long",
    ),
    pytest.param(
        base(workspaceTemplate={"metadata": {"annotations": {"Bad_/x": "1"}}}),
        f"{T}.metadata.annotations[Bad_/x]",
        "not a Kubernetes key",
        id="annotation-prefix",
    ),
    pytest.param(
        base(workspaceTemplate={"spec": []}), S, "must be an object", id="template-spec-list"
    ),
    pytest.param(
        ws(git={"url": REPO}),
        f"{S}.git",
        "supported: env, envFrom, image, imagePullPolicy, podTemplate, resources, securityProfile",
        id="workspace-git",
    ),
    # image, pull policy, profile
    pytest.param(ws(image="a b"), f"{S}.image", "without whitespace", id="image-space"),
    pytest.param(ws(image=3), f"{S}.image", "must be a string", id="image-number"),
    pytest.param(
        ws(imagePullPolicy="always"),
        f"{S}.imagePullPolicy",
        "not one of: Always, IfNotPresent, Never",
        id="pull-policy",
    ),
    pytest.param(
        ws(securityProfile="privileged"),
        f"{S}.securityProfile",
        "not one of: restricted, baseline",
        id="profile-privileged",
    ),
    # resources
    pytest.param(ws(resources="1"), f"{S}.resources", "must be an object", id="resources-str"),
    pytest.param(
        ws(resources={"claims": []}),
        f"{S}.resources.claims",
        "supported: limits, requests",
        id="resources-claims",
    ),
    pytest.param(
        ws(resources={"requests": {"cpu": "lots"}}),
        f"{S}.resources.requests[cpu]",
        "not a quantity",
        id="quantity-word",
    ),
    pytest.param(
        ws(resources={"limits": {"cpu": -1}}),
        f"{S}.resources.limits[cpu]",
        "non-negative",
        id="quantity-negative",
    ),
    pytest.param(
        ws(resources={"limits": {"cpu": True}}),
        f"{S}.resources.limits[cpu]",
        "not a quantity",
        id="quantity-bool",
    ),
    pytest.param(
        ws(resources={"limits": {"cpu": float("inf")}}),
        f"{S}.resources.limits[cpu]",
        "not a quantity",
        id="quantity-infinite",
    ),
    pytest.param(
        ws(resources={"limits": {"c pu": "1"}}),
        f"{S}.resources.limits[c pu]",
        "not a Kubernetes key",
        id="resource-name",
    ),
    # env
    pytest.param(ws(env={"A": "1"}), f"{S}.env", "must be a list", id="env-object"),
    pytest.param(ws(env=["A=1"]), f"{S}.env[0]", "must be an object", id="env-string"),
    pytest.param(ws(env=[{"value": "1"}]), f"{S}.env[0].name", "is required", id="env-no-name"),
    pytest.param(
        ws(env=[{"name": "1A", "value": "1"}]),
        f"{S}.env[0].name",
        "not an environment variable name",
        id="env-leading-digit",
    ),
    pytest.param(
        ws(env=[{"name": "A-B", "value": "1"}]),
        f"{S}.env[0].name",
        "letters, digits and _",
        id="env-dash",
    ),
    pytest.param(
        ws(env=[{"name": "PSO_JOB", "value": "1"}]),
        f"{S}.env[0].name",
        "reserved for the runner",
        id="env-pso",
    ),
    pytest.param(
        ws(env=[{"name": "HOME", "value": "/root"}]),
        f"{S}.env[0].name",
        "reserved for the runner",
        id="env-home",
    ),
    pytest.param(
        ws(env=[{"name": "PULUMI_HOME", "value": "/p"}]),
        f"{S}.env[0].name",
        "reserved for the runner",
        id="env-pulumi-home",
    ),
    pytest.param(
        ws(env=[{"name": "TMPDIR", "value": "/var"}]),
        f"{S}.env[0].name",
        "reserved for the runner",
        id="env-tmpdir",
    ),
    pytest.param(
        ws(env=[{"name": "TOKEN", "value": "1"}]) | {"envRefs": {"TOKEN": literal("t")}},
        f"{S}.env[0].name",
        "set by spec.envRefs too",
        id="env-also-in-env-refs",
    ),
    pytest.param(
        ws(env=[{"name": "A"}]), f"{S}.env[0]", "set value (a string) or valueFrom", id="env-none"
    ),
    pytest.param(
        ws(env=[{**SECRET_ENV, "value": "1"}]),
        f"{S}.env[0].valueFrom",
        "exclusive",
        id="env-value-and-value-from",
    ),
    pytest.param(
        ws(env=[{"name": "A", "value": 1}]), f"{S}.env[0].value", "must be a string", id="env-int"
    ),
    pytest.param(
        ws(env=[{"name": "A", "value": "1", "type": "x"}]),
        f"{S}.env[0].type",
        "supported: name, value, valueFrom",
        id="env-unknown",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {}}]),
        f"{S}.env[0].valueFrom",
        "set exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef",
        id="value-from-empty",
    ),
    pytest.param(
        ws(
            env=[
                {
                    "name": "A",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "c", "key": "k"},
                    },
                }
            ]
        ),
        f"{S}.env[0].valueFrom.configMapKeyRef",
        "set exactly one of",
        id="value-from-two",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {"secretRef": {"name": "s"}}}]),
        f"{S}.env[0].valueFrom.secretRef",
        "supported: configMapKeyRef, fieldRef, resourceFieldRef, secretKeyRef",
        id="value-from-unknown",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "S", "key": "k"}}}]),
        f"{S}.env[0].valueFrom.secretKeyRef.name",
        "not a Secret name: use a DNS subdomain",
        id="secret-key-ref-name",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a/b"}}}]),
        f"{S}.env[0].valueFrom.configMapKeyRef.key",
        "not a ConfigMap key",
        id="config-map-key-ref-key",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
        f"{S}.env[0].valueFrom.secretKeyRef.key",
        "is required",
        id="secret-key-ref-no-key",
    ),
    pytest.param(
        ws(
            env=[
                {
                    "name": "A",
                    "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": 1}},
                }
            ]
        ),
        f"{S}.env[0].valueFrom.secretKeyRef.optional",
        "true or false",
        id="secret-key-ref-optional",
    ),
    pytest.param(
        ws(
            env=[
                {
                    "name": "A",
                    "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "namespace": "x"}},
                }
            ]
        ),
        f"{S}.env[0].valueFrom.secretKeyRef.namespace",
        "supported: key, name, optional",
        id="secret-key-ref-namespace",
    ),
    pytest.param(
        ws(env=[{"name": "A", "valueFrom": {"fieldRef": {}}}]),
        f"{S}.env[0].valueFrom.fieldRef.fieldPath",
        "is required",
        id="field-ref-empty",
    ),
    pytest.param(
        ws(
            env=[
                {
                    "name": "A",
                    "valueFrom": {"resourceFieldRef": {"resource": "cpu", "divisor": "x"}},
                }
            ]
        ),
        f"{S}.env[0].valueFrom.resourceFieldRef.divisor",
        "not a quantity",
        id="resource-field-ref-divisor",
    ),
    # envFrom
    pytest.param(
        ws(envFrom=[{"prefix": "A_"}]),
        f"{S}.envFrom[0]",
        "set exactly one of secretRef, configMapRef",
        id="env-from-no-source",
    ),
    pytest.param(
        ws(envFrom=[{"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}]),
        f"{S}.envFrom[0].configMapRef",
        "set exactly one of",
        id="env-from-two-sources",
    ),
    pytest.param(
        ws(envFrom=[{"secretRef": {"name": "-s"}}]),
        f"{S}.envFrom[0].secretRef.name",
        "not a Secret name",
        id="env-from-secret-name",
    ),
    pytest.param(
        ws(envFrom=[{"configMapRef": {"name": "c", "key": "k"}}]),
        f"{S}.envFrom[0].configMapRef.key",
        "supported: name, optional",
        id="env-from-key",
    ),
    pytest.param(
        ws(envFrom=[{"prefix": "PSO_", "secretRef": {"name": "s"}}]),
        f"{S}.envFrom[0].prefix",
        "reserved for the runner",
        id="env-from-pso-prefix",
    ),
    pytest.param(
        ws(envFrom=[{"prefix": "a-", "secretRef": {"name": "s"}}]),
        f"{S}.envFrom[0].prefix",
        "not an environment variable name",
        id="env-from-bad-prefix",
    ),
    # the pod template
    pytest.param(
        ws(podTemplate={"kind": "Pod"}),
        f"{S}.podTemplate.kind",
        "supported: metadata, spec",
        id="pod-template-unknown",
    ),
    pytest.param(
        ws(podTemplate={"metadata": {"labels": {"a": 1}}}),
        f"{S}.podTemplate.metadata.labels[a]",
        "must be a string",
        id="pod-label-number",
    ),
    pytest.param(ws(podTemplate={"spec": "x"}), P, "must be an object", id="pod-spec-string"),
    pytest.param(
        pod(hostNetwork=True),
        f"{P}.hostNetwork",
        "the runner owns the run pod's security",
        id="host-network",
    ),
    pytest.param(pod(hostPID=True), f"{P}.hostPID", "owns the run pod's security", id="host-pid"),
    pytest.param(
        pod(securityContext={"runAsUser": 0}),
        f"{P}.securityContext",
        "owns the run pod's security",
        id="pod-security-context",
    ),
    pytest.param(
        pod(initContainers=[{"name": "x", "image": "busybox", "securityContext": {}}]),
        f"{P}.initContainers[0].securityContext",
        "gives init containers the run container's security context",
        id="init-container-security",
    ),
    pytest.param(
        pod(initContainers=[{"name": "x"}]),
        f"{P}.initContainers[0].image",
        "required: the image the init container runs",
        id="init-container-image",
    ),
    pytest.param(
        pod(initContainers=[{"name": "checkout", "image": "busybox"}]),
        f"{P}.initContainers[0].name",
        "other than the runner's pulumi and checkout",
        id="init-container-runner-name",
    ),
    pytest.param(
        pod(initContainers=[{"name": "a", "image": "i"}, {"name": "a", "image": "i"}]),
        f"{P}.initContainers[1].name",
        "the name of another init container",
        id="init-container-twice",
    ),
    pytest.param(
        pod(initContainers=[{"name": "a", "image": "i", "restartPolicy": "Always"}]),
        f"{P}.initContainers[0].restartPolicy",
        "a run pod has no sidecars",
        id="init-container-sidecar",
    ),
    pytest.param(
        pod(initContainers=[{"name": "a", "image": "i", "ports": []}]),
        f"{P}.initContainers[0].ports",
        "unknown field; remove it (supported: args, command, env, envFrom, image,",
        id="init-container-unknown",
    ),
    pytest.param(
        pod(initContainers=[{"name": "a", "image": "i", "command": ["sh", 1]}]),
        f"{P}.initContainers[0].command[1]",
        "must be a string",
        id="init-container-command",
    ),
    pytest.param(
        pod(
            initContainers=[
                {"name": "a", "image": "i", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}
            ]
        ),
        f"{P}.initContainers[0].volumeMounts[0].name",
        "no volume 'x' in podTemplate.spec.volumes",
        id="init-container-unknown-volume",
    ),
    pytest.param(
        pod(serviceAccountName="admin"),
        f"{P}.serviceAccountName",
        f"set spec.serviceAccountName (or {S}.serviceAccountName)",
        id="pod-service-account",
    ),
    pytest.param(
        pod(serviceAccount="admin"),
        f"{P}.serviceAccount",
        f"set spec.serviceAccountName (or {S}.serviceAccountName)",
        id="pod-deprecated-service-account",
    ),
    pytest.param(
        pod(restartPolicy="Always"),
        f"{P}.restartPolicy",
        "unknown field; remove it (supported: affinity, containers, initContainers, nodeSelector,"
        " priorityClassName, tolerations, volumes)",
        id="pod-unknown",
    ),
    pytest.param(
        pod(nodeSelector={"pool": 1}), f"{P}.nodeSelector[pool]", "must be a string", id="node-sel"
    ),
    pytest.param(
        pod(tolerations={"key": "k"}), f"{P}.tolerations", "must be a list", id="tolerations-obj"
    ),
    pytest.param(
        pod(tolerations=[{"key": "k", "operator": "Exists", "seconds": 1}]),
        f"{P}.tolerations[0].seconds",
        "supported: effect, key, operator, tolerationSeconds, value",
        id="toleration-unknown",
    ),
    pytest.param(
        pod(tolerations=[{"operator": "In"}]),
        f"{P}.tolerations[0].operator",
        "not one of: Exists, Equal",
        id="toleration-operator",
    ),
    pytest.param(
        pod(tolerations=[{"effect": "Evict"}]),
        f"{P}.tolerations[0].effect",
        "not one of: NoSchedule, PreferNoSchedule, NoExecute",
        id="toleration-effect",
    ),
    pytest.param(
        pod(tolerations=[{"tolerationSeconds": "300"}]),
        f"{P}.tolerations[0].tolerationSeconds",
        "must be an integer",
        id="toleration-seconds",
    ),
    pytest.param(
        pod(affinity={"nodeSelector": {}}),
        f"{P}.affinity.nodeSelector",
        "supported: nodeAffinity, podAffinity, podAntiAffinity",
        id="affinity-unknown",
    ),
    pytest.param(
        pod(affinity={"podAffinity": []}),
        f"{P}.affinity.podAffinity",
        "must be an object",
        id="affinity-list",
    ),
    pytest.param(
        pod(priorityClassName="High"),
        f"{P}.priorityClassName",
        "not a PriorityClass name",
        id="priority-class",
    ),
    # containers
    pytest.param(
        pod(containers=[{"name": "sidecar"}]),
        f"{C}.name",
        "only the pulumi container can be set",
        id="container-other",
    ),
    pytest.param(
        pod(containers=[{"image": "x"}]),
        f"{C}.name",
        "name it pulumi",
        id="container-unnamed",
    ),
    pytest.param(
        pod(containers=[{"name": "pulumi"}, {"name": "sidecar"}]),
        f"{P}.containers[1].name",
        "only the pulumi container",
        id="container-second",
    ),
    pytest.param(
        pod(containers=[{"name": "pulumi"}, {"name": "pulumi"}]),
        f"{P}.containers[1].name",
        "listed twice",
        id="container-pulumi-twice",
    ),
    pytest.param(pod(containers=["pulumi"]), f"{C}", "must be an object", id="container-string"),
    pytest.param(
        container(image="evil"),
        f"{C}.image",
        "the runner owns the pulumi container's command, args, image and securityContext:"
        " set spec.workspaceTemplate.spec.image",
        id="container-image",
    ),
    pytest.param(
        container(command=["sh"]), f"{C}.command", "the runner owns", id="container-command"
    ),
    pytest.param(container(args=["up"]), f"{C}.args", "the runner owns", id="container-args"),
    pytest.param(
        container(securityContext={"privileged": True}),
        f"{C}.securityContext",
        "the runner owns",
        id="container-security-context",
    ),
    pytest.param(
        container(ports=[]),
        f"{C}.ports",
        "supported: env, envFrom, name, resources, volumeMounts",
        id="container-unknown",
    ),
    pytest.param(
        container(env=[{"name": "HOME", "value": "/"}]),
        f"{C}.env[0].name",
        "reserved for the runner",
        id="container-env-home",
    ),
    pytest.param(
        container(resources={"requests": {"cpu": "x"}}),
        f"{C}.resources.requests[cpu]",
        "not a quantity",
        id="container-resources",
    ),
    pytest.param(
        container(envFrom=[{}]), f"{C}.envFrom[0]", "set exactly one of", id="container-env-from"
    ),
    # non-JSON values passed through
    pytest.param(
        pod(affinity={"nodeAffinity": {"weight": float("nan")}}),
        f"{P}.affinity.nodeAffinity.weight",
        "finite number",
        id="pass-through-nan",
    ),
]


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_workspace_names_field_and_fix(spec: Any, path: str, fragment: str) -> None:
    """An invalid serviceAccountName or workspaceTemplate raises SpecError on its path."""
    assert_refused(spec, path, fragment)


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_cached_workspace_is_refused_the_same(spec: Any, path: str, fragment: str) -> None:
    """The read-only cached form of an invalid workspace is refused with the same path."""
    assert_refused(freeze(spec), path, fragment)
