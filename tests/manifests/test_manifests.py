"""manifests/ builds, applies to a real apiserver, and agrees with the operator's code.

Every kustomization is built with kubectl's kustomize; every installable one is applied
server-side as a dry run (``--validate=strict``: an unknown field fails) to the test
control plane, with the Stack CRD and the Prometheus Operator's CRDs installed, so the
apiserver itself validates the Deployment, RBAC, samples (against the Stack CRD's schema
and CEL rules) and monitoring objects. The Deployment's flags go through the operator's
own parser; the alerts and the dashboard's queries through promtool and the operator's
metric registry.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.metrics import MetricWrapperBase
from pulumi import automation as auto

from controller.manager import Manager, ManagerContext
from controller.workers import INTERRUPT_TIMEOUT
from pulumi_stack_operator import wiring
from pulumi_stack_operator.config import OperatorConfig, parse_config
from reconcile.spec import parse_spec
from reconcile.stack import StackReconciler
from testbed.assets import AssetError, find_prometheus_operator_crds
from testbed.control_plane import ControlPlane
from testbed.controller_manager import ControllerManager
from testbed.prometheus import INSTALL_HINT, find_binary
from testbed.pulumi_env import PulumiEnv
from testbed.waits import wait_for
from tests.conftest import controller_manager_binary_or_skip
from tests.manifests.conftest import KUSTOMIZATIONS, MANIFESTS, Manifest, pick, render
from tests.manifests.promql import Selector, selectors, substitute
from workspace.runner import DEFAULT_INTERRUPT_GRACE

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]  # kubectl kustomize, promtool

REPO = MANIFESTS.parent
SYSTEM_NAMESPACE = "pulumi-stack-operator-system"
INSTALLS = ("default", "overlays/single-namespace", "overlays/namespaces")
SERVED = ("team-a", "team-b")  # the namespaces overlays/namespaces serves
# What a user applies; the rest are bases that these include.
APPLIED = (
    *INSTALLS,
    "samples",
    "samples/program-object",
    "samples/flux",
    "prometheus",
    "prometheus/pod-monitor",
    "grafana",
    "kube-state-metrics",
    "network-policy",
)
BASES = ("crd", "rbac", "manager", "prometheus/rules", "prometheus/reader")
MONITORING_CRDS = {
    "servicemonitors": "ServiceMonitor",
    "podmonitors": "PodMonitor",
    "prometheusrules": "PrometheusRule",
}
RULE = ("prometheus/rules", "PrometheusRule")
DASHBOARD = MANIFESTS / "grafana" / "pulumi-stack-operator.json"
KSM_CONFIG = MANIFESTS / "kube-state-metrics" / "stacks.yaml"
# Labels a scrape adds (target labels of a ServiceMonitor/PodMonitor), and Prometheus' own.
SCRAPE_LABELS = frozenset(
    {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}
)
PROMETHEUS_SERIES: dict[str, frozenset[str]] = {"up": frozenset()}
CLUSTER_SCOPED = frozenset(
    {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
)


def project() -> dict[str, Any]:
    """``pyproject.toml``'s ``[project]`` table."""
    with (REPO / "pyproject.toml").open("rb") as handle:
        table: dict[str, Any] = tomllib.load(handle)["project"]
    return table


# -- building --------------------------------------------------------------------------


def test_every_kustomization_is_applied_or_a_base() -> None:
    """A new kustomization directory is either dry-run below or a base of one that is."""
    assert sorted((*APPLIED, *BASES)) == KUSTOMIZATIONS


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_kustomization_builds(directory: str) -> None:
    """The kustomize built into kubectl builds the directory into named, typed objects."""
    objects = render(directory)
    assert objects
    for obj in objects:
        assert obj["apiVersion"]
        assert obj["kind"]
        assert obj["metadata"]["name"]


@pytest.mark.parametrize("directory", INSTALLS)
def test_install_has_every_part(directory: str) -> None:
    """An install renders the CRD, identity, Deployment and Service, all in its namespace."""
    objects = render(directory)
    kinds = {obj["kind"] for obj in objects}
    assert {"CustomResourceDefinition", "Namespace", "ServiceAccount"} <= kinds
    assert {"Role", "RoleBinding", "Deployment", "Service"} <= kinds
    for obj in objects:
        if obj["kind"] in CLUSTER_SCOPED:
            continue
        served = obj["kind"] == "RoleBinding" and obj["roleRef"]["kind"] == "ClusterRole"
        expected = SERVED if served else (SYSTEM_NAMESPACE,)
        assert obj["metadata"]["namespace"] in expected, obj["metadata"]


def test_single_namespace_overlay_moves_with_its_namespace(tmp_path: Path) -> None:
    """Changing the overlay's ``namespace:`` moves every object and binding subject.

    Its one cluster-scoped binding is named after the namespace, so copies never collide.
    """
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    overlay = tmp_path / "manifests" / "overlays" / "single-namespace"
    text = (overlay / "kustomization.yaml").read_text()
    (overlay / "kustomization.yaml").write_text(
        text.replace(f"namespace: {SYSTEM_NAMESPACE}", "namespace: team-a")
    )
    objects = [obj for obj in render(overlay) if obj["kind"] not in SHARED]
    assert pick(objects, "Namespace")["metadata"]["name"] == "team-a"
    for obj in objects:
        if obj["kind"] == "ClusterRoleBinding":  # the metrics reviews', named per install
            assert obj["metadata"]["name"] == "pulumi-stack-operator-metrics-auth.team-a"
        elif obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "team-a"
        for subject in obj.get("subjects", ()):
            assert subject["namespace"] == "team-a"


# Cluster-scoped objects that every install renders alike, and so shares.
SHARED = frozenset({"CustomResourceDefinition", "ClusterRole", "PriorityClass"})


# -- the Deployment ----------------------------------------------------------------------


def container(directory: str) -> dict[str, Any]:
    """The operator's container in ``directory``'s Deployment."""
    deployment = pick(render(directory), "Deployment")
    [manager] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(manager)


def deployed_config(directory: str, pod_namespace: str = "ns-of-the-pod") -> OperatorConfig:
    """The Deployment's args and env through the operator's parser, as the pod would."""
    manager = container(directory)
    downward = {"metadata.namespace": pod_namespace, "metadata.name": "pulumi-stack-operator-0"}
    environ = {}
    for var in manager.get("env", ()):
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        environ[var["name"]] = downward[field] if field else var["value"]
    return parse_config(manager["args"], environ)


@pytest.mark.parametrize(
    ("directory", "watched"),
    [(INSTALLS[0], ()), (INSTALLS[1], ("ns-of-the-pod",)), (INSTALLS[2], SERVED)],
)
def test_deployment_flags_parse(directory: str, watched: tuple[str, ...]) -> None:
    """The args parse; the overlays watch their namespaces, the default install all."""
    cfg = deployed_config(directory)
    assert cfg.manager.namespaces == watched
    assert cfg.manager.leader_elect
    assert cfg.manager.metrics_secure


@pytest.mark.parametrize("directory", INSTALLS)
def test_deployment_ports_and_probes_match_the_flags(directory: str) -> None:
    """The named ports are the bound ports; probes hit /healthz and /readyz on them."""
    cfg = deployed_config(directory)
    manager = container(directory)
    ports = {port["name"]: port["containerPort"] for port in manager["ports"]}
    assert cfg.manager.metrics_bind_address == f"0.0.0.0:{ports['metrics']}"
    assert cfg.manager.health_probe_bind_address == f"0.0.0.0:{ports['health']}"
    assert manager["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert manager["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    service = pick(render(directory), "Service", "pulumi-stack-operator-metrics")
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] == "metrics"
    pod_labels = pick(render(directory), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


@pytest.mark.parametrize("directory", INSTALLS)
def test_deployment_binds_every_interface_explicitly(directory: str) -> None:
    """The flags default to loopback; the Deployment's args ask for every interface.

    The kubelet's probes and the metrics Service reach the pod on its IP, not 127.0.0.1.
    """
    defaults = parse_config([], {})
    assert defaults.manager.metrics_bind_address == "127.0.0.1:8080"
    assert defaults.manager.health_probe_bind_address == "127.0.0.1:8081"
    args = container(directory)["args"]
    assert "--metrics-bind-address=:8443" in args
    assert "--health-probe-bind-address=:8081" in args
    cfg = deployed_config(directory)
    assert cfg.manager.metrics_bind_address == "0.0.0.0:8443"
    assert cfg.manager.health_probe_bind_address == "0.0.0.0:8081"


@pytest.mark.parametrize(
    ("directory", "cap"),
    [
        pytest.param(INSTALLS[0], 1, id="every-namespace-half-the-workers"),
        pytest.param(INSTALLS[1], 0, id="one-namespace-no-limit"),
        pytest.param(INSTALLS[2], 1, id="some-namespaces-half-the-workers"),
    ],
)
def test_per_namespace_cap(directory: str, cap: int) -> None:
    """All namespaces: half the workers per namespace; one namespace: no cap to idle them."""
    cfg = deployed_config(directory)
    assert cfg.manager.workers == 2
    assert cfg.manager.max_concurrent_reconciles_per_namespace == cap


def test_shutdown_fits_in_the_grace_period() -> None:
    """Running updates get --shutdown-timeout, then the wait for interrupted ones to stop.

    That wait (``INTERRUPT_TIMEOUT``) must outlast the CLI's interrupt grace, after which
    the runner kills the CLI and writes the outcome.
    """
    cfg = deployed_config("default")
    pod = pick(render("default"), "Deployment")["spec"]["template"]["spec"]
    spare = pod["terminationGracePeriodSeconds"] - cfg.manager.shutdown_timeout
    assert spare >= INTERRUPT_TIMEOUT > DEFAULT_INTERRUPT_GRACE


def image_env(name: str) -> str:
    """The value the Dockerfile's ``ENV`` gives ``name``."""
    match = re.search(rf"\b{name}=(\S+)", (REPO / "Dockerfile").read_text())
    assert match, name
    return match.group(1)


def test_deployment_is_locked_down() -> None:
    """Non-root 65532, read-only root, no capabilities; every written path is an emptyDir.

    The written paths: the work dir, /tmp, and the image's HOME and PSO_WORK_DIR.
    """
    pod = pick(render("default"), "Deployment")["spec"]["template"]["spec"]
    manager = container("default")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert manager["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = [Path(m["mountPath"]) for m in manager["volumeMounts"] if m["name"] in empty_dirs]
    written = [deployed_config("default").work_dir, "/tmp"]  # noqa: S108 - a path in the pod
    for path in [*written, image_env("HOME"), image_env("PSO_WORK_DIR")]:
        assert any(Path(path).is_relative_to(mount) for mount in mounts), path
    assert {"requests", "limits"} <= manager["resources"].keys()


def test_the_operator_outranks_every_run_pod() -> None:
    """The operator's pods have a PriorityClass of their own; Stacks may use none by default.

    So the scheduler never preempts the operator for a run pod.
    """
    objects = render("default")
    pod = pick(objects, "Deployment")["spec"]["template"]["spec"]
    priority = pick(objects, "PriorityClass")
    assert pod["priorityClassName"] == priority["metadata"]["name"]
    assert priority["value"] > 0
    assert priority["globalDefault"] is False
    assert deployed_config("default").tenancy.allowed_priority_classes == frozenset()


def test_tenancy_flags_default_to_the_safe_choice() -> None:
    """No priority class, no wildcard toleration, only the default ServiceAccount by name."""
    tenancy = deployed_config("default").tenancy
    assert not tenancy.allow_any_toleration
    assert tenancy.allowed_service_accounts == frozenset({"default"})
    assert deployed_config("default").max_run_timeout == 86400


def test_image_and_command_are_the_projects() -> None:
    """The image tag is the project's version; the image's entrypoint runs (tini first)."""
    manager = container("default")
    repository, _, tag = manager["image"].rpartition(":")
    assert repository == "ghcr.io/pulumi-stack-operator/pulumi-stack-operator"
    assert tag == project()["version"]
    assert "command" not in manager  # would bypass tini, the image's PID 1


# -- samples -----------------------------------------------------------------------------


SAMPLE_PROGRAM = MANIFESTS / "samples" / "program"


def sample_stacks() -> list[Manifest]:
    """The sample Stacks."""
    return [obj for obj in render("samples") if obj["kind"] == "Stack"]


def test_samples_parse_with_the_operators_spec_parser() -> None:
    """Each sample Stack is accepted by reconcile.spec, and its Secret refs resolve."""
    objects = render("samples")
    secrets = {
        obj["metadata"]["name"]: obj.get("stringData", {})
        for obj in objects
        if obj["kind"] == "Secret"
    }
    stacks = sample_stacks()
    assert len(stacks) == 2
    for stack in stacks:
        spec = parse_spec(stack["spec"], "ns")
        for ref in spec.env_refs.values():
            assert ref.secret is not None
            assert ref.secret.key in secrets[ref.secret.name]
    backends = {parse_spec(s["spec"], "ns").backend or "" for s in stacks}
    assert "" in backends  # Pulumi Cloud, the CLI's default
    assert any(b.startswith("file://") for b in backends)
    cloud = next(s for s in stacks if not s["spec"].get("backend"))
    assert "PULUMI_ACCESS_TOKEN" in cloud["spec"]["envRefs"]


def test_samples_run_the_program_in_this_repository() -> None:
    """Both samples point at samples/program, a Python program with no virtualenv."""
    project_file = yaml.safe_load((SAMPLE_PROGRAM / "Pulumi.yaml").read_text())
    assert project_file["runtime"] == "python"  # the one language host the image bundles
    for stack in sample_stacks():
        assert REPO / stack["spec"]["repoDir"] == SAMPLE_PROGRAM
        name = stack["spec"]["stack"]
        if "/" in name:  # org/project/stack on Pulumi Cloud
            assert name.split("/")[1] == project_file["name"]


@pytest.mark.pulumi
def test_sample_program_runs(pulumi_env: PulumiEnv, tmp_path: Path) -> None:
    """The file-backend sample's program and config deploy with the real Pulumi CLI."""
    stack = next(s for s in sample_stacks() if s["spec"].get("backend"))
    program = tmp_path / "program"
    shutil.copytree(SAMPLE_PROGRAM, program)
    workspace = auto.create_or_select_stack(
        stack["spec"]["stack"], work_dir=str(program), opts=pulumi_env.workspace_options()
    )
    workspace.set_all_config(
        {key: auto.ConfigValue(value) for key, value in stack["spec"]["config"].items()}
    )
    result = workspace.up()
    assert result.outputs["message"].value == "Hi from stack dev"


# -- monitoring objects against the operator's manifests ---------------------------------


def test_service_monitor_scrapes_the_metrics_service() -> None:
    """The ServiceMonitor selects the metrics Service by its labels and port name."""
    service = pick(render("default"), "Service", "pulumi-stack-operator-metrics")
    monitor = pick(render("prometheus"), "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["honorLabels"] is True
    assert_scrapes_securely(endpoint)


def assert_scrapes_securely(endpoint: dict[str, Any]) -> None:
    """HTTPS with the scraper's token, whose account may get /metrics and nothing else."""
    assert endpoint["scheme"] == "https"
    assert endpoint["authorization"]["type"] == "Bearer"
    scraper = render("prometheus/reader")
    secret = pick(scraper, "Secret", endpoint["authorization"]["credentials"]["name"])
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert endpoint["authorization"]["credentials"]["key"] == "token"
    account = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    [binding] = [
        obj
        for obj in scraper
        if obj["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and any(subject["name"] == account for subject in obj["subjects"])
    ]
    reader = pick(render("default"), "ClusterRole", binding["roleRef"]["name"])
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_network_policy_admits_only_scrapers_to_the_metrics_port() -> None:
    """It selects the operator's pods and opens their metrics port to labelled namespaces."""
    policy = pick(render("network-policy"), "NetworkPolicy")
    labels = pick(render("default"), "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    [source] = rule["from"]
    assert source == {
        "namespaceSelector": {"matchLabels": {"pulumi-stack-operator.dev/metrics": "true"}}
    }


def test_pod_monitor_scrapes_the_operator_pods() -> None:
    """The PodMonitor selects the operator's pods and names their metrics port."""
    deployment = pick(render("default"), "Deployment")
    monitor = pick(render("prometheus/pod-monitor"), "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True
    assert_scrapes_securely(endpoint)


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups."""
    groups: list[dict[str, Any]] = pick(render(RULE[0]), RULE[1])["spec"]["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    """Every alerting rule of the PrometheusRule."""
    return [rule for group in rule_groups() for rule in group["rules"]]


def test_both_monitors_carry_the_same_rule() -> None:
    """prometheus/ and prometheus/pod-monitor install the one PrometheusRule."""
    for directory in ("prometheus", "prometheus/pod-monitor"):
        assert pick(render(directory), "PrometheusRule")["spec"]["groups"] == rule_groups()


def test_the_docs_list_every_alert() -> None:
    """docs/metrics.md's Alerts table names exactly the PrometheusRule's alerts."""
    page = (REPO / "docs" / "metrics.md").read_text()
    section = page.split("\n## Alerts\n", 1)[1].split("\n#", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert sorted(documented) == sorted(rule["alert"] for rule in alerts())


# -- PromQL: promtool and the operator's registry -------------------------------------------


@pytest.fixture
def promtool() -> Path:
    """Debian's promtool."""
    found = find_binary("promtool")
    if found is None:
        pytest.skip(f"promtool is not installed ({INSTALL_HINT})")
    return found


def run_promtool(promtool: Path, *args: str) -> None:
    """Run promtool; fail with its output if it does not exit 0."""
    proc = subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rules_pass_promtool(promtool: Path, tmp_path: Path) -> None:
    """``promtool check rules`` accepts the PrometheusRule's groups."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    run_promtool(promtool, "check", "rules", str(rules))


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard's panels."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
        if "expr" in target
    ]


def dashboard_variable_metrics() -> list[str]:
    """Metric names the dashboard's ``label_values(metric, label)`` variables read."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", variable["query"]["query"])
            assert match, variable["query"]
            found.append(match.group(1))
    return found


def test_dashboard_is_well_formed() -> None:
    """Unique panel ids, every query on the datasource variable; the ConfigMap carries it."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    assert dashboard["uid"] == "pulumi-stack-operator"
    for panel in panels:
        for target in panel.get("targets", ()):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    config_map = pick(render("grafana"), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"][DASHBOARD.name]) == dashboard


def test_dashboard_queries_pass_promtool(promtool: Path, tmp_path: Path) -> None:
    """Each dashboard query (variables filled in) parses, as a recording rule."""
    rules = [
        {"record": f"dashboard:query_{i}", "expr": substitute(expr)}
        for i, expr in enumerate(dashboard_queries())
    ]
    assert rules
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool(promtool, "check", "rules", str(path))


Families = dict[str, tuple[frozenset[str], dict[str, frozenset[str]]]]
"""Sample name → (its label names, label → values of the series that exist at start)."""


@pytest.fixture(scope="module")
def operator_series(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Families]:
    """The series names the operator registers, built in-process as the Deployment runs it.

    The real ``Manager`` and ``wiring.new_stack_reconciler`` on a fresh registry,
    with the Deployment's flags; only the Pulumi CLI check and the pod runner's look at
    its own pod (for its image) are skipped (not needed to register metrics).
    """
    work = tmp_path_factory.mktemp("work")
    cfg = parse_config([*container("default")["args"], f"--work-dir={work}"], {})
    contexts: list[ManagerContext] = []

    def new_reconciler(context: ManagerContext) -> StackReconciler:
        contexts.append(context)
        return wiring.new_stack_reconciler(context, cfg)

    with pytest.MonkeyPatch.context() as patch:
        # A CLI that is never run: registering metrics needs no Pulumi.
        patch.setattr(wiring, "pulumi_command", lambda: SimpleNamespace(command="pulumi"))
        patch.setattr(wiring, "own_image", lambda _api, _environ: "pulumi-stack-operator:test")
        patch.setenv("PULUMI_PYTHON_CMD", "python3")
        patch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
        manager = Manager(
            cfg.manager, "stacks", wiring.STACKS, new_reconciler, api_client=client.ApiClient()
        )
    try:
        yield registered_series(manager)
    finally:
        for close in contexts[0].closers:
            close(1.0)


def registered_series(manager: Manager) -> Families:
    """Every sample name of ``manager.registry`` with its label names and initial values."""
    values: dict[str, dict[str, set[str]]] = {}
    for family in manager.registry.collect():
        for sample in family.samples:
            for label, value in sample.labels.items():
                values.setdefault(sample.name, {}).setdefault(label, set()).add(value)
    # prometheus_client has no public accessor for a collector's label names.
    collectors = manager.registry._names_to_collectors  # noqa: SLF001
    series: Families = {}
    for name, collector in collectors.items():
        kind, base, labelnames = collector_shape(collector, name)
        if kind != "gauge" and name == base:
            continue  # counters and histograms expose only suffixed samples (_total, ...)
        labels = frozenset(labelnames)
        if name.endswith("_bucket"):
            labels |= {"le"}
        seen = {k: frozenset(v) for k, v in values.get(name, {}).items()}
        series[name] = (labels, seen)
    return series


def collector_shape(collector: object, name: str) -> tuple[str, str, tuple[str, ...]]:
    """The type, family name and label names of the family ``name`` of ``collector``.

    A ``Gauge``/``Counter``/``Histogram`` keeps them in private fields (prometheus_client
    has no public accessor); a custom collector (``StackSeries``) describes its families.
    """
    if isinstance(collector, MetricWrapperBase):
        return str(collector._type), str(collector._name), tuple(collector._labelnames)  # noqa: SLF001
    family = next(f for f in collector.describe() if f.name == name)  # type: ignore[attr-defined]
    return str(family.type), str(family.name), tuple(family._labelnames)  # noqa: SLF001


def ksm_series() -> Families:
    """Series the kube-state-metrics config in manifests/kube-state-metrics defines."""
    config = yaml.safe_load(KSM_CONFIG.read_text())
    series: Families = {}
    for resource in config["spec"]["resources"]:
        common = set(resource["labelsFromPath"]) | {
            "customresource_group", "customresource_kind", "customresource_version",
        }  # fmt: skip
        for metric in resource["metrics"]:
            each = metric["each"]
            body = each[each["type"][0].lower() + each["type"][1:]]
            labels = common | set(body.get("labelsFromPath", {}))
            if "labelName" in body:
                labels.add(body["labelName"])
            name = f"{resource['metricNamePrefix']}_{metric['name']}"
            series[name] = (frozenset(labels), {})
    return series


def check_selector(selector: Selector, known: Families) -> list[str]:
    """What is wrong with ``selector`` given the ``known`` series (empty: nothing)."""
    if selector.metric not in known:
        return [f"{selector.metric}: not a series the operator (or KSM config) exports"]
    labels, seen = known[selector.metric]
    problems = [
        f"{selector.metric}: no label {label}" for label in selector.labels - labels - SCRAPE_LABELS
    ]
    problems += [
        f"{selector.metric}: {label}={value!r} is none of {sorted(seen[label])}"
        for label, value in selector.equals
        if label in seen and value not in seen[label]
    ]
    return problems


def test_alerts_use_only_exported_series(operator_series: Families) -> None:
    """Every series an alert reads is registered by the operator, with those labels.

    Exceptions, each deliberate: ``up`` (Prometheus' own, for OperatorDown) and, in the
    kube-state-metrics group only, the series that manifests/kube-state-metrics defines.
    """
    known = {
        **operator_series,
        **{name: (labels, {}) for name, labels in PROMETHEUS_SERIES.items()},
    }
    problems = []
    for group in rule_groups():
        scope = {**known, **ksm_series()} if group["name"].endswith("kube-state-metrics") else known
        for rule in group["rules"]:
            found = selectors(rule["expr"])
            assert found, rule["alert"]
            problems += [p for s in found for p in check_selector(s, scope)]
    assert problems == []


def test_dashboard_uses_only_exported_series(operator_series: Families) -> None:
    """Every series a dashboard query or variable reads is registered by the operator."""
    problems = []
    for expr in dashboard_queries():
        found = selectors(expr)
        assert found, expr
        problems += [p for s in found for p in check_selector(s, operator_series)]
    for metric in dashboard_variable_metrics():
        problems += check_selector(Selector(metric, frozenset()), operator_series)
    assert problems == []


def test_registry_reading_catches_mistakes(operator_series: Families) -> None:
    """The checker itself: a typo in a name, a label or a closed label value is reported."""
    bad = (
        'pulumi_stack_update_duration_seconds_count{result="failure", phase="up"} + nope'
        " + pulumi_stack_resource_changes"  # a counter without its _total suffix
    )
    problems = [p for s in selectors(bad) for p in check_selector(s, operator_series)]
    assert len(problems) == 4, problems


# -- alerts fire as documented ---------------------------------------------------------


def series(metric: str, values: str, /, **labels: str) -> dict[str, str]:
    """One promtool input series."""
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def expected(alert: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    """A promtool alert check: ``alert`` at ``at`` fires once per label set in ``fired``."""
    rule = next(rule for rule in alerts() if rule["alert"] == alert)

    def render_template(text: str, labels: dict[str, str]) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)

    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [
            {
                "exp_labels": {**rule["labels"], **labels},
                "exp_annotations": {
                    k: render_template(v, labels) for k, v in rule["annotations"].items()
                },
            }
            for labels in fired
        ],
    }


STACK = {"namespace": "team", "name": "db"}


def alert_cases() -> list[dict[str, Any]]:
    """Unit tests for promtool: each alert fires when it should, and only then."""
    cond = "pulumi_stack_condition"
    ready_false = {"type": "Ready", "status": "False"}
    updates = "pulumi_stack_update_duration_seconds_count"
    return [
        {  # two replicas export the same Stalled Stack: one alert, after 10 minutes
            "input_series": [
                series(cond, "1x30", **STACK, type="Stalled", status="True", pod="a"),
                series(cond, "1x30", **STACK, type="Stalled", status="True", pod="b"),
                series(cond, "0x30", name="ok", namespace="team", type="Stalled", status="True"),
            ],
            "alert_rule_test": [
                expected("PulumiStackStalled", "9m"),
                expected("PulumiStackStalled", "11m", STACK),
            ],
        },
        {  # not Ready for an hour fires; suspended or Ready Stacks do not
            "input_series": [
                series(cond, "1x90", **STACK, **ready_false),
                series(cond, "1x90", namespace="team", name="paused", **ready_false),
                series("pulumi_stack_suspended", "1x90", namespace="team", name="paused"),
                series(cond, "1x90", namespace="team", name="fine", type="Ready", status="True"),
            ],
            "alert_rule_test": [
                expected("PulumiStackNotReady", "59m"),
                expected("PulumiStackNotReady", "61m", STACK),
            ],
        },
        {  # up: 6 failures/h against 0.6 successes/h; preview: mostly succeeding
            "input_series": [
                series(updates, "0+0.1x120", operation="up", result="failed"),
                series(updates, "0+0.01x120", operation="up", result="succeeded"),
                series(updates, "0+0.1x120", operation="preview", result="failed"),
                series(updates, "0+1x120", operation="preview", result="succeeded"),
            ],
            "alert_rule_test": [
                expected("PulumiStackUpdateFailuresRising", "90m", {"operation": "up"}),
            ],
        },
        {  # the target is down, and later gone altogether
            "input_series": [series("up", "0x20 _x40", job="pulumi-stack-operator-metrics")],
            "alert_rule_test": [
                expected("PulumiStackOperatorDown", "9m"),
                expected("PulumiStackOperatorDown", "15m", {}),
                expected("PulumiStackOperatorDown", "50m", {}),
            ],
        },
        {  # two standbys and no leader; then one leads
            "input_series": [
                series(
                    "leader_election_master_status",
                    "0x20 1x20",
                    name="pulumi-stack-operator",
                    pod="a",
                ),
                series(
                    "leader_election_master_status", "0x40", name="pulumi-stack-operator", pod="b"
                ),
                series("up", "1x40", job="pulumi-stack-operator-metrics"),
            ],
            "alert_rule_test": [
                expected("PulumiStackOperatorNoLeader", "15m", {}),
                expected("PulumiStackOperatorNoLeader", "30m"),
                expected("PulumiStackOperatorDown", "30m"),
            ],
        },
        {  # one 403 fires at once; it clears when the window passes
            "input_series": [
                series(
                    "rest_client_requests_total", "0x5 1x30", code="403", method="GET", host="h"
                ),
                series("rest_client_requests_total", "0+5x35", code="200", method="GET", host="h"),
            ],
            "alert_rule_test": [
                expected("PulumiStackOperatorRequestsForbidden", "7m", {}),
                expected("PulumiStackOperatorRequestsForbidden", "30m"),
            ],
        },
        {  # status patches failing for 15 minutes
            "input_series": [
                series("pulumi_stack_status_patches_total", "0+1x40", result="error"),
            ],
            "alert_rule_test": [
                expected("PulumiStackStatusWritesFailing", "10m"),
                expected("PulumiStackStatusWritesFailing", "20m", {}),
            ],
        },
        {  # kube-state-metrics: generation ahead of observedGeneration for 10 minutes
            "input_series": [
                series("pulumi_stack_generation", "2x20", exported_namespace="team", name="db"),
                series(
                    "pulumi_stack_observed_generation", "1x20", exported_namespace="team", name="db"
                ),
                series("pulumi_stack_generation", "3x20", exported_namespace="team", name="ok"),
                series(
                    "pulumi_stack_observed_generation", "3x20", exported_namespace="team", name="ok"
                ),
            ],
            "alert_rule_test": [
                expected(
                    "PulumiStackNotObserved", "11m", {"exported_namespace": "team", "name": "db"}
                ),
            ],
        },
    ]


def test_every_alert_has_a_unit_test() -> None:
    """Each alert of the PrometheusRule is exercised by ``alert_cases``."""
    tested = {check["alertname"] for case in alert_cases() for check in case["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in alerts()}


def test_alerts_fire_as_documented(promtool: Path, tmp_path: Path) -> None:
    """``promtool test rules``: each alert fires after its ``for``, with its labels."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **case} for case in alert_cases()],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    run_promtool(promtool, "test", "rules", str(tmp_path / "tests.yaml"))


# -- server-side dry runs --------------------------------------------------------------


@pytest.fixture(scope="module")
def monitoring_kinds(control_plane: ControlPlane) -> frozenset[str]:
    """The Prometheus Operator's CRDs for our kinds, applied; their kinds (none if unobtainable)."""
    try:
        directory = find_prometheus_operator_crds()
    except AssetError:
        return frozenset()
    for plural in MONITORING_CRDS:
        path = directory / f"monitoring.coreos.com_{plural}.yaml"
        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for plural in MONITORING_CRDS:
        control_plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            f"crd/{plural}.monitoring.coreos.com",
        )  # fmt: skip
    control_plane.kubectl("api-resources", "--api-group=monitoring.coreos.com")
    return frozenset(MONITORING_CRDS.values())


@pytest.fixture(scope="module")
def system_namespace(control_plane: ControlPlane) -> str:
    """The operator's namespace, really created (a dry run does not create it)."""
    namespace = pick(render("default"), "Namespace")
    path = control_plane.root / "system-namespace.yaml"
    path.write_text(yaml.safe_dump(namespace))
    control_plane.kubectl("apply", "--server-side", "-f", str(path))
    return str(namespace["metadata"]["name"])


def dry_run(
    control_plane: ControlPlane, objects: list[Manifest], path: Path, namespace: str | None
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply --server-side --dry-run=server --validate=strict`` of ``objects``."""
    path.write_text(yaml.safe_dump_all(objects))
    args = ["apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(path)]
    if namespace is not None:
        args += ["--namespace", namespace]
    # kubectl's default field manager, as `make deploy` and the stack_crd fixture use: the
    # CRD's spec.versions is atomic, so another manager would conflict with that fixture.
    return control_plane.kubectl(*args, check=False)


# The Flux sample's GitRepository needs Flux's CRDs, which the source-controller's fixture
# installs on the session's control plane.
NEEDS_FLUX = ("samples/flux",)
DRY_RUNS = [
    pytest.param(d, marks=[pytest.mark.flux, pytest.mark.git]) if d in NEEDS_FLUX else d
    for d in APPLIED
]


@pytest.mark.integration
@pytest.mark.usefixtures("stack_crd", "system_namespace")
@pytest.mark.parametrize("directory", DRY_RUNS)
def test_dry_run_on_a_real_apiserver(
    directory: str,
    control_plane: ControlPlane,
    monitoring_kinds: frozenset[str],
    namespace: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The apiserver accepts every object (strict field validation), without a warning.

    Warnings would include Pod Security (the namespace warns on ``restricted``), deprecated
    APIs and unknown fields. The samples go to a fresh namespace. Monitoring objects need
    the Prometheus Operator's CRDs from the Go module proxy; if those cannot be had, they
    are left out of the dry run here and checked only by the structural tests above
    (the monitors' selectors and ports, promtool on the rules).
    """
    objects = [
        obj
        for obj in render(directory)
        if not obj["apiVersion"].startswith("monitoring.coreos.com/")
        or obj["kind"] in monitoring_kinds
    ]
    if not objects:
        pytest.skip(f"{directory}: only monitoring objects, and their CRDs are unobtainable")
    for served in SERVED if directory == "overlays/namespaces" else ():
        control_plane.kubectl("create", "namespace", served, check=False)
    if directory in NEEDS_FLUX:
        request.getfixturevalue("flux_source")
    target = namespace if directory.startswith("samples") else None
    proc = dry_run(control_plane, objects, tmp_path / "objects.yaml", target)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    applied = [line for line in proc.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(objects), proc.stdout


@pytest.mark.integration
def test_the_priority_quota_keeps_a_namespace_below_the_operator(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """The sample quota refuses a pod of the operator's class; an ordinary pod is admitted.

    The real quota controller (kube-controller-manager, that controller only) counts the
    namespace, as in a cluster; the API server's admission then refuses the pod.
    """
    priority = pick(render("default"), "PriorityClass")
    quota = pick(render("samples"), "ResourceQuota")
    quota["metadata"]["namespace"] = namespace
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all([priority, quota]))
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    quotas = ControllerManager(
        controller_manager_binary_or_skip(), control_plane, tmp_path / "kcm", ("resourcequota",)
    )
    quotas.start()
    try:
        core = client.CoreV1Api(api_client)

        def counted() -> bool:
            found = core.read_namespaced_resource_quota(quota["metadata"]["name"], namespace)
            return found.status is not None and bool(found.status.hard)

        wait_for(counted, "the quota controller to count the namespace", 60)
        with pytest.raises(client.ApiException) as refused:
            core.create_namespaced_pod(namespace, pod("critical", priority["metadata"]["name"]))
        assert refused.value.status == 403
        assert "exceeded quota: no-critical-priority" in str(refused.value.body)
        core.create_namespaced_pod(namespace, pod("ordinary", None))
    finally:
        quotas.stop()


def pod(name: str, priority_class: str | None) -> client.V1Pod:
    """A pod of one container (never scheduled here), of ``priority_class`` if given."""
    container = client.V1Container(name="c", image="registry.invalid/x:1")
    spec = client.V1PodSpec(containers=[container], priority_class_name=priority_class)
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


@pytest.mark.integration
@pytest.mark.usefixtures("stack_crd")
def test_dry_run_would_catch_a_broken_sample(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The dry run validates samples against the CRD: a misspelt field is refused."""
    stack = pick(render("samples"), "Stack", "hello-file")
    stack["spec"]["projectRepository"] = stack["spec"].pop("projectRepo")
    proc = dry_run(control_plane, [stack], tmp_path / "broken.yaml", namespace)
    assert proc.returncode != 0
    assert "projectRepository" in proc.stderr
