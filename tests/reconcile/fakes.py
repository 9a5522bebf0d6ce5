"""In-memory collaborators of the Stack reconciler, for unit tests on a ``FakeClock``.

``Cluster`` holds the Stacks as plain dicts; ``FakeWriter`` and ``FakeView`` write and read
them the way ``StatusWriter`` and ``ReadYourWritesView`` do (an update drops the Stack's
pending progress; an unchanged status costs no write; every write bumps the
resourceVersion). ``FakeRunner`` plays scripted outcomes and records every request;
``FakeSource``, ``FakeSecrets``, ``FakeEvents``, ``FakeMetrics`` and ``FakePatcher`` stand
in for git, Secrets, the Event recorder, metrics and the finalizer patch.
"""

from __future__ import annotations

import base64
import collections
import copy
import dataclasses
import datetime
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from controller.cache import ObjectKey
from controller.clock import FakeClock
from controller.reconciler import TransientError
from reconcile.context import Mutation
from reconcile.refs import MissingSecretError, config_map_value
from reconcile.spec import ResourceRef
from reconcile.spec.model import ConfigMapKeyRef
from reconcile.tenancy import RUNNER_LABEL
from status.writer import StatusTooLargeError
from workspace.runner import (
    Detached,
    ErrorKind,
    InstallRecord,
    Outcome,
    Progress,
    ProjectInfo,
    RunnerTraits,
    RunResult,
    UpdateRequest,
)
from workspace.source import GitCredentials, ProgramDirError, SourceError

ProgressCallback = Callable[[Progress], None]
Script = Callable[[UpdateRequest, ProgressCallback, threading.Event], RunResult]


class Cluster:
    """The Stacks of the fake API server, by key; every change bumps the resourceVersion."""

    def __init__(self) -> None:
        """No Stacks yet."""
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self._version = 0

    def put(self, obj: dict[str, Any]) -> ObjectKey:
        """Store ``obj`` (its metadata names it) as a new version."""
        key = ObjectKey(obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.objects[key] = obj
        self.bump(key)
        return key

    def bump(self, key: ObjectKey) -> None:
        """Give the Stack at ``key`` a new resourceVersion."""
        self._version += 1
        self.objects[key]["metadata"]["resourceVersion"] = str(self._version)


class FakeView:
    """``ObjectView`` over a ``Cluster``: copies, so nobody changes the stored object."""

    def __init__(self, cluster: Cluster) -> None:
        """Read ``cluster``."""
        self._cluster = cluster
        self.forgotten: list[ObjectKey] = []

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        """A copy of the Stack, or None."""
        obj = self._cluster.objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def forget(self, key: ObjectKey) -> None:
        """Record that the reconciler let go of ``key``."""
        self.forgotten.append(key)


class FakeWriter:
    """``StatusSink`` over a ``Cluster``, like ``StatusWriter``.

    ``update`` drops the Stack's pending progress, applies the mutation to a copy of the
    stored status and stores the result if it differs. ``publish`` keeps the newest
    progress mutation per Stack until ``flush`` applies it (the writer's thread, by hand).
    ``too_large`` makes the next update whose status holds that field fail as the API
    server does with a status too large to store. ``reasons`` collects every condition
    reason any write stored.
    """

    def __init__(self, cluster: Cluster) -> None:
        """Write into ``cluster``."""
        self._cluster = cluster
        self.pending: dict[ObjectKey, Mutation] = {}
        self.writes: list[dict[str, Any]] = []
        self.reasons: set[str] = set()
        self.forgotten: list[ObjectKey] = []
        self.too_large: str | None = None

    def update(self, key: ObjectKey, mutate: Mutation) -> bool:
        """Apply ``mutate`` now; False if the status did not change."""
        self.discard(key)
        return self._apply(key, mutate)

    def publish(self, key: ObjectKey, mutate: Mutation) -> None:
        """Keep ``mutate`` as the Stack's pending progress (replacing an older one)."""
        self.pending[key] = mutate

    def discard(self, key: ObjectKey) -> None:
        """Drop the Stack's pending progress."""
        self.pending.pop(key, None)

    def forget(self, key: ObjectKey) -> None:
        """Record that the reconciler let go of ``key``."""
        self.forgotten.append(key)

    def flush(self, key: ObjectKey) -> bool:
        """Write the Stack's pending progress, as the writer's thread would; False if none."""
        mutate = self.pending.pop(key, None)
        return mutate is not None and self._apply(key, mutate)

    def _apply(self, key: ObjectKey, mutate: Mutation) -> bool:
        obj = self._cluster.objects.get(key)
        if obj is None:
            return False
        old = copy.deepcopy(obj.get("status") or {})
        new = mutate(copy.deepcopy(old))
        if self.too_large is not None and self.too_large in new:
            self.too_large = None
            raise StatusTooLargeError(status=500, reason="etcdserver: request is too large")
        if new == old:
            return False
        obj["status"] = new
        self._cluster.bump(key)
        self.writes.append(copy.deepcopy(new))
        self.reasons.update(c["reason"] for c in new.get("conditions") or ())
        return True


@dataclasses.dataclass(frozen=True)
class Posted:
    """One Event the reconciler posted."""

    type_: str
    reason: str
    message: str


class FakeEvents:
    """``EventPoster`` that keeps what was posted."""

    def __init__(self) -> None:
        """Nothing posted yet."""
        self.posted: list[Posted] = []

    def post(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Keep the Event (``obj`` must be a Stack)."""
        assert obj["metadata"]["name"]
        self.posted.append(Posted(type_, reason, message))

    @property
    def reasons(self) -> list[str]:
        """The reasons posted, in order."""
        return [event.reason for event in self.posted]


class FakeMetrics:
    """``UpdateMetrics`` that keeps the observations."""

    def __init__(self) -> None:
        """Nothing observed yet."""
        self.updates: list[tuple[str, str]] = []
        self.reconciles: list[str] = []
        self.installs: list[tuple[InstallRecord, str]] = []
        self.cache_bytes: dict[tuple[str, str], int] = {}

    def observe_update(
        self, operation: str, result: str, seconds: float, changes: Mapping[str, int]
    ) -> None:
        """Keep ``(operation, result)``."""
        assert seconds >= 0
        assert all(n >= 0 for n in changes.values())
        self.updates.append((operation, result))

    def observe_reconcile(self, result: str, seconds: float) -> None:
        """Keep ``result``."""
        assert seconds >= 0
        self.reconciles.append(result)

    def observe_installs(
        self, installs: Iterable[InstallRecord], cache_bytes: Mapping[str, int], namespace: str
    ) -> None:
        """Keep each step with ``namespace``, and the bytes by (namespace, cache)."""
        self.installs += [(record, namespace) for record in installs]
        self.cache_bytes |= {(namespace, cache): size for cache, size in cache_bytes.items()}


class FakeSecrets:
    """Secrets and ConfigMaps by namespace and name (plain text values).

    ``for_namespace`` is the factory; ``config_maps`` holds the ConfigMaps ``configRef`` reads.
    """

    def __init__(self) -> None:
        """No Secrets or ConfigMaps yet."""
        self.data: dict[tuple[str, str], dict[str, str]] = {}
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}

    def for_namespace(self, namespace: str) -> _SecretReader:
        """A reader of ``namespace``'s Secrets, like ``reconcile.refs.SecretReader``."""
        return _SecretReader(self, namespace)


class FakeAccounts:
    """ServiceAccounts' labels by namespace and name, read as ``reconcile.accounts`` does.

    An account not in ``accounts`` exists and is opted in (labelled ``RUNNER_LABEL=true``),
    so tests that are not about accounts may name any; ``accounts`` sets an account's
    labels, and ``None`` there means it does not exist. ``reads`` counts the lookups.
    """

    def __init__(self) -> None:
        """Every account opted in; none read yet."""
        self.accounts: dict[tuple[str, str], dict[str, str] | None] = {}
        self.reads = 0

    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The account's labels (None: it does not exist)."""
        self.reads += 1
        return self.accounts.get((namespace, name), {RUNNER_LABEL: "true"})


@dataclasses.dataclass
class _SecretReader:
    secrets: FakeSecrets
    namespace: str

    def resolve(self, ref: ResourceRef) -> str:
        if ref.literal is not None:
            return ref.literal
        assert ref.secret is not None
        data = self.secrets.data.get((self.namespace, ref.secret.name))
        if data is None:
            msg = f'Secret "{ref.secret.name}" not found in namespace "{self.namespace}"'
            raise MissingSecretError(msg)
        if ref.secret.key not in data:
            msg = f'Secret "{ref.secret.name}" has no key "{ref.secret.key}"'
            raise MissingSecretError(msg)
        # round-trip through base64 as the API does, so a value survives it intact
        return base64.b64decode(base64.b64encode(data[ref.secret.key].encode())).decode()

    def resolve_all(self, refs: Mapping[str, ResourceRef]) -> dict[str, str]:
        return {name: self.resolve(ref) for name, ref in refs.items()}

    def config_value(self, ref: ConfigMapKeyRef) -> str:
        data = self.secrets.config_maps.get((self.namespace, ref.name))
        return config_map_value(ref.name, data, ref)


class FakeSource:
    """``Source``: branches point at ``commits[branch]``; failures are scripted.

    ``resolve_error``/``checkout_error`` are raised by every call until reset;
    ``missing_dirs`` are ``repoDir`` values the checkout does not contain.
    """

    def __init__(self) -> None:
        """Branch ``main`` at commit ``a1…``."""
        self.commits = {"main": "a1" * 20}
        self.resolve_error: SourceError | None = None
        self.checkout_error: SourceError | None = None
        self.missing_dirs: set[str] = set()
        self.checkouts: list[tuple[str, str, GitCredentials | None]] = []
        self.shallow_checkouts: list[bool] = []
        self.fetch_error: SourceError | None = None
        self.fetches: list[tuple[str, str]] = []
        self.projects: list[str] = []
        self.resolved_with: list[GitCredentials | None] = []

    def resolve(self, url: str, branch: str, credentials: GitCredentials | None) -> str:
        """The commit of ``branch`` (the credentials are recorded)."""
        self.resolved_with.append(credentials)
        assert url
        if self.resolve_error is not None:
            raise self.resolve_error
        return self.commits[branch]

    def checkout(
        self,
        url: str,
        work_dir: Path,
        commit: str,
        credentials: GitCredentials | None,
        *,
        shallow: bool = True,
    ) -> None:
        """Record the checkout (``shallow`` in ``shallow_checkouts``) and create ``work_dir``."""
        if self.checkout_error is not None:
            raise self.checkout_error
        self.checkouts.append((url, commit, credentials))
        self.shallow_checkouts.append(shallow)
        work_dir.mkdir(parents=True, exist_ok=True)

    def fetch_artifact(self, url: str, digest: str, work_dir: Path) -> None:
        """Record the fetch (``fetches``) and create ``work_dir``; ``fetch_error`` fails it."""
        if self.fetch_error is not None:
            raise self.fetch_error
        self.fetches.append((url, digest))
        work_dir.mkdir(parents=True, exist_ok=True)

    def write_project(self, work_dir: Path, project: str) -> None:
        """Write ``Pulumi.yaml`` into ``work_dir`` (recorded in ``projects``)."""
        self.projects.append(project)
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "Pulumi.yaml").write_text(project)

    def program_dir(
        self, checkout: Path, repo_dir: str | None, field: str = "spec.repoDir"
    ) -> Path:
        """``checkout/repo_dir``, unless it is one of ``missing_dirs``."""
        if repo_dir in self.missing_dirs:
            msg = f"{field}: {repo_dir!r} does not exist in the commit"
            raise ProgramDirError(msg)
        return checkout / (repo_dir or ".")


class FakeSourceObjects:
    """``SourceObjects``: Flux sources and Programs by kind and key; ``served`` kinds."""

    def __init__(self) -> None:
        """Every kind served, no object yet."""
        self.objects: dict[tuple[str, ObjectKey], dict[str, Any]] = {}
        self.unserved: set[str] = set()

    def served(self, kind: str) -> bool:
        """Whether ``kind`` is served (not in ``unserved``)."""
        return kind not in self.unserved

    def get(self, kind: str, key: ObjectKey) -> Mapping[str, Any] | None:
        """The object, or None."""
        return self.objects.get((kind, key))


class FakePatcher:
    """``MetadataPatcher`` over a ``Cluster``; ``conflicts`` answers that many with a 409."""

    def __init__(self, cluster: Cluster) -> None:
        """Patch Stacks in ``cluster``."""
        self._cluster = cluster
        self.conflicts = 0
        self.patches: list[list[str]] = []

    def set_finalizers(self, key: ObjectKey, resource_version: str, finalizers: list[str]) -> None:
        """Set the finalizers if the version matches; a deleted Stack is released."""
        obj = self._cluster.objects.get(key)
        if obj is None:
            return
        if self.conflicts or obj["metadata"]["resourceVersion"] != resource_version:
            self.conflicts = max(0, self.conflicts - 1)
            raise TransientError("the Stack changed while its finalizer was updated")
        self.patches.append(list(finalizers))
        obj["metadata"]["finalizers"] = list(finalizers)
        if obj["metadata"].get("deletionTimestamp") and not finalizers:
            del self._cluster.objects[key]  # the API server lets it go
        else:
            self._cluster.bump(key)


class FakeRunner:
    """``Runner`` playing scripted outcomes, one per ``run``/``destroy`` call, in order.

    A script item is an ``Outcome``, a ``Detached`` or a function ``(request, on_progress,
    stop) -> Outcome | Detached``. ``calls`` records ``(operation, request)``; ``stale_lock`` and
    ``cancellable`` answer ``clear_stale_lock`` and ``cancel``, ``attached`` ``attach``;
    ``prepare`` has nothing to do. Its ``traits`` are the local runner's (the harness's
    settings say which traits the reconciler goes by).
    """

    traits: ClassVar[RunnerTraits] = RunnerTraits()

    def __init__(self) -> None:
        """Nothing scripted."""
        self.script: collections.deque[RunResult | Script] = collections.deque()
        self.calls: list[tuple[str, UpdateRequest]] = []
        self.stale_lock = False
        self.cancellable = False
        self.attached: RunResult | None = None

    def then(self, *items: RunResult | Script) -> None:
        """Play ``items`` on the next calls."""
        self.script.extend(items)

    def run(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """The next scripted outcome."""
        return self._play("run", request, on_progress, stop)

    def destroy(
        self, request: UpdateRequest, *, on_progress: ProgressCallback, stop: threading.Event
    ) -> RunResult:
        """The next scripted outcome."""
        return self._play("destroy", request, on_progress, stop)

    def clear_stale_lock(self, request: UpdateRequest) -> bool:
        """``stale_lock``, once (a cleared lock is gone)."""
        self.calls.append(("clear_stale_lock", request))
        cleared, self.stale_lock = self.stale_lock, False
        return cleared

    def cancel(self, request: UpdateRequest) -> bool:
        """``cancellable``, once."""
        self.calls.append(("cancel", request))
        cancelled, self.cancellable = self.cancellable, False
        return cancelled

    def prepare(self, request: UpdateRequest) -> Outcome | None:
        """Nothing to prepare (recorded)."""
        self.calls.append(("prepare", request))
        return None

    def attach(
        self,
        request: UpdateRequest,
        *,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult | None:
        """``attached`` (None: no operation outlived the operator), once (recorded)."""
        del on_progress, stop
        self.calls.append(("attach", request))
        attached, self.attached = self.attached, None
        return attached

    def locks(self, request: UpdateRequest) -> list[Any] | None:
        """This runner cannot see locks."""
        assert request.stack
        return None

    @property
    def operations(self) -> list[str]:
        """The names of the calls so far."""
        return [name for name, _ in self.calls]

    def _play(
        self,
        name: str,
        request: UpdateRequest,
        on_progress: ProgressCallback,
        stop: threading.Event,
    ) -> RunResult:
        self.calls.append((name, request))
        assert self.script, f"unexpected {name}: nothing scripted"
        item = self.script.popleft()
        if isinstance(item, (Outcome, Detached)):
            return item
        return item(request, on_progress, stop)


def outcome(
    clock: FakeClock,
    error: ErrorKind = ErrorKind.NONE,
    *,
    operation: str = "up",
    message: str = "",
    changes: Mapping[str, int] | None = None,
    outputs: Mapping[str, Any] | None = None,
    project: ProjectInfo | None = None,
) -> Outcome:
    """An outcome that started and ended now on ``clock``; ``NONE`` means it succeeded."""
    now: datetime.datetime = clock.wall()
    return Outcome(
        operation=operation,  # type: ignore[arg-type]
        succeeded=error is ErrorKind.NONE,
        error=error,
        message=message,
        outputs=dict(outputs or {}),
        resource_changes=dict(changes if changes is not None else {"create": 1}),
        permalink=None,
        started=now,
        ended=now,
        project=project,
    )
