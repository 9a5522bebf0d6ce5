"""The manager as a process: flags, probes, metrics, leader election, SIGTERM drain."""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.config import parse_config
from controller.manager import Manager, ManagerContext, Resource
from testbed import waits
from testbed.control_plane import ControlPlane
from testbed.operator import Operator
from testbed.process import free_port
from tests.controller.conftest import GROUP, PLURAL, VERSION
from tests.controller.widget_operator import WIDGETS, WidgetReconciler

# -- the process -------------------------------------------------------------------------

WIDGET_OPERATOR = "tests.controller.widget_operator"  # a second user of controller/


def widget_operator(
    control_plane: ControlPlane, namespace: str, log: Path, *extra: str
) -> Operator:
    """Start a widget operator watching ``namespace``, its Lease there too."""
    operator = Operator(
        control_plane.kubeconfig,
        log,
        module=WIDGET_OPERATOR,
        namespaces=[namespace],
        flags=[f"--leader-election-namespace={namespace}", "--log-format=json"],
    )
    operator.start(*extra)
    return operator


TIMEOUT = 60.0  # seconds a process may take to get where a test waits for it
POLL = 0.2  # seconds between looks at a process


def wait_for(
    condition: Callable[[], object], timeout: float = TIMEOUT, what: str = "condition"
) -> None:
    """``testbed.waits.wait_for`` with this module's timeout, polling a little faster."""
    waits.wait_for(condition, what, timeout, interval=POLL)


@pytest.fixture
def operators(widget_crd: str) -> Iterator[list[Operator]]:
    """A list to start operators into; all are killed afterwards, logs shown on failure."""
    del widget_crd
    started: list[Operator] = []
    yield started
    for operator in started:
        operator.stop(signal.SIGKILL)
    for operator in started:
        print(f"--- {operator.log}\n{operator.log.read_text()[-4000:]}")  # noqa: T201


@pytest.fixture
def widgets(control_plane: ControlPlane, namespace: str) -> Iterator[client.CustomObjectsApi]:
    """A CustomObjectsApi on the admin client."""
    del namespace
    api = control_plane.api_client()
    yield client.CustomObjectsApi(api)
    api.close()


def create_widget(
    api: client.CustomObjectsApi, namespace: str, name: str, sleep: float = 0
) -> None:
    """Create a widget that the reconciler sleeps on for ``sleep`` seconds."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"sleepSeconds": sleep},
    }
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def annotation(api: client.CustomObjectsApi, namespace: str, name: str, key: str) -> str | None:
    """A testbed/ annotation of a widget."""
    widget: dict[str, Any] = api.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, PLURAL, name
    )
    annotations: dict[str, str] = widget["metadata"].get("annotations") or {}
    return annotations.get(f"testbed/{key}")


def lease_holder(control_plane: ControlPlane, namespace: str) -> str | None:
    """The Lease's holderIdentity."""
    with control_plane.api_client() as api:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(WIDGETS.lease_name, namespace)
    return lease.spec.holder_identity if lease.spec else None


pytestmark = pytest.mark.integration


def start_ready(operators: list[Operator], operator: Operator) -> Operator:
    """Track ``operator`` for cleanup and wait until it reports ready."""
    operators.append(operator)
    wait_for(lambda: operator.get("/readyz")[0] == 200, what="/readyz")
    return operator


def test_probes_metrics_and_reconcile(
    control_plane: ControlPlane,
    operators: list[Operator],
    widgets: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A single operator syncs, answers its probes, reconciles, and exports metrics."""
    operator = start_ready(
        operators, widget_operator(control_plane, namespace, tmp_path / "op.log")
    )
    assert operator.get("/healthz")[0] == 200
    create_widget(widgets, namespace, "w1")
    wait_for(lambda: annotation(widgets, namespace, "w1", "reconciled-by"), what="reconcile")
    success = operator.metric(
        'controller_runtime_reconcile_total{controller="widgets",result="success"}'
    )
    assert success is not None
    assert float(success) >= 1
    assert operator.metric('workqueue_adds_total{controller="widgets",name="widgets"}') is not None
    assert operator.metric('rest_client_requests_total{code="200",') is not None
    assert operator.stop() == 0


def test_one_leader_then_failover_on_kill_and_release_on_sigterm(
    control_plane: ControlPlane,
    operators: list[Operator],
    widgets: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Two replicas: one leads and reconciles; SIGKILL hands over after the lease expires."""
    timing = ["--leader-elect", "--lease-duration=8", "--renew-deadline=6", "--retry-period=0.5"]
    first = widget_operator(control_plane, namespace, tmp_path / "a.log", *timing)
    second = widget_operator(control_plane, namespace, tmp_path / "b.log", *timing)
    operators.extend([first, second])
    lease = WIDGETS.lease_name
    wait_for(lambda: first.is_leader(lease) or second.is_leader(lease), what="a leader")
    leader, standby = (first, second) if first.is_leader(lease) else (second, first)
    assert not standby.is_leader(lease)
    # A standby's cache is warm: it syncs while it waits (not necessarily before the other
    # replica wins the Lease, which is all the wait above says).
    wait_for(lambda: standby.get("/readyz")[0] == 200, what="the standby's cache to sync")
    assert not standby.is_leader(lease)

    create_widget(widgets, namespace, "w1")
    wait_for(lambda: annotation(widgets, namespace, "w1", "reconciled-by"), what="reconcile")
    by = annotation(widgets, namespace, "w1", "reconciled-by")
    assert by == lease_holder(control_plane, namespace)
    assert by is not None
    assert re.search(rf"_{leader.pid}_[0-9a-f]{{6}}$", by), by

    leader.stop(signal.SIGKILL)
    wait_for(lambda: standby.is_leader(lease), timeout=30, what="failover")
    create_widget(widgets, namespace, "w2")
    wait_for(lambda: annotation(widgets, namespace, "w2", "reconciled-by"), what="reconcile")
    taken = str(annotation(widgets, namespace, "w2", "reconciled-by"))
    assert re.search(rf"_{standby.pid}_[0-9a-f]{{6}}$", taken), taken

    assert standby.stop() == 0
    assert not lease_holder(control_plane, namespace)  # released on the way out


def test_sigterm_lets_a_running_reconcile_finish_then_exits_0(
    control_plane: ControlPlane,
    operators: list[Operator],
    widgets: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """SIGTERM during a 3 s reconcile: it completes, then the process exits 0."""
    operator = start_ready(
        operators, widget_operator(control_plane, namespace, tmp_path / "op.log")
    )
    create_widget(widgets, namespace, "slow", sleep=3)
    wait_for(lambda: annotation(widgets, namespace, "slow", "started-by"), what="start")
    assert operator.stop(timeout=60) == 0
    assert annotation(widgets, namespace, "slow", "reconciled-by")
    assert annotation(widgets, namespace, "slow", "interrupted-by") is None


def test_sigterm_interrupts_a_reconcile_that_outlives_the_shutdown_timeout(
    control_plane: ControlPlane,
    operators: list[Operator],
    widgets: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """With --shutdown-timeout=1, a 300 s reconcile is interrupted and the exit is still 0."""
    operator = start_ready(
        operators,
        widget_operator(control_plane, namespace, tmp_path / "op.log", "--shutdown-timeout=1"),
    )
    create_widget(widgets, namespace, "endless", sleep=300)
    wait_for(lambda: annotation(widgets, namespace, "endless", "started-by"), what="start")
    started = time.monotonic()
    assert operator.stop(timeout=60) == 0
    assert time.monotonic() - started < 60
    assert annotation(widgets, namespace, "endless", "interrupted-by")


def probe(port: int, path: str) -> int:
    """The HTTP status of one probe request; 0 while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except urllib.error.URLError:
        return 0


def test_healthz_fails_while_a_registered_liveness_check_fails(
    control_plane: ControlPlane, widget_crd: str, namespace: str
) -> None:
    """A reconciler's liveness check (e.g. its status writer's thread) gates /healthz."""
    del widget_crd
    writer_alive = threading.Event()
    writer_alive.set()
    broken = threading.Event()

    def check_that_raises() -> bool:
        if broken.is_set():
            raise RuntimeError("the check itself failed")
        return True

    def new_reconciler(context: ManagerContext) -> WidgetReconciler:
        context.liveness_checks.extend((writer_alive.is_set, check_that_raises))
        return WidgetReconciler(context)

    port = free_port()
    cfg = parse_config(
        [
            f"--namespaces={namespace}",
            "--metrics-bind-address=127.0.0.1:0",
            f"--health-probe-bind-address=127.0.0.1:{port}",
        ],
        WIDGETS,
        environ={},
    )
    with control_plane.api_client() as api:
        manager = Manager(
            cfg, "widgets", Resource(GROUP, VERSION, PLURAL), new_reconciler, api_client=api
        )
        runner = threading.Thread(target=manager.run, daemon=True)
        runner.start()
        try:
            wait_for(lambda: probe(port, "/readyz") == 200, what="/readyz")
            wait_for(lambda: probe(port, "/healthz") == 200, what="/healthz while all is well")
            writer_alive.clear()
            assert not manager.healthy()
            assert probe(port, "/healthz") == 503
            writer_alive.set()
            assert probe(port, "/healthz") == 200
            broken.set()
            assert probe(port, "/healthz") == 503  # a check that raises has failed
        finally:
            manager.request_shutdown()
            runner.join(30)
        assert not runner.is_alive()
