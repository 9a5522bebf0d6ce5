"""Fixtures that start the real test bed: control plane, Pulumi CLI, git server, Prometheus.

Also ``flux_source``, the real Flux source-controller on the session's control plane
(``testbed.flux``), and, for users' own programs: ``plugin_mirror``, the built Kubernetes
provider served as a release tarball to the CLI, and ``controller_manager``,
kube-controller-manager's namespace and garbage-collector controllers beside the control
plane (for one test module at a time).

Each fixture starts the real component on loopback and stops it afterwards. Logs live
under pytest's base temp directory (kept for the last three runs); when a test fails,
the tail of every test-bed process log is attached to its report.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from testbed import process
from testbed.assets import AssetError, find_built, find_kube_binary, find_pulumi
from testbed.control_plane import Binaries, ControlPlane, wait_established
from testbed.controller_manager import ControllerManager
from testbed.controller_manager import find_binary as find_controller_manager
from testbed.finalizers import release_finalizers
from testbed.flux import SourceController
from testbed.flux import find_binary as find_source_controller
from testbed.git_http import Account, GitHttpServer
from testbed.git_server import GitServer
from testbed.otel_collector import OtelCollector
from testbed.plugin_mirror import Plugin, PluginMirror, file_provider, kubernetes_provider
from testbed.prometheus import INSTALL_HINT, Prometheus, find_binary
from testbed.pulumi_env import PulumiEnv

# Suite-wide session fixtures that live beside their tests: the operator's image and the
# single-node cluster, each started once and shared by every directory that needs them.
pytest_plugins = (
    "tests.tiers",
    "tests.durations",
    "tests.signals",
    "tests.image.fixtures",
    "tests.node.cluster",
)

PROGRAMS = Path(__file__).parents[1] / "testbed" / "programs"
STACK_CRD = Path(__file__).parents[1] / "manifests" / "crd" / "stacks.pulumi.com.yaml"
PROGRAM_CRD = STACK_CRD.with_name("programs.pulumi.com.yaml")


@pytest.fixture
def repo_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """This repository first on ``PYTHONPATH``: a pytester subprocess run imports its plugins.

    For the tests of the suite's own plugins (``tests.tiers``, ``tests.durations``,
    ``tests.signals``) that run a small suite with them; returns the repository's root.
    """
    repo = Path(__file__).resolve().parents[1]
    paths = [str(repo), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    return repo


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each test-bed process log to a failed test's report."""
    del item, call
    report: pytest.TestReport = yield
    if report.failed:
        for proc in process.started():
            report.sections.append((f"{proc.name} log ({proc.log_path})", proc.log_tail()))
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real etcd + kube-apiserver for the whole session."""
    binaries = Binaries(*(find_kube_binary(b) for b in ("etcd", "kube-apiserver", "kubectl")))
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("control-plane"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def stack_crd(control_plane: ControlPlane) -> Path:
    """The Stack CRD (and the Program CRD), server-side applied once per session, Established."""
    for crd in (STACK_CRD, PROGRAM_CRD):
        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    wait_established(control_plane.kubectl, "stacks.pulumi.com")
    wait_established(control_plane.kubectl, "programs.pulumi.com")
    # kubectl caches discovery: refresh it so that "stacks" and the "pulumi" category resolve.
    control_plane.kubectl("api-resources", "--api-group=pulumi.com")
    return STACK_CRD


@pytest.fixture
def api_client(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin API client for one test."""
    api = control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


@contextlib.contextmanager
def fresh_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """Create a namespace with a random name; delete it on exit.

    Nothing deletes it on the worker's control plane (it has no namespace controller),
    unless a test starts a kube-controller-manager there: its Stacks' finalizers are
    released first, so that one then deletes it in one pass (``testbed.finalizers``).
    """
    name = f"test-{secrets.token_hex(4)}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    release_finalizers(api_client, name)
    core.delete_namespace(name)


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for one test (deleted afterwards; it never finishes terminating)."""
    with fresh_namespace(api_client) as name:
        yield name


@pytest.fixture
def pulumi_env(tmp_path: Path) -> PulumiEnv:
    """The real Pulumi CLI with its own PULUMI_HOME and a file:// backend."""
    return PulumiEnv.create(find_pulumi(), tmp_path / "pulumi")


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """A git daemon serving bare repositories on loopback."""
    server = GitServer(tmp_path_factory.mktemp("git"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def otel_collector(tmp_path: Path) -> Iterator[OtelCollector]:
    """A real OpenTelemetry Collector for one test: OTLP in, spans to a file it reads back."""
    with OtelCollector(find_built("otel"), tmp_path / "otelcol") as collector:
        yield collector


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    """Start Debian's Prometheus scraping a target ("host:port") every second."""
    binary = find_binary("prometheus")
    if binary is None:
        pytest.skip(f"Debian's prometheus package is not installed ({INSTALL_HINT})")
    servers: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        server = Prometheus(binary, tmp_path / f"prometheus-{len(servers)}", target)
        servers.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def kubernetes_provider_or_skip() -> Plugin:
    """The built Kubernetes provider, or skip the test naming the command that builds it."""
    try:
        return kubernetes_provider()
    except AssetError as err:
        pytest.skip(f"the Kubernetes provider is not built: {err}")


@pytest.fixture(scope="session")
def plugin_mirror() -> Iterator[PluginMirror]:
    """A plugin mirror on 127.0.0.1 serving the Kubernetes provider as a release tarball.

    Point the CLI at it with ``PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES=<plugin_mirror.overrides>``;
    ``plugin_mirror.requests`` and ``downloads()`` record what it served.
    """
    with PluginMirror([kubernetes_provider_or_skip()]) as mirror:
        yield mirror


@pytest.fixture(scope="session")
def files_mirror() -> Iterator[PluginMirror]:
    """A plugin mirror on 127.0.0.1 serving the test bed's file provider.

    The YAML files program's provider (``testbed/programs/files-yaml``): an operator that
    runs it is given ``--plugin-mirror=<files_mirror.url>``, as one without internet access
    would be, and installs the provider from it once per plugin store.
    """
    with PluginMirror([file_provider()]) as mirror:
        yield mirror


def controller_manager_binary_or_skip() -> Path:
    """The node recipe's kube-controller-manager, or skip naming the command that builds it."""
    try:
        return find_controller_manager()
    except AssetError as err:
        pytest.skip(f"kube-controller-manager is not built: {err}")


@pytest.fixture(scope="module")
def controller_manager(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerManager]:
    """kube-controller-manager (namespace + garbage collector) on the control plane.

    Module-scoped on purpose: while it runs, the garbage collector deletes every object
    whose owner does not exist, and other modules create objects owned by made-up Stacks.
    """
    binary = controller_manager_binary_or_skip()
    manager = ControllerManager(binary, control_plane, tmp_path_factory.mktemp("kcm"))
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


def source_controller_binary_or_skip() -> Path:
    """The ``flux`` recipe's source-controller, or skip naming the command that builds it."""
    try:
        return find_source_controller(build=False)
    except AssetError as err:
        pytest.skip(f"the Flux source-controller is not built: {err}")


@pytest.fixture(scope="session")
def flux_source(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SourceController]:
    """The Flux source-controller on the session's control plane, its CRDs installed.

    Its artifacts are served on loopback (``flux_source.storage_address``); nothing of it
    may outlive the session.
    """
    binary = source_controller_binary_or_skip()
    root = tmp_path_factory.mktemp("flux-source")
    controller = SourceController(binary, control_plane.kubeconfig, control_plane.kubectl, root)
    try:
        controller.start()
        yield controller
    finally:
        controller.stop()
    assert controller.leftovers() == [], f"source-controller left {controller.leftovers()}"


@pytest.fixture(scope="module")
def flux_account() -> Account:
    """The one account ``flux_git`` accepts (for a GitRepository's basic-auth Secret)."""
    return Account.random()


@pytest.fixture(scope="module")
def flux_git(
    tmp_path_factory: pytest.TempPathFactory, flux_account: Account
) -> Iterator[GitHttpServer]:
    """Smart HTTP on loopback with basic authentication: what a GitRepository can fetch.

    The source-controller accepts http, https and ssh URLs only (not ``git://``). One per
    module, not per session: the session's source-controller keeps polling what the
    module's GitRepositories name, and the ``git`` processes it would make this server
    start would count against whichever test runs then.
    """
    server = GitHttpServer(tmp_path_factory.mktemp("flux-git"), [flux_account])
    server.start()
    try:
        yield server
    finally:
        server.stop()
