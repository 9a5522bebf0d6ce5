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
