"""Where the operator's API client connects, and as whom: a kubeconfig file, or in-cluster.

The client library's kubeconfig loader (``kubernetes.config.kube_config``) imports
oauthlib, requests-oauthlib and requests for the auth providers it supports: about 5 MiB of
resident memory that a kubeconfig with static credentials never uses. ``configuration``
reads such a kubeconfig itself, and hands any other to the library's loader, imported
then. Guarantees:

- a kubeconfig read here gives the ``Configuration`` the library's loader gives for it:
  the current context's (or ``context``'s) cluster ``server``, ``certificate-authority``
  (file or ``-data``), ``insecure-skip-tls-verify``, ``tls-server-name`` and ``proxy-url``,
  and its user's ``client-certificate`` and ``client-key`` (file or ``-data``), ``token`` or
  ``tokenFile``, or ``username`` and ``password``; file paths are relative to the
  kubeconfig's folder;
- a kubeconfig naming anything else for its cluster or user (``exec``, ``auth-provider``,
  impersonation, extensions), or several files (``KUBECONFIG=a:b``), is read by the
  library's loader, exactly as before;
- ``-data`` values are written to files in a private folder (0700, each file 0600),
  removed when the process exits: the client's TLS layer reads certificates and keys
  from files only;
- an unreadable kubeconfig, a missing context, cluster or file raises the library's
  ``ConfigException``, naming it.

``load_api_client`` picks the source: the given kubeconfig, else in-cluster (the
ServiceAccount's token, refreshed as the library's in-cluster loader does), else
``$KUBECONFIG`` or ``~/.kube/config``.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.config.config_exception import ConfigException

STATIC_CLUSTER = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "proxy-url",
    }
)
STATIC_USER = frozenset(
    {
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
    }
)
DEFAULT_KUBECONFIG = "~/.kube/config"


def load_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An API client from ``kubeconfig``, else in-cluster, else ``$KUBECONFIG`` or the default."""
    if kubeconfig:
        return client.ApiClient(configuration(kubeconfig))
    from kubernetes.config import incluster_config  # noqa: PLC0415 - in a pod only

    try:
        incluster_config.load_incluster_config()
    except ConfigException:
        path = os.environ.get("KUBECONFIG", DEFAULT_KUBECONFIG)
        return client.ApiClient(configuration(path))
    return client.ApiClient()


def configuration(path: str, context: str | None = None) -> client.Configuration:
    """The client configuration of ``path``'s ``context`` (its current one by default)."""
    if os.pathsep in path:
        return _by_library(path, context)
    file = Path(path).expanduser().absolute()
    try:
        document = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as err:
        msg = f"Invalid kube-config file {path}: {err}"
        raise ConfigException(msg) from err
    cluster, user = _selected(document, str(file), context)
    if not (cluster.keys() <= STATIC_CLUSTER and user.keys() <= STATIC_USER):
        return _by_library(path, context)
    return _static(cluster, user, file.parent)


def _by_library(path: str, context: str | None) -> client.Configuration:
    """The library's loader: exec plugins, auth providers, merged files."""
    from kubernetes.config import kube_config  # noqa: PLC0415 - its imports are large

    # type.__call__: a fresh Configuration, not a copy of the library's default one.
    config: client.Configuration = type.__call__(client.Configuration)
    kube_config.load_kube_config(config_file=path, context=context, client_configuration=config)
    return config


def _selected(
    document: object, path: str, context: str | None
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The cluster and user entries of ``context`` (default: the current one)."""
    if not isinstance(document, dict):
        msg = f"Invalid kube-config file {path}: not a mapping"
        raise ConfigException(msg)
    name = context or document.get("current-context")
    chosen = _named(document, "contexts", name, path)["context"]
    cluster = _named(document, "clusters", chosen.get("cluster"), path)["cluster"]
    user_name = chosen.get("user")
    users = [u for u in document.get("users") or [] if u.get("name") == user_name]
    user = (users[0].get("user") or {}) if user_name and users else {}
    return cluster, user


def _named(document: Mapping[str, Any], kind: str, name: object, path: str) -> dict[str, Any]:
    """The entry of ``kind`` called ``name``; ConfigException naming both when there is none."""
    for entry in document.get(kind) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    msg = f"Invalid kube-config file {path}: no {kind[:-1]} named {name!r}"
    raise ConfigException(msg)


def _static(
    cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path
) -> client.Configuration:
    """The configuration of a static cluster and user, as the library's loader makes it."""
    config: client.Configuration = type.__call__(client.Configuration)
    token = _token(user, base)
    if token is not None:
        config.api_key["BearerToken"] = token
    if "server" in cluster:
        config.host = str(cluster["server"]).rstrip("/")
        if config.host.startswith("https"):
            config.ssl_ca_cert = _as_file(cluster, "certificate-authority", base)
            config.cert_file = _as_file(user, "client-certificate", base)
            config.key_file = _as_file(user, "client-key", base)
    if "insecure-skip-tls-verify" in cluster:
        config.verify_ssl = not cluster["insecure-skip-tls-verify"]
    if "tls-server-name" in cluster:
        config.tls_server_name = cluster["tls-server-name"]
    if "proxy-url" in cluster:
        config.proxy = cluster["proxy-url"]
    return config


def _token(user: Mapping[str, Any], base: Path) -> str | None:
    """The Authorization header's value: a bearer token (``token`` first), else basic auth."""
    if "token" in user:
        token = user["token"]
    elif "tokenFile" in user:
        token = _read(base / str(user["tokenFile"]))
    else:
        token = None
    if token:
        return f"Bearer {token}"
    if "username" in user and "password" in user:
        pair = f"{user['username']}:{user['password']}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"
    return None


def _as_file(entry: Mapping[str, Any], key: str, base: Path) -> str | None:
    """The path of ``key``'s file: its ``-data`` written out (preferred), else ``key``."""
    if f"{key}-data" in entry:
        data = entry[f"{key}-data"]
        return _private_file(base64.standard_b64decode(data)) if data else None
    if key not in entry:
        return None
    path = os.path.normpath(base / str(entry[key]))
    if not Path(path).is_file():
        msg = f"File does not exist: {path}"
        raise ConfigException(msg)
    return path


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        msg = f"Cannot read {path}: {err}"
        raise ConfigException(msg) from err


_folder: list[str] = []


def _private_file(content: bytes) -> str:
    """A new 0600 file holding ``content`` in the process's private folder (gone at exit)."""
    if not _folder:
        _folder.append(tempfile.mkdtemp(prefix="pso-kubeconfig-"))
        atexit.register(shutil.rmtree, _folder[0], ignore_errors=True)
    fd, name = tempfile.mkstemp(dir=_folder[0])
    with os.fdopen(fd, "wb") as file:
        file.write(content)
    return name
