"""Resolve a Stack's ResourceRefs (Secret keys and literals) to values.

Only ``Secret`` (in the Stack's own namespace) and ``Literal`` refs exist by the time a
spec reaches here (``reconcile.spec`` refuses ``Env``/``FS`` and cross-namespace refs).
Secrets are read from the API each time they are needed and never cached, logged or
written anywhere: the values go straight into the Pulumi CLI's environment or config.

A missing Secret or key raises ``MissingSecretError``: the Stack is reported Stalled and
the reconciler polls until the Secret appears, so creating it recovers the Stack without
touching its spec. ``configRef``'s ConfigMap keys are read the same way (one read per
ConfigMap per pass, nothing watched or cached); a missing one raises
``MissingConfigMapError``, a ``MissingSecretError`` with its own reason.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

from kubernetes import client

from controller.coreapi import CoreApi
from controller.retry import with_retries
from reconcile.spec import ResourceRef
from reconcile.spec.model import ConfigMapKeyRef


class MissingSecretError(Exception):
    """A referenced Secret, or a key in it, does not exist (or is not readable)."""


class MissingConfigMapError(MissingSecretError):
    """A ``configRef`` ConfigMap or key does not exist, or its value is not JSON as asked."""


def config_map_value(name: str, data: Mapping[str, str] | None, ref: ConfigMapKeyRef) -> str:
    """The config value ``ref`` reads from ConfigMap ``name``'s ``data`` (None: no such map).

    A ``json`` ref's value must be JSON; it travels compactly encoded, as structured
    ``config`` values do. Raises ``MissingConfigMapError`` naming the ConfigMap and key.
    """
    if data is None:
        msg = f'ConfigMap "{name}" not found'
        raise MissingConfigMapError(msg)
    if ref.key not in data:
        msg = f'ConfigMap "{name}" has no key "{ref.key}"'
        raise MissingConfigMapError(msg)
    value = data[ref.key]
    if not ref.json:
        return value
    try:
        return json.dumps(json.loads(value), separators=(",", ":"))
    except ValueError:
        msg = f'ConfigMap "{name}" key "{ref.key}" is not JSON (the configRef sets json: true)'
        raise MissingConfigMapError(msg) from None


class SecretReader:
    """Reads Secret keys in one namespace, one API call per Secret per resolve."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        """Read Secrets of ``namespace`` through ``api_client``."""
        self._api = CoreApi(api_client)
        self._namespace = namespace
        self._secrets: dict[str, Mapping[str, str]] = {}
        self._config_maps: dict[str, Mapping[str, str] | None] = {}

    def _data(self, name: str) -> Mapping[str, str]:
        if name not in self._secrets:
            try:
                secret = with_retries(self._api.read_namespaced_secret, name, self._namespace)
            except client.ApiException as err:
                if err.status in (403, 404):
                    msg = f'Secret "{name}" not found in namespace "{self._namespace}"'
                    raise MissingSecretError(msg) from None
                raise
            # data values are the base64 text of the API.
            self._secrets[name] = dict(secret.get("data") or {})
        return self._secrets[name]

    def resolve(self, ref: ResourceRef) -> str:
        """The value ``ref`` points at."""
        if ref.literal is not None:
            return ref.literal
        if ref.secret is None:
            msg = "empty reference"
            raise MissingSecretError(msg)
        data = self._data(ref.secret.name)
        if ref.secret.key not in data:
            msg = f'Secret "{ref.secret.name}" has no key "{ref.secret.key}"'
            raise MissingSecretError(msg)
        try:
            return base64.b64decode(data[ref.secret.key]).decode()
        except (binascii.Error, UnicodeDecodeError):
            msg = f'Secret "{ref.secret.name}" key "{ref.secret.key}" is not UTF-8 text'
            raise MissingSecretError(msg) from None

    def resolve_all(self, refs: Mapping[str, ResourceRef]) -> dict[str, str]:
        """Resolve every ref of a mapping (name → value)."""
        return {name: self.resolve(ref) for name, ref in refs.items()}

    def config_value(self, ref: ConfigMapKeyRef) -> str:
        """The value of a ``configRef`` entry (``MissingConfigMapError`` when missing)."""
        if ref.name not in self._config_maps:
            self._config_maps[ref.name] = self._config_map(ref.name)
        return config_map_value(ref.name, self._config_maps[ref.name], ref)

    def _config_map(self, name: str) -> Mapping[str, str] | None:
        try:
            found = with_retries(self._api.read_namespaced_config_map, name, self._namespace)
        except client.ApiException as err:
            if err.status in (403, 404):
                return None
            raise
        return dict(found.get("data") or {})
