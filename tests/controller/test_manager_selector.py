"""A manager with a label selector, in process, against the real apiserver.

Only the selected widgets reach the cache and the reconciler (the API server filters the
list and the watch); a widget whose label changes so that it leaves the selection has its
reconcile in flight stopped, as on shutdown, and is forgotten; one that joins it is
reconciled. Any application built on ``controller`` gets this from ``selector_flag``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from controller.cache import ObjectKey
from controller.config import Application, parse_config
from controller.manager import Manager, ManagerContext, Resource
from controller.reconciler import Result
from testbed import waits
from testbed.control_plane import ControlPlane
from tests.controller.conftest import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.integration

SHARDED = Application(
    prog="sharded-widgets",
    description="Reconcile one shard of the widgets.",
    env_prefix="SHARDED_",
    lease_name="sharded-widgets",
    selector_flag="--widget-selector",
    objects="widgets",
)
TIMEOUT = 30.0  # real seconds a step may take; only reached by a failing test


class Recorder:
    """Records each reconcile; a widget with ``spec.hold`` waits on its stop event."""

    def __init__(self, context: ManagerContext) -> None:
        """Read widgets from the manager's cache."""
        self._context = context
        self.cond = threading.Condition()
        self.seen: list[str] = []  # names of reconciled widgets found in the cache
        self.gone: list[str] = []  # names reconciled after they had left the cache
        self.stopped: list[str] = []  # names whose hold ended by their stop event

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Record; hold until stopped when the widget asks."""
        widget = self._context.view.get(key)
        with self.cond:
            (self.gone if widget is None else self.seen).append(key.name)
            self.cond.notify_all()
        if widget is not None and widget.get("spec", {}).get("hold") and stop.wait(TIMEOUT):
            with self.cond:
                self.stopped.append(key.name)
                self.cond.notify_all()
        return Result()

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        """Block until ``check()`` holds (read under the lock)."""
        with self.cond:
            assert self.cond.wait_for(check, timeout=TIMEOUT), what


@pytest.fixture
def widgets(control_plane: ControlPlane, widget_crd: str) -> Iterator[client.CustomObjectsApi]:
    """A CustomObjectsApi on the admin client."""
    del widget_crd
    with control_plane.api_client() as api:
        yield client.CustomObjectsApi(api)


def create(
    api: client.CustomObjectsApi, namespace: str, name: str, shard: str, **spec: Any
) -> None:
    """Create a widget labelled ``shard``."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name, "labels": {"shard": shard}},
        "spec": spec,
    }
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def relabel(api: client.CustomObjectsApi, namespace: str, name: str, shard: str) -> None:
    """Move a widget to ``shard``."""
    patch = {"metadata": {"labels": {"shard": shard}}}
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)


def cached(manager: Manager) -> list[str]:
    """The names of the widgets in the manager's cache."""
    return [obj["metadata"]["name"] for obj in manager.informer.store.objects()]


def test_only_the_selection_is_reconciled_and_a_leaver_is_let_go(
    control_plane: ControlPlane, widgets: client.CustomObjectsApi, namespace: str
) -> None:
    """The cache holds shard a only; leaving stops the reconcile; joining starts one."""
    cfg = parse_config(
        [
            f"--namespaces={namespace}",
            "--widget-selector=shard=a",
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ],
        SHARDED,
        environ={},
    )
    recorders: list[Recorder] = []

    def new_reconciler(context: ManagerContext) -> Recorder:
        recorders.append(Recorder(context))
        return recorders[-1]

    create(widgets, namespace, "held", "a", hold=True)
    create(widgets, namespace, "other", "b")
    with control_plane.api_client() as api:
        manager = Manager(
            cfg, "widgets", Resource(GROUP, VERSION, PLURAL), new_reconciler, api_client=api
        )
        [recorder] = recorders
        runner = threading.Thread(target=manager.run, daemon=True)
        runner.start()
        try:
            recorder.wait("held reconciled", lambda: "held" in recorder.seen)
            assert cached(manager) == ["held"]

            relabel(widgets, namespace, "held", "b")  # leaves mid-reconcile
            recorder.wait("held stopped", lambda: recorder.stopped == ["held"])
            recorder.wait("held forgotten", lambda: "held" in recorder.gone)
            assert cached(manager) == []
            assert manager.controller.alive()  # one reconcile stopped, not the workers

            relabel(widgets, namespace, "other", "a")  # joins
            recorder.wait("other reconciled", lambda: "other" in recorder.seen)
            waits.wait_for(
                lambda: cached(manager) == ["other"],
                "the cache to hold the joiner",
                TIMEOUT,
            )
            assert recorder.seen.count("held") == 1  # never reconciled again once it left
        finally:
            manager.request_shutdown()
            runner.join(TIMEOUT)
        assert not runner.is_alive()
