"""Tiers: every test is marked by the real components it uses, and cannot hide one.

Role: a pytest plugin (registered by ``tests/conftest.py``) that

- marks each collected test by the fixtures in its closure (``FIXTURE_MARKS``): a test that
  asks for ``control_plane`` is ``integration``, one that asks for ``node_cluster`` is
  ``node``, and so on, whether or not its module says so;
- puts every ``node`` or ``image`` test in one of four xdist groups (``--dist loadgroup``),
  which run side by side, each in a worker of its own against that worker's own node
  cluster (its own network namespace, address slot, cgroups, containerd and kubelet):
  ``host-pods`` for the end-to-end scenarios under the pod runner (``tests/e2e``),
  ``host-faults`` for the tests marked ``breaks_node`` (they stop, restart or cut off the
  node's daemons or its control plane, or kill its operator), ``host-own`` for the tests
  that need no session node (each starts clusters of its own, or only builds and runs the
  image), and ``host`` for the rest. A group's tests run one at a time, so no test sees
  another's pods, Events or metrics; image builds are serialised across workers by the
  image cache's lock. ``GroupsFirst`` (the ``loadgroup`` scheduler here) hands the groups
  out before any other work unit, the largest first, one to a worker while there are
  workers to spare, so a worker runs its groups first and together (the session's node
  cluster is stopped after them: ``tests/node/cluster.py``);
- selects one tier with ``--tier``: ``unit`` (no real component: ``make test-unit``),
  ``e2e`` (real components, but not the node's or the image's: ``make test-e2e``), ``node``
  (the ``host`` group: ``make test-node``) or ``all`` (the default: ``make test``);
- watches, through a Python audit hook, every process a test starts: a test that runs a
  binary of the test bed (``BINARY_MARKS``: git, pulumi, etcd, podman…) without the marker
  that binary needs fails at teardown, naming the marker to add. So the fast tier
  (``--tier=unit``, ``make test-unit``) holds no real component, even one reached
  through ``request.getfixturevalue`` or a helper.

Guarantees: markers are only ever added, never removed; the audit hook records and never
raises inside ``subprocess`` (the test under it fails cleanly at teardown instead).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

FIXTURE_MARKS: Final[Mapping[str, tuple[str, ...]]] = {
    "control_plane": ("integration",),
    "pulumi_env": ("pulumi",),
    "git_server": ("git",),
    "git_http": ("git",),
    "git_http_v0": ("git",),
    "flux_git": ("git",),
    "prometheus": ("prometheus",),
    "helm_binary": ("helm",),
    "otel_collector": ("otel",),
    # The Flux source-controller on the session's control plane, fetching from a git server.
    "flux_source": ("flux", "integration", "git"),
    # A node cluster is a control plane too; its containerd starts with the operator's
    # image in (testbed.node.image_store), whose revision label comes from git.
    "node_cluster": ("node", "integration", "image", "git"),
    "node_git": ("git",),
    # An end-to-end scenario's surroundings (tests/e2e): a control plane (or the node's),
    # a git server it takes by name for its runner, and the CLI the operator runs.
    "bed": ("integration", "pulumi", "git"),
    # The image's revision label is the repository's HEAD: building it runs git.
    "operator_image": ("image", "git"),
    "image_ref": ("image", "git"),
}
"""Fixture name -> the markers of every test whose fixture closure holds it."""

BINARY_MARKS: Final[Mapping[str, str]] = {
    "etcd": "integration",
    "kube-apiserver": "integration",
    "kubectl": "integration",
    "kube-controller-manager": "integration",
    "pulumi": "pulumi",
    "git": "git",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "helm": "helm",
    "source-controller": "flux",
    "otelcol-pso": "otel",
    "podman": "image",
    "buildah": "image",
    "kubelet": "node",
    "containerd": "node",
}
"""Executable name -> the marker a test that starts it must carry."""

HOST_MARKS: Final = ("node", "image")
HOST_GROUP: Final = "host"
POD_GROUP: Final = "host-pods"
FAULTS_GROUP: Final = "host-faults"
OWN_GROUP: Final = "host-own"
BREAKS_NODE: Final = "breaks_node"
SESSION_NODE: Final = "node_cluster"

MARKERS: Final[Mapping[str, str]] = {
    "integration": "needs the real control plane or its binaries (etcd, kube-apiserver, kubectl)",
    "pulumi": "needs the real Pulumi CLI",
    "e2e": "runs the operator end to end",
    "git": "runs git or a real git server",
    "prometheus": "runs Debian's prometheus or promtool",
    "helm": "needs the helm binary built from its Go module",
    "flux": "runs the real Flux source-controller built from its Go module",
    "otel": "runs the real OpenTelemetry Collector built from its Go modules",
    "image": "builds or runs the operator's container image (podman, root)",
    "node": "needs the real single-node cluster (kubelet, containerd; root)",
}
"""Every marker of a real component, and what it says."""

BED_MARKS: Final = tuple(MARKERS)
"""A test with any of these markers uses a real component; the others are the fast tier."""

TIERS: Final = ("all", "unit", "e2e", "node")

_audited = [False]  # an audit hook cannot be removed: add it once per interpreter
_current: list[pytest.Item] = []
_started: dict[str, list[str]] = {}  # nodeid -> executables started without their marker
_lock = threading.Lock()


def _executable(event_args: tuple[Any, ...]) -> str:
    """The basename a ``subprocess.Popen`` audit event runs (argv[0] without executable)."""
    executable, args = event_args[0], event_args[1]
    if executable is None and isinstance(args, Sequence) and not isinstance(args, str | bytes):
        executable = args[0] if args else ""
    elif executable is None:
        executable = str(args).split(" ", 1)[0]
    return Path(os.fsdecode(executable)).name


def record_use(name: str) -> None:
    """Count executable ``name`` as used by the running test, as if it had started it.

    For helpers that cache a binary's answer (``tests/manifests/conftest.py``'s kustomize
    render): without this only the first test of a worker to call them would start the
    binary, so whether a test lacking the marker failed would depend on the test order.
    """
    if not _current:
        return
    item = _current[-1]
    needed = BINARY_MARKS.get(name)
    if needed is not None and item.get_closest_marker(needed) is None:
        with _lock:
            _started.setdefault(item.nodeid, []).append(f"{name} (mark it {needed!r})")


def _audit(event: str, event_args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        record_use(_executable(event_args))


class _GroupsFirstQueue(OrderedDict[str, dict[str, bool]]):
    """xdist's work queue, with every group's scope kept ahead of the others.

    A group's scope is its name (``host``); any other scope is a test's node id, which has
    ``::``. The groups keep the order they were added in (xdist adds the largest first).
    """

    def __init__(self) -> None:
        """Start empty."""
        super().__init__()
        self._groups: list[str] = []

    def __setitem__(self, key: str, value: dict[str, bool]) -> None:
        """Add (or replace) a scope; a group goes after the groups, before the rest."""
        super().__setitem__(key, value)
        if "::" in key:
            return
        if key not in self._groups:
            self._groups.append(key)
        for group in reversed(self._groups):
            if group in self:
                self.move_to_end(group, last=False)


class GroupsFirst(LoadGroupScheduling):  # type: ignore[misc]  # xdist is untyped
    """``--dist loadgroup`` with the groups handed out first (see the module doc)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        """The loadgroup scheduler of xdist, over a groups-first work queue."""
        super().__init__(config, log)
        self.workqueue = _GroupsFirstQueue()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadGroupScheduling | None:
    """``GroupsFirst`` for ``--dist loadgroup``; xdist's own scheduler otherwise."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return GroupsFirst(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--tier``."""
    parser.addoption(
        "--tier",
        choices=TIERS,
        default="all",
        help="run one tier: unit (no real component), e2e (real components but not the "
        "node's or the image's), node (the node's and the image's), all (default)",
    )


def tier_of(markers: set[str]) -> str:
    """``unit``, ``e2e`` or ``node`` for a test with these markers."""
    if markers & set(HOST_MARKS):
        return "node"
    return "e2e" if markers & set(BED_MARKS) else "unit"


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and the audit hook."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.addinivalue_line(
        "markers",
        f"{BREAKS_NODE}: stops, restarts or cuts off the session node's daemons or control "
        f"plane, or kills its operator: runs in the {FAULTS_GROUP!r} group, on a node of its own",
    )
    if not _audited[0]:
        sys.addaudithook(_audit)
        _audited[0] = True


def host_group(item: pytest.Item) -> str:
    """The xdist group of a node or image test (the module's docstring says why each).

    ``host-pods`` for ``tests/e2e``; ``host-faults`` for one marked ``breaks_node``;
    ``host-own`` for one whose fixtures hold no session node (``node_cluster``); else
    ``host``.
    """
    if "e2e" in item.path.parts:
        return POD_GROUP
    if item.get_closest_marker(BREAKS_NODE) is not None:
        return FAULTS_GROUP
    if SESSION_NODE not in getattr(item, "fixturenames", ()):
        return OWN_GROUP
    return HOST_GROUP


def uses_session_node(item: pytest.Item) -> bool:
    """Whether ``item`` runs on the session's node cluster.

    It names ``node_cluster`` among its fixtures, or it is an end-to-end scenario under
    the pod runner (``host-pods``), whose bed asks for the node while it sets up.
    """
    if SESSION_NODE in getattr(item, "fixturenames", ()):
        return True
    group = item.get_closest_marker("xdist_group")
    return group is not None and tuple(group.args[:1]) == (POD_GROUP,)


def marks_of(fixturenames: Sequence[str]) -> set[str]:
    """The markers a test with these fixtures must carry."""
    return {mark for name in fixturenames for mark in FIXTURE_MARKS.get(name, ())}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by their fixtures, group the host's tests for xdist, keep ``--tier``'s.

    First of all hooks: xdist's ``loadgroup`` reads the ``xdist_group`` marks in its own
    hook, so they must be on the items before it runs.
    """
    tier = config.getoption("tier")
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        for name in sorted(marks_of(getattr(item, "fixturenames", ())) - have):
            item.add_marker(name)
            have.add(name)
        if have & set(HOST_MARKS):
            item.add_marker(pytest.mark.xdist_group(host_group(item)))
        (kept if tier in ("all", tier_of(have)) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Remember which test runs, for the audit hook."""
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.remove(item)


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """Fail a test that used a tier's fixture or binary without the tier's marker."""
    yield
    node = request.node
    missing = sorted(
        f"{name} (mark it {mark!r})"
        for name in request.fixturenames
        for mark in FIXTURE_MARKS.get(name, ())
        if node.get_closest_marker(mark) is None
    )
    with _lock:
        missing += _started.pop(node.nodeid, [])
    if missing:
        pytest.fail(
            "this test uses real components its markers do not name: "
            + ", ".join(dict.fromkeys(missing)),
            pytrace=False,
        )
