"""What the Stack reconciler is made of: each collaborator an interface, injected.

``Collaborators`` holds them all, so the reconciler runs on fakes in unit tests and on the
API server in the operator. The interfaces name only what the reconciler calls:

- ``runner`` (``workspace.runner.Runner``): runs Pulumi;
- ``writer`` (``StatusSink``, e.g. ``status.writer.StatusWriter``): writes ``/status``;
- ``view`` (``ObjectView``, e.g. ``controller.view.ReadYourWritesView``): reads Stacks,
  this process's own writes included;
- ``events`` (``EventPoster``, e.g. ``status.events.EventRecorder``), ``metrics``
  (``UpdateMetrics``, e.g. ``status.metrics.StackMetrics``);
- ``secrets``: a Secret reader for a namespace (``reconcile.refs.SecretReader`` bound to
  an API client); ``source`` (``Source``; ``GitSource`` runs git); ``patcher``
  (``MetadataPatcher``; ``StackPatcher`` patches through the API) for finalizers;
- ``clock`` (``controller.clock.Clock``): ``wall()`` for times written to status,
  ``now()`` for durations and the leader takeover wait;
- ``interrupts`` (``reconcile.interrupts.RunInterrupts``): the runs in flight, interrupted
  when their Stack is deleted (the operator also registers it as an informer handler);
- ``accounts`` (``reconcile.accounts.AccountSource``): reads the ServiceAccount a run pod
  would use, to check the operator lets Stacks use it (None: no run uses one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kubernetes import client

from controller.cache import ObjectKey
from controller.clock import Clock, RealClock
from controller.objectsapi import ObjectsApi
from controller.reconciler import TransientError
from controller.retry import with_retries
from reconcile.accounts import AccountSource
from reconcile.context import Mutation
from reconcile.interrupts import RunInterrupts
from reconcile.resource import GROUP, PLURAL, VERSION
from reconcile.sources import SourceObjects
from reconcile.spec import ResourceRef
from reconcile.spec.model import ConfigMapKeyRef
from workspace.runner import InstallRecord, Runner
from workspace.runner.layout import DirectLayer, SourceLayer
from workspace.source import GitCredentials, resolve_revision


class StatusSink(Protocol):
    """Writes a Stack's status (see ``status.writer.StatusWriter``)."""

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Apply ``mutate`` to the newest status and write it now; False if nothing changed.

        Drops the Stack's pending progress first. Raises ``StatusTooLargeError`` when the
        API server refuses the result as too large.
        """
        ...

    def publish(self, key: ObjectKey, mutate: Mutation) -> None:
        """Queue a progress mutation, replacing the Stack's pending one; never blocks."""
        ...

    def discard(self, key: ObjectKey) -> None:
        """Drop the Stack's pending progress mutation."""
        ...

    def forget(self, key: ObjectKey) -> None:
        """Drop what is kept for a deleted Stack."""
        ...


class ObjectView(Protocol):
    """Reads Stacks: the newest copy this process knows, its own writes included."""

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        """The Stack at ``key``, or None when it does not exist."""
        ...

    def forget(self, key: ObjectKey) -> None:
        """Drop what is kept for a deleted Stack."""
        ...


class EventPoster(Protocol):
    """Posts Events about an object; never raises, never blocks."""

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event of ``type_`` (Normal, Warning) with ``reason`` about ``obj``."""
        ...


class UpdateMetrics(Protocol):
    """The reconciler's own metrics."""

    def observe_update(
        self, operation: str, result: str, seconds: float, changes: Mapping[str, int]
    ) -> None:
        """Record one Pulumi operation's duration and resource changes."""
        ...

    def observe_reconcile(self, result: str, seconds: float) -> None:
        """Record one reconcile's duration."""
        ...

    def observe_installs(
        self, installs: Iterable[InstallRecord], cache_bytes: Mapping[str, int], namespace: str
    ) -> None:
        """Record a run's dependency and plugin steps and its cache's bytes (by ``namespace``)."""
        ...


class SecretSource(Protocol):
    """Resolves a Stack's references (Secret keys, literals, ConfigMap keys) in one namespace."""

    def resolve(self, ref: ResourceRef) -> str:
        """The value ``ref`` points at (``MissingSecretError`` when it is missing)."""
        ...

    def resolve_all(self, refs: Mapping[str, ResourceRef]) -> dict[str, str]:
        """Resolve every ref of a mapping (name → value)."""
        ...

    def config_value(self, ref: ConfigMapKeyRef) -> str:
        """The value of a ``configRef`` entry (``MissingConfigMapError`` when it is missing)."""
        ...


SecretsFor = Callable[[str], SecretSource]
"""A ``SecretSource`` for a namespace; one per pass, so nothing is cached across passes."""


class Source(SourceLayer, Protocol):
    """Where programs come from: a branch's commit, and laying a source out (``SourceLayer``)."""

    def resolve(self, url: str, branch: str, credentials: GitCredentials | None) -> str:
        """The commit ``branch`` points at (``SourceError`` on failure)."""
        ...


class MetadataPatcher(Protocol):
    """Changes a Stack's metadata (its finalizers)."""

    def set_finalizers(self, key: ObjectKey, resource_version: str, finalizers: list[str]) -> None:
        """Replace the finalizers of the Stack at ``resource_version``.

        A Stack that is gone is not an error. Raises ``TransientError`` when the Stack
        changed meanwhile (the watch brings the new version).
        """
        ...


class GitSource(DirectLayer):
    """``Source`` over ``workspace.source``: the real git, Flux artifacts, written projects."""

    def resolve(self, url: str, branch: str, credentials: GitCredentials | None) -> str:
        """``workspace.source.resolve_revision``."""
        return resolve_revision(url, branch, credentials)


class StackPatcher:
    """``MetadataPatcher`` through the API server (a merge patch of ``metadata``)."""

    def __init__(self, api_client: client.ApiClient, field_manager: str | None = None) -> None:
        """Patch Stacks through ``api_client`` as ``field_manager`` (``managedFields``)."""
        self._objects = ObjectsApi(api_client)
        self._field_manager = field_manager

    def set_finalizers(self, key: ObjectKey, resource_version: str, finalizers: list[str]) -> None:
        """See ``MetadataPatcher``; transient API failures are retried in the call."""
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        try:
            with_retries(
                self._objects.patch_namespaced_custom_object,
                GROUP, VERSION, key.namespace, PLURAL, key.name, body,
                field_manager=self._field_manager,
            )  # fmt: skip
        except client.ApiException as err:
            if err.status == 409:  # changed meanwhile: the watch brings the new version
                raise TransientError("the Stack changed while its finalizer was updated") from err
            if err.status != 404:
                raise


@dataclasses.dataclass(frozen=True)
class Collaborators:
    """Everything the reconciler calls (see the module docstring)."""

    runner: Runner
    writer: StatusSink
    view: ObjectView
    events: EventPoster
    metrics: UpdateMetrics
    secrets: SecretsFor
    patcher: MetadataPatcher
    source: Source = dataclasses.field(default_factory=GitSource)
    objects: SourceObjects | None = None
    """The informer caches of Flux sources and Programs (None: none is watched)."""
    clock: Clock = dataclasses.field(default_factory=RealClock)
    interrupts: RunInterrupts = dataclasses.field(default_factory=RunInterrupts)
    accounts: AccountSource | None = None
