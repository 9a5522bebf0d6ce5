"""The stack name, the backend and the secrets provider: what the Pulumi CLI will accept.

Role: refuse at once a ``stack``, ``backend`` and ``secretsProvider`` combination the CLI
would only refuse at run time: a stack name it cannot parse, an organisation other than
``organization`` on a self-managed (DIY) backend, an unknown secrets provider.

Guarantees: messages name the backend's kind (``file://``, ``s3://``, ``local-path``...),
never its URL. When ``backend`` is unset the reconciler checks the operator's default
backend itself with ``check_stack_for_backend``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from reconcile.spec.fields import SPEC, read_string, required_string
from reconcile.spec.model import SpecError
from reconcile.spec.repo_url import URL_SCHEME

DIY_ORGANIZATION: Final = "organization"
"""The only organisation a self-managed (DIY) backend knows: ``organization/project/stack``."""

SECRETS_PROVIDER_KINDS: Final = ("awskms", "azurekeyvault", "gcpkms", "hashivault")
"""Secrets providers given as ``<kind>://<key>`` URLs (besides ``default`` and ``passphrase``).

The kinds ``pulumi stack init --secrets-provider`` accepts.
"""

_STACK_NAME = re.compile(r"(?:[A-Za-z0-9_.][A-Za-z0-9_.-]*/){0,2}[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_DIY_SCHEMES: Final = ("file", "s3", "azblob", "gs")


def check_stack_for_backend(stack: str, backend: str | None) -> str | None:
    """Why ``stack`` cannot work on ``backend`` (a message naming ``spec.stack``), or None.

    Self-managed (DIY) backends (``file://``, ``s3://``, ``azblob://``, ``gs://`` or a local
    path) know one organisation, ``organization``: ``org/stack`` and ``org/project/stack``
    with any other ``org`` fail in the Pulumi CLI. ``backend`` is the effective backend:
    ``spec.backend``, else the operator's default; None (the CLI's default, Pulumi Cloud)
    accepts any organisation. The message names the backend's kind, never its URL.
    """
    kind = _diy_kind(backend)
    parts = stack.split("/")
    if kind is None or len(parts) == 1 or parts[0] == DIY_ORGANIZATION:
        return None
    name = "/".join([DIY_ORGANIZATION, *parts[1:]])
    return (
        f"{SPEC / 'stack'}: organization {parts[0]!r} does not exist on a self-managed"
        f" {kind} backend, whose only organization is {DIY_ORGANIZATION!r}: use {name!r}"
        f" or {parts[-1]!r}, or a Pulumi Cloud backend"
    )


def check_environments_for_backend(
    environments: tuple[str, ...], backend: str | None
) -> str | None:
    """Why ``spec.environment`` cannot work on ``backend`` (a message naming the field), or None.

    Pulumi ESC environments live in Pulumi Cloud: only an http(s) backend (Pulumi Cloud or
    a self-hosted Pulumi Cloud) or none (the CLI's default, Pulumi Cloud) can import them.
    ``backend`` is the effective backend, as for ``check_stack_for_backend``.
    """
    if not environments or backend is None:
        return None
    scheme = URL_SCHEME.match(backend)
    if scheme is not None and scheme["scheme"].lower() in ("http", "https"):
        return None
    kind = _diy_kind(backend) or (f"{scheme['scheme'].lower()}://" if scheme else "local-path")
    return (
        f"{SPEC / 'environment'}: Pulumi ESC environments need a Pulumi Cloud backend, and this"
        f" Stack's is a self-managed {kind} backend, which has no ESC: remove spec.environment"
        " (set the values through config, configRef or secretsRef) or use a Pulumi Cloud backend"
    )


def _diy_kind(backend: str | None) -> str | None:
    """``"file://"`` etc. when ``backend`` is a self-managed backend, else None."""
    if backend is None:
        return None
    scheme = URL_SCHEME.match(backend)
    if scheme is None:
        # No scheme: the CLI reads a path (``pulumi login ./state``) as a local backend.
        return "local-path" if backend.startswith(("/", ".", "~")) else None
    name = scheme["scheme"].lower()
    return f"{name}://" if name in _DIY_SCHEMES else None


def read_stack_and_backend(root: Mapping[str, Any]) -> tuple[str, str | None]:
    """``spec.stack`` and ``spec.backend`` of the spec ``root``, checked together.

    Raises:
        SpecError: on ``spec.stack``: missing, not a stack name, or an organisation the
            backend does not have.
    """
    stack = _stack_name(root)
    backend = read_string(root, SPEC, "backend")
    message = check_stack_for_backend(stack, backend)
    if message is not None:
        raise SpecError(SPEC / "stack", message.removeprefix(f"{SPEC / 'stack'}: "))
    return stack, backend


def _stack_name(root: Mapping[str, Any]) -> str:
    stack = required_string(root, SPEC, "stack")
    if not _STACK_NAME.fullmatch(stack):
        problem = (
            f"{stack!r} is not a stack name: use stack or org/project/stack"
            " (letters, digits, -, _ and .; no leading -)"
        )
        raise SpecError(SPEC / "stack", problem)
    return stack


def read_secrets_provider(root: Mapping[str, Any]) -> str | None:
    """``spec.secretsProvider`` of the spec ``root``: default, passphrase or ``<kind>://<key>``.

    Raises:
        SpecError: on ``spec.secretsProvider``, listing the providers the CLI knows.
    """
    provider = read_string(root, SPEC, "secretsProvider")
    if provider is None or provider in {"default", "passphrase"}:
        return provider
    kind, sep, key = provider.partition("://")
    if not (sep and kind in SECRETS_PROVIDER_KINDS and key):
        urls = ", ".join(f"{k}://..." for k in SECRETS_PROVIDER_KINDS)
        problem = f"unknown secrets provider: use default, passphrase, {urls}"
        raise SpecError(SPEC / "secretsProvider", problem)
    return provider
