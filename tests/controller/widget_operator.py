"""A real manager reconciling test Widgets, run as a subprocess by the manager tests.

``python -m tests.controller.widget_operator [flags]`` takes the manager's flags only
(``controller.config``, as ``WIDGETS`` presents them): a second application of the generic
machinery, with its own environment prefix and Lease. The reconciler marks each Widget
it handles with annotations the tests read: ``testbed/started-by`` when it starts, then
after ``spec.sleepSeconds`` (cut short by a shutdown interrupt) ``testbed/reconciled-by``
or ``testbed/interrupted-by``.
"""

from __future__ import annotations

import sys
import threading

from kubernetes import client

from controller.cache import ObjectKey
from controller.config import Application, parse_config
from controller.logs import configure_logging
from controller.manager import Manager, ManagerContext, Resource, run
from controller.reconciler import Result
from tests.controller.conftest import GROUP, PLURAL, VERSION

WIDGETS = Application(
    prog="widget-operator",
    description="Annotate test Widgets with who reconciled them.",
    env_prefix="WIDGET_",
    lease_name="widget-operator",
)


class WidgetReconciler:
    """Annotates widgets with who reconciled them; sleeps on request."""

    def __init__(self, context: ManagerContext) -> None:
        """Keep the context."""
        self._context = context
        self._api = client.CustomObjectsApi(context.api_client)

    def _annotate(self, key: ObjectKey, name: str) -> None:
        patch = {"metadata": {"annotations": {f"testbed/{name}": self._context.config.identity}}}
        self._api.patch_namespaced_custom_object(
            GROUP, VERSION, key.namespace, PLURAL, key.name, patch
        )

    def reconcile(self, key: ObjectKey, stop: threading.Event) -> Result:
        """Mark start, sleep as asked (interruptible), mark the end."""
        widget = self._context.store.get(key)
        if widget is None:
            return Result()
        annotations = widget["metadata"].get("annotations") or {}
        if "testbed/reconciled-by" in annotations or "testbed/interrupted-by" in annotations:
            return Result()
        self._annotate(key, "started-by")
        interrupted = stop.wait(float(widget.get("spec", {}).get("sleepSeconds", 0)))
        self._annotate(key, "interrupted-by" if interrupted else "reconciled-by")
        return Result()


def main() -> int:
    """Run the manager over widgets."""
    cfg = parse_config(sys.argv[1:], WIDGETS)
    configure_logging(cfg.log_format, cfg.log_level)
    resource = Resource(GROUP, VERSION, PLURAL)
    return run(Manager(cfg, "widgets", resource, WidgetReconciler))


if __name__ == "__main__":
    sys.exit(main())
