"""The object an Event is about: client-go's ``ObjectReference``, read from a raw object.

Role: name the involved object of an Event, and say which of its fields make two Events be
"about the same object" for correlation (everything but the ``resourceVersion``, so status
writes between two Events do not split them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kubernetes import client


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectRef:
    """The involved object of an Event, as read from the object at post time."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str
    resource_version: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        """The reference to ``obj`` (a raw API object); KeyError without metadata.name."""
        meta = obj["metadata"]
        return cls(
            api_version=str(obj.get("apiVersion") or ""),
            kind=str(obj.get("kind") or ""),
            name=str(meta["name"]),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def identity(self) -> tuple[str, ...]:
        """What names the object for correlation: everything but the resourceVersion."""
        return (self.api_version, self.kind, self.namespace, self.name, self.uid)

    def to_model(self) -> client.V1ObjectReference:
        """The ``involvedObject`` field."""
        return client.V1ObjectReference(
            api_version=self.api_version or None,
            kind=self.kind or None,
            name=self.name,
            namespace=self.namespace or None,
            uid=self.uid or None,
            resource_version=self.resource_version or None,
        )
