"""Resolve a Stack's ResourceRefs (Secret keys and literals) to values.

Only ``Secret`` (in the Stack's own namespace) and ``Literal`` refs exist by the time a
spec reaches here (``reconcile.spec`` refuses ``Env``/``FS`` and cross-namespace refs).
Secrets are read from the API each time they are needed and never cached, logged or
written anywhere: the values go straight into the Pulumi CLI's environment or config.

A missing Secret or key raises ``MissingSecretError``: the Stack is reported Stalled and
the reconciler polls until the Secret appears, so creating it recovers the Stack without
touching its spec.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from kubernetes import client

from controller.retry import with_retries
from reconcile.spec import ResourceRef


class MissingSecretError(Exception):
    """A referenced Secret, or a key in it, does not exist (or is not readable)."""


class SecretReader:
    """Reads Secret keys in one namespace, one API call per Secret per resolve."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        """Read Secrets of ``namespace`` through ``api_client``."""
        self._api = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._secrets: dict[str, Mapping[str, str]] = {}

    def _data(self, name: str) -> Mapping[str, str]:
        if name not in self._secrets:
            try:
                secret = with_retries(self._api.read_namespaced_secret, name, self._namespace)
            except client.ApiException as err:
                if err.status in (403, 404):
                    msg = f'Secret "{name}" not found in namespace "{self._namespace}"'
                    raise MissingSecretError(msg) from None
                raise
            # data values are the base64 text of the API (a str; bytes in some models).
            self._secrets[name] = {
                k: v.decode() if isinstance(v, bytes) else v for k, v in (secret.data or {}).items()
            }
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
