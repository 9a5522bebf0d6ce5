"""The Kubernetes client's parts, imported without its packages' eager ``__init__`` modules.

``import kubernetes`` (and so any ``kubernetes.<submodule>``) first runs
``kubernetes/__init__.py``, which imports every part of the library: the kubeconfig loader
(with oauthlib, requests-oauthlib, requests and PyYAML), the websocket streams, the dynamic
client, the informer and the leader election: about 7.5 MiB of resident memory that the
operator, which uses only the request layer, its exceptions, the watch decoder and the
in-cluster loader, never needs. ``kubernetes/config/__init__.py`` does the same for the
kubeconfig loader, and ``kubernetes/utils/__init__.py`` (which the request layer enters for
its retry settings) for the YAML helpers and the metrics client.

``lean()`` registers those three (``LEAN_PACKAGES``) as packages whose ``__init__`` does
not run. Guarantees:

- every submodule still imports on demand, by the import system's usual rules
  (``kubernetes.client``, ``kubernetes.watch``, ``kubernetes.config.kube_config``, …), and
  becomes an attribute of its package as it does with the full package; only the eager
  imports are skipped (and ``kubernetes.__version__``, which nothing of ours reads);
- a package already imported is left as it is (the full package is correct, only larger):
  call ``lean()`` before anything imports ``kubernetes``; calling it again changes nothing.

Only the operator's entry point calls it; tests and libraries import the full package.

``preload()`` then resolves, in the calling (main) thread, every name of
``kubernetes.client`` the operator's code uses (``USED``): that package imports a class's
module on first access, and the full package's ``__init__`` did much of that at start-up.
Without it, the first access would come later, from whichever thread reaches it first
(the leader election's Lease client, an Event's model), importing while other threads
run and import; done here, every module the operator needs is in before any thread starts.
"""

from __future__ import annotations

import importlib.util
import sys
import types

LEAN_PACKAGES = ("kubernetes", "kubernetes.config", "kubernetes.utils")


def lean() -> list[str]:
    """Register ``LEAN_PACKAGES`` without running their ``__init__``; the ones registered."""
    registered = []
    for name in LEAN_PACKAGES:
        if name in sys.modules:
            continue
        sys.modules[name] = _package(name)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
        registered.append(name)
    return registered


USED = (
    "ApiClient",
    "ApiException",
    "AuthenticationV1Api",
    "AuthorizationV1Api",
    "Configuration",
    "CoordinationV1Api",
    "CoreV1Event",
    "V1EventSource",
    "V1Lease",
    "V1LeaseSpec",
    "V1NonResourceAttributes",
    "V1ObjectMeta",
    "V1ObjectReference",
    "V1SubjectAccessReview",
    "V1SubjectAccessReviewSpec",
    "V1TokenReview",
    "V1TokenReviewSpec",
)
"""The names of ``kubernetes.client`` the operator's code uses (a test keeps it complete)."""


def preload(names: tuple[str, ...] = USED) -> None:
    """Resolve each of ``names`` on ``kubernetes.client`` now, importing its module."""
    client = importlib.import_module("kubernetes.client")
    for name in names:
        getattr(client, name)


def _package(name: str) -> types.ModuleType:
    """An empty package ``name`` whose submodules load from the installed package's folder."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        msg = f"{name} is not an installed package"
        raise ModuleNotFoundError(msg, name=name)
    module = types.ModuleType(name, f"{name}, without its __init__ (controller.kubeimports)")
    module.__spec__ = spec
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    module.__file__ = spec.origin
    return module
