"""charts/pulumi-stack-operator: lints, renders what manifests/ renders, and keeps its promises.

The default render is compared with ``kubectl kustomize manifests/default`` object for
object, after normalising only what Helm legitimately does differently (see ``normalise``
and ``KUSTOMIZE_ONLY``). Each value is rendered and checked for what values.yaml says it
does; the Deployment's flags and environment go through the operator's own parser. Bad
values fail on the schema. The rendered objects are dry-run against the real apiserver,
and the chart is installed on it and uninstalled with ``testbed.helm`` (no node runs there,
so nothing waits for the pods: that is the node tests' part).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pulumi_stack_operator.config import OperatorConfig, parse_config
from pulumi_stack_operator.telemetry import endpoint
from testbed.assets import AssetError, find_prometheus_operator_crds
from testbed.control_plane import ControlPlane, wait_established
from testbed.helm import Helm, HelmError
from tests.charts.conftest import (
    CHART,
    RELEASE,
    SYSTEM_NAMESPACE,
    Manifest,
    labelled_namespace,
    render_chart,
)
from tests.manifests.conftest import MANIFESTS, pick, render

REPO = CHART.parents[1]
# The CustomResourceDefinitions: every file of manifests/crd but its kustomization.
CRDS = sorted(
    path.name for path in (MANIFESTS / "crd").glob("*.yaml") if path.name != "kustomization.yaml"
)
# In manifests/default but not in the chart: Helm installs into the release namespace, which
# it creates itself (--create-namespace) or finds; a chart that templates its own release
# namespace cannot be installed with Helm's usual flags. README.md says to label it.
KUSTOMIZE_ONLY = frozenset({"Namespace"})
# Helm's standard labels, which kustomize has no equivalent of: dropped from every label map
# and selector before comparing. app.kubernetes.io/instance is in the chart's selectors
# too, so that two releases in one namespace never select each other's pods.
HELM_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
)
MANAGED_BY = "app.kubernetes.io/managed-by"

helm_test = pytest.mark.helm


def normalise(obj: Any) -> Any:
    """``obj`` with Helm's standard labels removed and managed-by Helm read as kustomize.

    Applied to every mapping at any depth: labels, selectors and pod template labels alike.
    That the selectors still select the pods is checked separately (``test_selectors...``).
    """
    if isinstance(obj, list):
        return [normalise(item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    out = {key: normalise(value) for key, value in obj.items() if key not in HELM_LABELS}
    if out.get(MANAGED_BY) == "Helm":
        out[MANAGED_BY] = "kustomize"
    return out


def by_identity(objects: list[Manifest]) -> dict[tuple[str, str, str], Manifest]:
    """``objects`` keyed by (kind, namespace, name)."""
    keyed = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
        for obj in objects
    }
    assert len(keyed) == len(objects), "duplicate objects"
    return keyed


def manager(objects: list[Manifest]) -> dict[str, Any]:
    """The operator's container in the Deployment among ``objects``."""
    [container] = pick(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def operator_config(objects: list[Manifest], pod_namespace: str) -> OperatorConfig:
    """The Deployment's args and env through the operator's own parser, as in the pod."""
    container = manager(objects)
    environ = {}
    for var in container.get("env", ()):
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        fields = {"metadata.namespace": pod_namespace, "metadata.name": f"{RELEASE}-0"}
        environ[var["name"]] = fields[field] if field else var["value"]
    parsed = parse_config(container["args"], environ)
    # Every start is its own instance (a random identity): not part of the configuration.
    manager_config = dataclasses.replace(parsed.manager, identity="")
    return dataclasses.replace(parsed, manager=manager_config)


def project_version() -> str:
    """pyproject.toml's version of the operator."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


# -- the chart's files (no helm needed) ---------------------------------------------------


def test_chart_metadata() -> None:
    """The chart is apiVersion v2; appVersion, the image's default tag, is the operator's."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "pulumi-stack-operator"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == project_version()


def test_crds_are_the_manifests_crds() -> None:
    """crds/ holds a byte-identical copy of each of manifests/crd's CRDs, their one source.

    To update: cp manifests/crd/*.pulumi.com.yaml charts/pulumi-stack-operator/crds/
    """
    assert {"stacks.pulumi.com.yaml", "programs.pulumi.com.yaml"} <= set(CRDS)
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == CRDS
    for name in CRDS:
        assert (CHART / "crds" / name).read_bytes() == (MANIFESTS / "crd" / name).read_bytes()
    kustomization = yaml.safe_load((MANIFESTS / "crd" / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == CRDS


def schema_leaves(schema: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Dotted value paths whose schema has no ``properties`` (``global`` left out)."""
    leaves: dict[str, dict[str, Any]] = {}
    for name, sub in schema["properties"].items():
        path = f"{prefix}{name}"
        if path == "global":
            continue
        if "properties" in sub:
            leaves |= schema_leaves(sub, f"{path}.")
        else:
            leaves[path] = sub
    return leaves


def value_at(values: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path``."""
    for part in path.split("."):
        values = values[part]
    return values


def key_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """Dotted key path → 0-based line of the key in the composed YAML ``node``."""
    found: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = f"{prefix}{key.value}"
            found[path] = key.start_mark.line
            found |= key_lines(value, f"{path}.")
    return found


SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()
DEFAULTS = yaml.safe_load(VALUES_TEXT)


def test_every_value_has_a_schema_and_a_comment() -> None:
    """values.yaml sets exactly the schema's values, each under a comment of its own."""
    leaves = schema_leaves(SCHEMA)
    lines = VALUES_TEXT.splitlines()
    root = yaml.compose(VALUES_TEXT)
    assert root is not None
    located = key_lines(root)
    for path in leaves:
        value_at(DEFAULTS, path)  # KeyError: a schema value without a default
        line = located[path]
        assert lines[line - 1].lstrip().startswith("#"), f"{path}: no comment above it"
    top_level = set(DEFAULTS) - {"global"}
    assert top_level == {path.split(".")[0] for path in leaves}


def readme_values() -> dict[str, Any]:
    """The chart README's values table: key → its documented default (JSON)."""
    text = (CHART / "README.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| `(.*?)` \|", text, flags=re.MULTILINE)
    return {key: json.loads(default) for key, default in rows}


def test_readme_documents_every_value_and_its_default() -> None:
    """The chart README lists exactly the schema's values, with values.yaml's defaults."""
    documented = readme_values()
    assert sorted(documented) == sorted(schema_leaves(SCHEMA))
    for path, default in documented.items():
        assert value_at(DEFAULTS, path) == default, path


# -- lint ---------------------------------------------------------------------------------


@helm_test
@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_lint(helm: Helm, *, strict: bool) -> None:
    """``helm lint`` (and ``--strict``, where warnings fail too) passes without findings."""
    report = helm.lint(CHART, strict=strict)
    assert "1 chart(s) linted, 0 chart(s) failed" in report
    assert "[WARNING]" not in report
    assert "[ERROR]" not in report


@helm_test
def test_lint_would_catch_a_bad_value(helm: Helm) -> None:
    """The lint above is not vacuous: a value the schema refuses fails it."""
    with pytest.raises(HelmError) as caught:
        helm.lint(CHART, {"replicas": "two"}, strict=True)
    assert "[ERROR]" in caught.value.stdout
    assert "'/replicas': got string, want integer" in caught.value.stdout


# -- the default render is manifests/default ---------------------------------------------


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_default_render_is_manifests_default(helm: Helm) -> None:
    """With default values the chart renders what kustomize renders, object for object.

    Normalised, and nothing else: Helm's labels (``normalise``), and the Namespace that
    only kustomize renders (``KUSTOMIZE_ONLY``). The CRDs are compared as files above.
    """
    chart = by_identity([normalise(obj) for obj in render_chart(helm)])
    kustomized = by_identity(
        [
            obj
            for obj in render("default")
            if obj["kind"] not in KUSTOMIZE_ONLY | {"CustomResourceDefinition"}
        ]
    )
    assert sorted(chart) == sorted(kustomized)
    for identity, obj in kustomized.items():
        assert chart[identity] == obj, identity


@helm_test
def test_include_crds_renders_the_crds_unchanged(helm: Helm) -> None:
    """``--include-crds`` (what ``helm install`` applies) adds exactly manifests/crd's CRDs."""
    objects = helm.template(RELEASE, CHART, SYSTEM_NAMESPACE, include_crds=True)
    crds = [obj for obj in objects if obj["kind"] == "CustomResourceDefinition"]
    expected = [yaml.safe_load((MANIFESTS / "crd" / name).read_text()) for name in CRDS]
    assert sorted(crds, key=crd_name) == sorted(expected, key=crd_name)
    assert len(objects) == len(render_chart(helm)) + len(CRDS)


def crd_name(crd: Manifest) -> str:
    """The CRD's name (plural.group)."""
    return str(crd["metadata"]["name"])


@helm_test
def test_selectors_select_this_releases_pods(helm: Helm) -> None:
    """The Deployment's and Service's selectors match the pods' labels, release included."""
    objects = render_chart(helm, {"podLabels": {"team": "platform"}})
    deployment = pick(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    service = pick(objects, "Service")["spec"]["selector"]
    for labels in (selector, service):
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels.items() <= pod_labels.items()
    assert "team" not in selector


@helm_test
def test_names_follow_the_release(helm: Helm) -> None:
    """Another release name prefixes every object, and bindings name its ServiceAccount."""
    objects = render_chart(helm, release="ops")
    names = {obj["metadata"]["name"] for obj in objects}
    assert all(name.startswith("ops-pulumi-stack-operator") for name in names), names
    for obj in objects:
        for subject in obj.get("subjects", ()):
            assert subject["name"] == pick(objects, "ServiceAccount")["metadata"]["name"]
    overridden = render_chart(helm, {"fullnameOverride": "pso"}, release="ops")
    assert pick(overridden, "Deployment")["metadata"]["name"] == "pso"


# -- values render what they promise -----------------------------------------------------


def rules_of(objects: list[Manifest], kind: str, name: str) -> list[dict[str, Any]]:
    """The rules of the Role or ClusterRole ``name``."""
    rules: list[dict[str, Any]] = pick(objects, kind, name)["rules"]
    return rules


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_watch_namespaces_grants_each_and_sets_the_flag(helm: Helm) -> None:
    """A list: a Role and RoleBinding in each namespace, no ClusterRole, --namespaces set."""
    objects = render_chart(helm, {"watchNamespaces": ["team-a", "team-b"]})
    cluster_rules = rules_of(render("default"), "ClusterRole", RELEASE)
    cluster_wide = {
        (obj["kind"], obj["metadata"]["name"])
        for obj in objects
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}
    }
    assert cluster_wide == {  # only the metrics reviews (cluster-scoped) and the reader role
        ("ClusterRole", f"{RELEASE}-metrics-auth"),
        ("ClusterRoleBinding", f"{RELEASE}-metrics-auth"),
        ("ClusterRole", f"{RELEASE}-metrics-reader"),
    }
    for namespace in ("team-a", "team-b"):
        role = by_identity(objects)[("Role", namespace, RELEASE)]
        assert role["rules"] == cluster_rules
        binding = by_identity(objects)[("RoleBinding", namespace, RELEASE)]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASE,
        }  # fmt: skip
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": RELEASE, "namespace": SYSTEM_NAMESPACE}
        ]
    # The Lease stays in the release namespace.
    assert ("Role", SYSTEM_NAMESPACE, f"{RELEASE}-leader-election") in by_identity(objects)
    cfg = operator_config(objects, SYSTEM_NAMESPACE)
    assert cfg.manager.namespaces == ("team-a", "team-b")
    assert cfg.manager.max_concurrent_reconciles_per_namespace == 1  # half of 2 workers


@helm_test
def test_stack_selector_shards_the_release(helm: Helm) -> None:
    """``stackSelector`` is ``--stack-selector``, read back by the operator's parser.

    Two releases with disjoint selectors: each its own Stacks and its own Lease (derived
    from the selector); the default sets no flag (every Stack, the usual Lease).
    """
    default = operator_config(render_chart(helm), SYSTEM_NAMESPACE).manager
    assert default.label_selector.empty
    assert default.leader_election_id == "pulumi-stack-operator"
    assert not [arg for arg in manager(render_chart(helm))["args"] if "selector" in arg]
    shards = {}
    for release, selector in (("shard-a", "shard=a"), ("rest", "shard notin (a), !legacy")):
        objects = render_chart(helm, {"stackSelector": selector}, release=release)
        shards[release] = operator_config(objects, SYSTEM_NAMESPACE).manager
    assert str(shards["shard-a"].label_selector) == "shard=a"
    assert str(shards["rest"].label_selector) == "!legacy,shard notin (a)"
    leases = {cfg.leader_election_id for cfg in shards.values()}
    assert len(leases) == 2
    assert "pulumi-stack-operator" not in leases


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_one_watched_namespace_is_the_single_namespace_overlay(helm: Helm) -> None:
    """One watched namespace, the release's, configures the operator as the overlay does.

    The overlay reads the namespace from WATCH_NAMESPACE (downward API), the chart passes it
    as a flag: compared through the operator's parser. The RBAC is the overlay's, normalised.
    """
    objects = render_chart(helm, {"watchNamespaces": [SYSTEM_NAMESPACE]})
    overlay = render("overlays/single-namespace")
    assert operator_config(objects, SYSTEM_NAMESPACE) == operator_config(overlay, SYSTEM_NAMESPACE)
    rbac_kinds = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    chart_rbac = by_identity([normalise(o) for o in objects if o["kind"] in rbac_kinds])
    # The overlay names its one cluster-scoped binding after its namespace (copies in several
    # namespaces); a release's name already tells releases apart.
    for obj in overlay:
        if obj["kind"] == "ClusterRoleBinding":
            obj["metadata"]["name"] = obj["metadata"]["name"].removesuffix(f".{SYSTEM_NAMESPACE}")
    overlay_rbac = by_identity([o for o in overlay if o["kind"] in rbac_kinds])
    assert sorted(chart_rbac) == sorted(overlay_rbac)
    for identity, obj in overlay_rbac.items():
        # The overlay's own Role and RoleBinding carry only the name label (its
        # kustomization adds no labels); the chart's carry all of manifests/default's.
        ours = copy.deepcopy(chart_rbac[identity])
        assert obj["metadata"].pop("labels").items() <= ours["metadata"].pop("labels").items()
        assert ours == obj, identity


@helm_test
def test_leader_election_off(helm: Helm) -> None:
    """Off: no --leader-elect and no leader-election Role or RoleBinding."""
    objects = render_chart(helm, {"leaderElection": {"enabled": False}})
    assert not operator_config(objects, SYSTEM_NAMESPACE).manager.leader_elect
    assert "--leader-elect" not in manager(objects)["args"]
    assert not [obj for obj in objects if "leader-election" in obj["metadata"]["name"]]
    assert operator_config(render_chart(helm), SYSTEM_NAMESPACE).manager.leader_elect


@helm_test
def test_replicas(helm: Helm) -> None:
    """The Deployment has ``replicas``; more than one without leader election is refused."""
    assert pick(render_chart(helm, {"replicas": 2}), "Deployment")["spec"]["replicas"] == 2
    with pytest.raises(HelmError) as caught:
        render_chart(helm, {"replicas": 2, "leaderElection": {"enabled": False}})
    assert "replicas > 1 needs leaderElection.enabled" in caught.value.stderr


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_service_monitor_is_manifests_prometheus_one(helm: Helm) -> None:
    """On: the ServiceMonitor is manifests/prometheus's (plus Helm's labels, extra labels).

    Its spec equals the kustomize one but for the selector's instance label, and it selects
    the chart's metrics Service. Off by default.
    """
    assert "ServiceMonitor" not in {obj["kind"] for obj in render_chart(helm)}
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}}
    objects = render_chart(helm, values)
    monitor = pick(objects, "ServiceMonitor")
    expected = pick(render("prometheus"), "ServiceMonitor")
    assert monitor["apiVersion"] == expected["apiVersion"] == "monitoring.coreos.com/v1"
    assert normalise(monitor["spec"]) == expected["spec"]
    assert monitor["metadata"]["namespace"] == expected["metadata"]["namespace"]
    assert expected["metadata"]["labels"].items() <= monitor["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kps"
    service = pick(objects, "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )


@helm_test
def test_metrics_service_off(helm: Helm) -> None:
    """No Service when off; a ServiceMonitor without it is refused."""
    off = {"metrics": {"service": {"enabled": False}}}
    assert "Service" not in {obj["kind"] for obj in render_chart(helm, off)}
    with pytest.raises(HelmError) as caught:
        render_chart(helm, {"metrics": {**off["metrics"], "serviceMonitor": {"enabled": True}}})
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in caught.value.stderr


@helm_test
def test_the_operator_has_its_own_priority_class(helm: Helm) -> None:
    """Created by default and named by the pods; an existing one by name; or none."""
    objects = render_chart(helm)
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == pick(objects, "PriorityClass")["metadata"]["name"]
    existing = render_chart(helm, {"priorityClass": {"create": False, "name": "critical-ops"}})
    assert "PriorityClass" not in {obj["kind"] for obj in existing}
    assert pick(existing, "Deployment")["spec"]["template"]["spec"]["priorityClassName"] == (
        "critical-ops"
    )
    none = render_chart(helm, {"priorityClass": {"create": False}})
    assert "priorityClassName" not in pick(none, "Deployment")["spec"]["template"]["spec"]
    valued = render_chart(helm, {"priorityClass": {"value": 5000}})
    assert pick(valued, "PriorityClass")["value"] == 5000


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_tenancy_values_reach_the_operator(helm: Helm) -> None:
    """Each tenancy value is its flag, read back through the operator's parser."""
    values = {
        "tenancy": {
            "allowedPriorityClasses": ["batch", "low"],
            "allowAnyToleration": True,
            "allowedServiceAccounts": ["default", "deployer"],
            "maxRunTimeoutSeconds": 3600,
        }
    }
    cfg = operator_config(render_chart(helm, values), SYSTEM_NAMESPACE)
    assert cfg.tenancy.allowed_priority_classes == frozenset({"batch", "low"})
    assert cfg.tenancy.allow_any_toleration is True
    assert cfg.tenancy.allowed_service_accounts == frozenset({"default", "deployer"})
    assert cfg.max_run_timeout == 3600
    anyone = {"tenancy": {"allowedServiceAccounts": ["*"]}}
    cfg = operator_config(render_chart(helm, anyone), SYSTEM_NAMESPACE)
    assert cfg.tenancy.allowed_service_accounts == frozenset({"*"})
    defaults = operator_config(render_chart(helm), SYSTEM_NAMESPACE)
    assert defaults.tenancy == operator_config(render("default"), SYSTEM_NAMESPACE).tenancy


@helm_test
def test_a_warm_window_reaches_the_operator_with_the_exec_it_needs(helm: Helm) -> None:
    """``runPodKeepWarm``: the flag and ``pods/exec``; unset or zero, neither."""
    for given, seconds in [("60s", 60.0), ("2m", 120.0), (45, 45.0)]:
        objects = render_chart(helm, {"runPodKeepWarm": given})
        assert operator_config(objects, SYSTEM_NAMESPACE).run_pod_keep_warm == seconds
        assert {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]} in (
            rules_of(objects, "ClusterRole", RELEASE)
        )
    for off in ("0", "0s"):
        objects = render_chart(helm, {"runPodKeepWarm": off})
        assert "--run-pod-keep-warm" not in json.dumps(objects)
        assert "pods/exec" not in json.dumps(objects)
    namespaced = render_chart(helm, {"runPodKeepWarm": "30s", "watchNamespaces": ["team-a"]})
    role = by_identity(namespaced)[("Role", "team-a", RELEASE)]
    assert any("pods/exec" in rule["resources"] for rule in role["rules"])


@helm_test
def test_run_pod_requests_reach_the_operator(helm: Helm) -> None:
    """``runPodRequests`` is the flag, passed only when it is not the operator's default."""
    for given, requests in [
        ("cpu=1,ephemeral-storage=2Gi", {"cpu": "1", "ephemeral-storage": "2Gi"}),
        ("", {}),
    ]:
        cfg = operator_config(render_chart(helm, {"runPodRequests": given}), SYSTEM_NAMESPACE)
        assert cfg.run_pod_requests == requests
    # The default passes no flag: the operator's own default applies.
    assert "--run-pod-requests" not in json.dumps(render_chart(helm))
    default = operator_config(render_chart(helm), SYSTEM_NAMESPACE)
    assert default.run_pod_requests == {"cpu": "100m", "memory": "256Mi"}


@helm_test
def test_metrics_are_secure_unless_switched_off(helm: Helm) -> None:
    """Secure by default (port 8443, reviews' RBAC); off: plain HTTP on 8080, no reviews."""
    secure = render_chart(helm)
    assert operator_config(secure, SYSTEM_NAMESPACE).manager.metrics_secure
    assert pick(secure, "Service")["spec"]["ports"][0]["port"] == 8443
    plain = render_chart(helm, {"metrics": {"secure": False}})
    cfg = operator_config(plain, SYSTEM_NAMESPACE)
    assert not cfg.manager.metrics_secure
    assert cfg.manager.metrics_bind_address == "0.0.0.0:8080"
    assert pick(plain, "Service")["spec"]["ports"][0]["port"] == 8080
    assert not [obj for obj in plain if "metrics-auth" in obj["metadata"]["name"]]
    with pytest.raises(HelmError) as caught:
        render_chart(helm, {"metrics": {"secure": False}, "networkPolicy": {"enabled": True}})
    assert "networkPolicy.enabled needs metrics.secure" in caught.value.stderr


@helm_test
def test_a_certificate_secret_is_mounted_and_named(helm: Helm) -> None:
    """``metrics.certSecret``: mounted read-only, ``--metrics-cert-dir`` names the mount."""
    objects = render_chart(helm, {"metrics": {"certSecret": "metrics-tls"}})
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "metrics-certs"]
    assert volume["secret"] == {"secretName": "metrics-tls"}
    [mount] = [m for m in manager(objects)["volumeMounts"] if m["name"] == "metrics-certs"]
    cfg = operator_config(objects, SYSTEM_NAMESPACE)
    assert cfg.manager.metrics_cert_dir == mount["mountPath"]
    assert mount["readOnly"] is True


@helm_test
def test_readers_are_bound_to_the_reader_role(helm: Helm) -> None:
    """Each ``metrics.readers`` account gets a binding to ``<fullname>-metrics-reader``."""
    reader = {"namespace": "monitoring", "name": "prometheus-k8s"}
    objects = render_chart(helm, {"metrics": {"readers": [reader]}})
    role = pick(objects, "ClusterRole", f"{RELEASE}-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    [binding] = [
        obj
        for obj in objects
        if obj["kind"] == "ClusterRoleBinding"
        and obj["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["subjects"] == [{"kind": "ServiceAccount", **reader}]


@helm_test
@pytest.mark.integration  # kubectl kustomize renders the manifests
def test_network_policy_is_manifests_network_policy(helm: Helm) -> None:
    """Off by default; on, it is manifests/network-policy's (but for Helm's labels)."""
    assert "NetworkPolicy" not in {obj["kind"] for obj in render_chart(helm)}
    policy = pick(render_chart(helm, {"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert normalise(policy["spec"]) == pick(render("network-policy"), "NetworkPolicy")["spec"]


DOWNWARD_ENV = [
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
]
"""The pod's own name and namespace: ``--runner=pod`` finds its image through them."""


@helm_test
def test_tracing_values_become_the_sdks_variables(helm: Helm) -> None:
    """``tracing`` sets OTEL_* variables the operator's tracing reads; off, none."""
    values = {
        "tracing": {
            "endpoint": "http://otel-collector.observability:4317",
            "serviceName": "stacks-eu",
            "sampler": "parentbased_traceidratio",
            "samplerArg": "0.1",
        }
    }
    env = {e["name"]: e.get("value") for e in manager(render_chart(helm, values))["env"]}
    assert endpoint(env) == "http://otel-collector.observability:4317"
    assert (env["OTEL_SERVICE_NAME"], env["OTEL_TRACES_SAMPLER"]) == (
        "stacks-eu",
        "parentbased_traceidratio",
    )
    assert env["OTEL_TRACES_SAMPLER_ARG"] == "0.1"
    default = {e["name"] for e in manager(render_chart(helm))["env"]}
    assert not any(name.startswith("OTEL_") for name in default)


@helm_test
def test_extra_env_and_args_reach_the_operator(helm: Helm) -> None:
    """The container's env is the pod's own identity then extraEnv; extraArgs follow."""
    values = {
        "extraEnv": [
            {"name": "PSO_WORKERS", "value": "4"},
            {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"},
        ],
        "extraArgs": ["--log-level=debug", "--shutdown-timeout=30"],
    }
    objects = render_chart(helm, values)
    container = manager(objects)
    assert container["env"] == [*DOWNWARD_ENV, *values["extraEnv"]]  # type: ignore[misc]
    assert container["args"][-2:] == values["extraArgs"]
    cfg = operator_config(objects, SYSTEM_NAMESPACE)
    assert cfg.manager.workers == 4
    assert cfg.manager.shutdown_timeout == 30  # the last occurrence wins
    assert manager(render_chart(helm))["env"] == DOWNWARD_ENV


@helm_test
def test_shutdown_timeout_sets_the_grace_period(helm: Helm) -> None:
    """The pod's grace period is the shutdown timeout plus the default's 120 s."""
    objects = render_chart(helm, {"shutdownTimeoutSeconds": 100})
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    assert operator_config(objects, SYSTEM_NAMESPACE).manager.shutdown_timeout == 100
    assert pod["terminationGracePeriodSeconds"] == 220


@helm_test
def test_image_values(helm: Helm) -> None:
    """repository, tag and pullPolicy make the image; the tag defaults to appVersion."""
    default = manager(render_chart(helm))
    assert default["image"].endswith(f":{project_version()}")
    assert "imagePullPolicy" not in default
    values = {
        "image": {"repository": "localhost/pso", "tag": "dev", "pullPolicy": "Never"},
        "imagePullSecrets": ["regcred"],
    }
    objects = render_chart(helm, values)
    assert manager(objects)["image"] == "localhost/pso:dev"
    assert manager(objects)["imagePullPolicy"] == "Never"
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


@helm_test
def test_pod_placement_and_metadata(helm: Helm) -> None:
    """nodeSelector, tolerations, affinity, podAnnotations, podLabels land on the pod."""
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}
                ]
            }
        }
    }
    values = {
        "nodeSelector": {"pool": "ops"},
        "tolerations": [toleration],
        "affinity": affinity,
        "podAnnotations": {"example.com/a": "1"},
        # A selector label cannot be replaced: the pods would leave their Deployment.
        "podLabels": {"team": "platform", "app.kubernetes.io/component": "other"},
    }
    template = pick(render_chart(helm, values), "Deployment")["spec"]["template"]
    # Helm merges maps with the defaults: the default's OS key stays unless set to null.
    assert template["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "ops"}
    assert template["spec"]["tolerations"] == [toleration]
    assert template["spec"]["affinity"] == affinity
    assert template["metadata"]["annotations"] == {"example.com/a": "1"}
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"
    no_os = render_chart(helm, {"nodeSelector": {"kubernetes.io/os": None}})
    assert "nodeSelector" not in pick(no_os, "Deployment")["spec"]["template"]["spec"]


@helm_test
def test_existing_service_account(helm: Helm) -> None:
    """Without create, no ServiceAccount: the pod and every binding use the named one."""
    values = {"serviceAccount": {"create": False, "name": "existing"}}
    objects = render_chart(helm, values)
    assert "ServiceAccount" not in {obj["kind"] for obj in objects}
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"
    subjects = [s for obj in objects for s in obj.get("subjects", ())]
    assert len(subjects) == 3  # stacks, leader election, metrics reviews
    assert {s["name"] for s in subjects} == {"existing"}
    annotated = render_chart(helm, {"serviceAccount": {"annotations": {"a.example/role": "r"}}})
    assert pick(annotated, "ServiceAccount")["metadata"]["annotations"] == {"a.example/role": "r"}


@helm_test
def test_resources(helm: Helm) -> None:
    """The ``resources`` value replaces the container's requests and limits."""
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    assert manager(render_chart(helm, {"resources": resources}))["resources"] == resources


@helm_test
@pytest.mark.parametrize(
    ("values", "path"),
    [
        pytest.param({"replicas": -1}, "replicas", id="negative-replicas"),
        pytest.param({"watchNamespaces": "team-a"}, "watchNamespaces", id="namespaces-not-a-list"),
        pytest.param({"watchNamespaces": ["Team_A"]}, "watchNamespaces", id="bad-namespace"),
        pytest.param({"replica": 2}, "replica", id="unknown-key"),
        pytest.param({"runPodRequests": "gpu=1"}, "runPodRequests", id="bad-requests"),
        pytest.param({"runPodKeepWarm": "soon"}, "runPodKeepWarm", id="bad-window"),
        pytest.param({"runPodKeepWarm": -5}, "runPodKeepWarm", id="negative-window"),
        pytest.param({"extraEnv": [{"value": "x"}]}, "extraEnv", id="env-without-name"),
        pytest.param({"extraArgs": ["workers=4"]}, "extraArgs", id="arg-not-a-flag"),
        pytest.param({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy", id="pull-policy"),
        pytest.param({"leaderElection": {"enabled": "yes"}}, "enabled", id="not-a-boolean"),
        pytest.param({"stackSelector": ["shard=a"]}, "stackSelector", id="selector-not-a-string"),
        pytest.param(
            {"tenancy": {"allowedPriorityClasses": ["*"]}}, "allowedPriorityClasses", id="class-any"
        ),
        pytest.param(
            {"tenancy": {"maxRunTimeoutSeconds": 0}}, "maxRunTimeoutSeconds", id="no-ceiling"
        ),
        pytest.param({"metrics": {"readers": [{"name": "p"}]}}, "readers", id="reader-no-ns"),
        pytest.param({"priorityClass": {"value": 2000000000}}, "value", id="system-priority"),
    ],
)
def test_bad_values_fail_on_the_schema(helm: Helm, values: dict[str, Any], path: str) -> None:
    """A value of the wrong type or shape fails ``helm template`` with a schema error."""
    with pytest.raises(HelmError) as caught:
        render_chart(helm, values)
    message = caught.value.stderr
    assert "values don't meet the specifications of the schema" in message, message
    assert path in message, message


# -- the objects are valid for the real apiserver -----------------------------------------


@pytest.fixture(scope="module")
def service_monitors(control_plane: ControlPlane) -> bool:
    """The ServiceMonitor CRD, applied; False if it cannot be had (no Go module proxy)."""
    try:
        directory = find_prometheus_operator_crds()
    except AssetError:
        return False
    path = directory / "monitoring.coreos.com_servicemonitors.yaml"
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    wait_established(control_plane.kubectl, "servicemonitors.monitoring.coreos.com")
    control_plane.kubectl("api-resources", "--api-group=monitoring.coreos.com")
    return True


@pytest.fixture
def namespaces(control_plane: ControlPlane) -> Iterator[list[str]]:
    """Three fresh namespaces warning on the restricted Pod Security Standard."""
    api = control_plane.api_client()
    try:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(labelled_namespace(api)) for _ in range(3)]
    finally:
        api.close()


def dry_run(control_plane: ControlPlane, objects: list[Manifest], path: Path) -> str:
    """``kubectl apply --server-side --dry-run=server --validate=strict``; kubectl's stderr.

    Fails the test if the apiserver refuses an object or does not report each one applied.
    """
    path.write_text(yaml.safe_dump_all(objects))
    proc = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(path),
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    applied = [line for line in proc.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(objects), proc.stdout
    return proc.stderr


VARIANTS = {
    "defaults": {},
    "watch-two-namespaces": {"watchNamespaces": ["{1}", "{2}"], "replicas": 2},
    "no-leader-election": {"leaderElection": {"enabled": False}},
    "everything-set": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}},
        "extraEnv": [{"name": "PSO_WORKERS", "value": "4"}],
        "extraArgs": ["--log-level=debug"],
        "stackSelector": "shard in (a,b),!legacy",
        "podAnnotations": {"example.com/a": "1"},
        "podLabels": {"team": "platform"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "serviceAccount": {"annotations": {"example.com/role": "r"}},
        "imagePullSecrets": ["regcred"],
        "image": {"pullPolicy": "IfNotPresent"},
        "tenancy": {
            "allowedPriorityClasses": ["batch"],
            "allowAnyToleration": True,
            "allowedServiceAccounts": ["*"],
            "maxRunTimeoutSeconds": 600,
        },
        "priorityClass": {"value": 2000},
        "networkPolicy": {"enabled": True},
    },
    "plain-metrics-existing-class": {
        "metrics": {"secure": False, "certSecret": "unused"},
        "priorityClass": {"create": False, "name": "system-cluster-critical"},
    },
    "certificate-and-readers": {
        "metrics": {
            "certSecret": "metrics-tls",
            "readers": [{"namespace": "monitoring", "name": "prometheus-k8s"}],
        },
    },
}


@pytest.mark.integration
@helm_test
@pytest.mark.usefixtures("stack_crd")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_dry_run_on_a_real_apiserver(
    variant: str,
    helm: Helm,
    control_plane: ControlPlane,
    namespaces: list[str],
    service_monitors: bool,  # noqa: FBT001 - a fixture
    tmp_path: Path,
) -> None:
    """The apiserver accepts every rendered object (strict fields), without a warning.

    Each variant installs into a fresh namespace (and watches other fresh ones); the
    namespaces warn on the restricted Pod Security Standard, so a pod that breaks it
    would show a warning. Cluster-scoped names carry the namespace (``fullnameOverride``)
    so the variants never meet. Without the ServiceMonitor CRD (no Go module proxy) the
    ServiceMonitor is left out of the dry run and checked structurally above only.
    """
    text = json.dumps(VARIANTS[variant]).replace("{1}", namespaces[1]).replace("{2}", namespaces[2])
    values = {**json.loads(text), "fullnameOverride": f"pso-{namespaces[0]}"}
    objects = [
        obj
        for obj in render_chart(helm, values, namespace=namespaces[0])
        if obj["kind"] != "ServiceMonitor" or service_monitors
    ]
    stderr = dry_run(control_plane, objects, tmp_path / "objects.yaml")
    assert "Warning" not in stderr, stderr


@pytest.mark.integration
@helm_test
@pytest.mark.usefixtures("stack_crd")
def test_dry_run_would_catch_a_bad_object(
    helm: Helm, control_plane: ControlPlane, namespaces: list[str], tmp_path: Path
) -> None:
    """The dry run is not vacuous: a misspelt container field is refused by the apiserver."""
    objects = render_chart(helm, {"fullnameOverride": "pso-broken"}, namespace=namespaces[0])
    broken = copy.deepcopy(objects)
    [container] = pick(broken, "Deployment")["spec"]["template"]["spec"]["containers"]
    container["imagePullPolcy"] = "Always"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump_all(broken))
    proc = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(path),
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "imagePullPolcy" in proc.stderr


@pytest.mark.integration
@helm_test
@pytest.mark.usefixtures("stack_crd")
def test_install_and_uninstall_on_the_control_plane(
    helm_binary: Path, control_plane: ControlPlane, namespaces: list[str], tmp_path: Path
) -> None:
    """``helm install`` creates every object and prints the notes; uninstall removes them.

    No node runs here, so no ``--wait`` (the pods stay Pending): the on-node test waits.
    The Stack CRD is already there (``stack_crd``): Helm leaves an existing CRD alone and
    creates the others (never deleting them).
    """
    helm = Helm(helm_binary, control_plane.kubeconfig, tmp_path / "helm")
    release, namespace = "pso", namespaces[0]
    values = {"fullnameOverride": f"pso-{namespace}", "watchNamespaces": [namespaces[1]]}
    expected = {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        for obj in render_chart(helm, values, namespace=namespace, release=release)
    }
    try:
        notes = helm.install(release, CHART, namespace, values, wait=False, timeout=60)
        assert "STATUS: deployed" in notes
        assert f"the namespaces {namespaces[1]}" in notes
        assert installed(control_plane, release, namespace) == expected
    finally:
        helm.uninstall(release, namespace, timeout=60)
    assert installed(control_plane, release, namespace) == set()
    assert "pso" not in helm.run("list", "--namespace", namespace, "--short")


def installed(control_plane: ControlPlane, release: str, namespace: str) -> set[tuple[str, ...]]:
    """(kind, namespace, name) of every object Helm's ownership annotations give ``release``."""
    kinds = (
        "serviceaccounts,deployments,services,roles,rolebindings,clusterroles,"
        "clusterrolebindings,priorityclasses,networkpolicies,secrets"
    )
    listed = json.loads(control_plane.kubectl("get", kinds, "-A", "-o", "json").stdout)
    return {
        (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        for obj in listed["items"]
        if obj["metadata"].get("annotations", {}).get("meta.helm.sh/release-name") == release
        and obj["metadata"]["annotations"].get("meta.helm.sh/release-namespace") == namespace
    }
