"""Where a Stack's state lives without spec.backend: the default backend, per namespace.

Stacks in two namespaces may share a name (``prod``); on one shared default backend they
would reach the same state. So the operator's ``--default-backend`` is a root under which
each namespace gets its own prefix: ``file:///state`` serves namespace ``team-a`` as
``file:///state/team-a`` and ``s3://bucket?region=eu-west-1`` as
``s3://bucket/team-a?region=eu-west-1``. A Pulumi Cloud (or any HTTP) backend scopes
stacks by organisation and token, not by URL: it is used as it is.

A Stack's own ``spec.backend`` is never rewritten: it names its state exactly.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BLOB_SCHEMES = frozenset({"file", "s3", "gs", "azblob"})
"""Self-managed backends addressed by a bucket or directory URL, which a path prefix scopes."""


def namespaced(default_backend: str, namespace: str) -> str:
    """The default backend's URL for the Stacks of ``namespace`` (see the module docstring)."""
    parts = urlsplit(default_backend)
    if parts.scheme not in BLOB_SCHEMES:
        return default_backend
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{namespace}"))


def local_directory(backend: str) -> Path | None:
    """The directory of a ``file://`` backend (which must exist before the CLI uses it)."""
    parts = urlsplit(backend)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return Path(parts.path)
