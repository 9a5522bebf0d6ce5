"""The session's single-node cluster (a pytest plugin: ``tests/conftest.py`` registers it).

``node_cluster`` starts a ``NodeCluster`` (control plane, kube-controller-manager,
kube-scheduler, one node) once per session, shared by every test that needs it (the node
tests, the chart's install test), and after stopping it fails loudly if anything of it is
left on the machine. It skips, naming what is missing, when not root, when containerd /
runc / CNI plugins / iptables are absent (``hack/install-node`` installs them) or when the
node binaries are not built (``python3 -m testbed.assets --with node``). A failed test's
report gets the tail of the node daemons' logs.

The cluster is stopped as soon as the worker's next test does not need it, not at the
session's end: the tests that need it form xdist groups (``tests/tiers.py``), which a
worker runs first and together, and an idle node cluster still burns some 5 % of a core
(its API server, etcd, controller-manager, scheduler and kubelet), for the rest of a
session whose wall time is the machine's CPU. A test that asks for it after that fails,
saying so.

Beside it, for every test that runs pods of the operator's image (the node tests, the
e2e scenarios under ``--runner=pod``): ``image_ref``, the image imported into the node
once, and ``node_git``, a git server that both this machine and the pods reach; likewise
``node_plugin_mirror``, the plugin mirror (``testbed.plugin_mirror``) on that address.
``marker_server`` serves a random marker on an address, for the tests that check a pod
reaches the host.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import secrets
import threading
import time
from collections.abc import Generator, Iterator

import pytest

from testbed.assets import AssetError, cache_root
from testbed.git_server import GitServer
from testbed.image import BuiltImage, save_archive
from testbed.node import NodeBinaries, NodeCluster, missing_host_tools
from testbed.node.image_store import Archive
from testbed.package_mirror import PackageMirror
from testbed.plugin_mirror import PluginMirror, file_provider
from tests.conftest import kubernetes_provider_or_skip
from tests.tiers import uses_session_node

_clusters: list[NodeCluster] = []
_early_stops: list[EarlyStop] = []
_in_use = [False]  # a test that used the node ran, and the node has not been stopped since


class EarlyStop:
    """Stops the session's node cluster once, whichever comes first: no more use, or the end."""

    def __init__(self, cluster: NodeCluster) -> None:
        """Stop ``cluster`` when called (once)."""
        self.cluster = cluster
        self.stopped = False

    def __call__(self) -> None:
        """Stop the cluster (the first time) and fail if anything of it is left."""
        if self.stopped:
            return
        self.stopped = True
        started = time.monotonic()
        self.cluster.stop()
        print(f"node cluster stopped in {time.monotonic() - started:.1f}s")  # noqa: T201
        leftovers = self.cluster.leftovers()
        assert leftovers == [], f"the node cluster left these behind: {leftovers}"


@contextlib.contextmanager
def marker_server(host: str) -> Iterator[tuple[str, str]]:
    """An HTTP server on ``host`` answering every GET with a random marker: (url, marker)."""
    marker = secrets.token_hex(8)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(marker.encode())

        def log_message(self, *args: object) -> None:
            del args

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}/", marker
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def node_binaries_or_skip() -> NodeBinaries:
    """The node's binaries, or skip the test saying what is missing."""
    if os.geteuid() != 0:
        pytest.skip("the node tests need root (network namespaces, mounts, cgroups)")
    missing = missing_host_tools()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (run hack/install-node)")
    try:
        return NodeBinaries.find(build=False)
    except AssetError as err:
        pytest.skip(f"node binaries not built ({err}); run hack/install-node")


@contextlib.contextmanager
def logs_reported(cluster: NodeCluster) -> Iterator[NodeCluster]:
    """Inside, a failed test's report gets the tail of ``cluster``'s logs too."""
    _clusters.append(cluster)
    try:
        yield cluster
    finally:
        _clusters.remove(cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of the node daemons' logs (containerd, kubelet, kube-proxy)."""
    del item, call
    report: pytest.TestReport = yield
    if report.failed:
        for cluster in _clusters:
            for log in cluster.log_files():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
                report.sections.append((f"node log ({log})", tail))
    return report


def operator_archive(request: pytest.FixtureRequest) -> list[Archive]:
    """The operator's image as an archive to seed a node with; none where it cannot be built.

    Asked for dynamically, so that a node test that needs no image does not skip with it.
    """
    try:
        image: BuiltImage = request.getfixturevalue("operator_image")
    except pytest.skip.Exception:
        return []
    return [Archive(save_archive(image), image.ref)]


@pytest.fixture(scope="session")
def node_cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[NodeCluster]:
    """A running single-node cluster for the session; nothing of it may survive it.

    Its containerd starts with the operator's image in (``image_ref`` only checks it).
    """
    binaries = node_binaries_or_skip()
    images = operator_archive(request)
    cluster = NodeCluster(tmp_path_factory.mktemp("node-cluster"), binaries, images=images)
    _clusters.append(cluster)
    started = time.monotonic()
    cluster.start()  # stops what it started when it fails
    print(f"node cluster ready in {time.monotonic() - started:.1f}s")  # noqa: T201
    stop = EarlyStop(cluster)
    _early_stops.append(stop)
    try:
        yield cluster
    finally:
        stop()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test that needs the node cluster once it was stopped early (module doc)."""
    if uses_session_node(item) and any(s.stopped for s in _early_stops):
        pytest.fail(
            "the session's node cluster was stopped after its last test on this worker; "
            "a test needing it ran later, outside its xdist group (tests/tiers.py)"
        )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the worker's last test that needs the node cluster, stop it (module doc).

    Not while the next test is of the same module: a module-scoped fixture of the node's
    would be torn down after it, on a stopped cluster; the stop then waits for the first
    test whose next one is of another module (or the session's end). A test "needs" the
    node as ``tests.tiers.uses_session_node`` says: the pod runner's scenarios ask for it
    through their bed, not by name, and their node was once left running to the end.
    """
    _in_use[0] = _in_use[0] or uses_session_node(item)
    if not _in_use[0]:
        return
    if nextitem is not None and (uses_session_node(nextitem) or nextitem.path == item.path):
        return
    _in_use[0] = False
    for stop in _early_stops:
        stop()


@pytest.fixture(scope="session")
def image_ref(node_cluster: NodeCluster, operator_image: BuiltImage) -> str:
    """The operator's image, imported into the node's containerd once per session."""
    node_cluster.load_image(save_archive(operator_image), operator_image.ref)
    return str(operator_image.ref)


@pytest.fixture(scope="session")
def node_git(
    node_cluster: NodeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GitServer]:
    """A git daemon on the host end of the node's network: pods and this machine clone from it."""
    server = GitServer(tmp_path_factory.mktemp("node-git"), host=node_cluster.host_ip)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def node_plugin_mirror(request: pytest.FixtureRequest) -> Iterator[PluginMirror]:
    """The plugin mirror on the host end of the node's network: pods download from it.

    It skips before starting the node cluster when the Kubernetes provider is not built.
    """
    plugin = kubernetes_provider_or_skip()
    cluster: NodeCluster = request.getfixturevalue("node_cluster")
    mirror = PluginMirror([plugin], host=cluster.host_ip)
    mirror.start()
    try:
        yield mirror
    finally:
        mirror.stop()


@pytest.fixture(scope="session")
def node_files_mirror(node_cluster: NodeCluster) -> Iterator[PluginMirror]:
    """The test bed's file provider served on the host end of the node's network.

    The YAML files program's provider for run pods: an operator on the node is given
    ``--plugin-mirror=<node_files_mirror.url>`` and its run pods download the provider from
    it, as the ``files_mirror`` serves the operators of this machine.
    """
    with PluginMirror([file_provider()], host=node_cluster.host_ip) as mirror:
        yield mirror


@pytest.fixture(scope="session")
def node_package_mirror(node_cluster: NodeCluster) -> Iterator[PackageMirror]:
    """An npm and PyPI mirror on the host end of the node's network (pods have no internet).

    Its upstream answers are cached in the test binaries' cache, so later sessions on this
    machine need no registry for the packages they already fetched.
    """
    mirror = PackageMirror(cache_root() / "package-mirror", host=node_cluster.host_ip)
    mirror.start()
    try:
        yield mirror
    finally:
        mirror.stop()
