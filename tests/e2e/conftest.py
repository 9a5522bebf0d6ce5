"""Fixtures for end-to-end tests: the Stack CRD, a program repository, the operator process.

``operator`` starts the real operator process against the test control plane, watching
the test's namespace, with short poll intervals so that scenarios finish in seconds: the
informer resync (``--resync-period=2``) re-checks every Stack, which polls tracked branches
with ``git ls-remote``; failed updates retry after 1 s, 2 s, 4 s…; one reconcile of the
namespace runs at a time (the default with two workers, stated so that ``tests.e2e.waits``
can rely on it). Every Stack uses a ``file://`` backend in the test's temp directory and a
passphrase from a Secret whose value is a sentinel that must never show up in status,
events, logs or metrics; so must the other sentinels (a secret config value, a token given
as a URL's user name, a git password).

Where it all runs is the ``bed`` (``tests.e2e.beds``): by default the local runner on the
session's control plane; a scenario parametrized with ``RUNNERS`` also runs with
``--runner=pod`` on the node, every run a pod of the operator's image.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed.assets import find_pulumi
from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout, GitServer
from testbed.node import NodeCluster
from testbed.node.tenancy import apply_stack_crd
from testbed.operator import Operator as Operator  # noqa: PLC0414 - re-exported for the tests
from testbed.rbac import operator_kubeconfig
from testbed.waits import wait_for
from tests.conftest import PROGRAMS, STACK_CRD
from tests.e2e.agreement import (
    assert_events_valid,
    assert_metrics_agree,
    assert_warnings_match_conditions,
    forbidden,
)
from tests.e2e.beds import Bed, agent_bed, local_bed, pod_bed
from tests.e2e.waits import locks
from tests.status.invariants import StackWatcher

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
POLL = 0.25  # seconds between two looks at a Stack or its Events while waiting
# Short periods so that scenarios finish in seconds; a test's own flags come later and win.
E2E_FLAGS = (
    "--resync-period=2",
    "--update-retry-base=1",
    "--shutdown-timeout=30",
    "--max-concurrent-reconciles-per-namespace=1",
)


class Sentinels:
    """Secret values that must never leak; each test gets fresh ones.

    ``url_user`` is a token as users put it in a URL's user name
    (``http://<token>@host/repo.git``): a credential too, though it sits in the spec.
    ``git_password`` is a git server's password; a wrong one is made from it, so that
    the scan finds either.
    """

    def __init__(self) -> None:
        """Make random values."""
        self.passphrase = f"sentinel-passphrase-{secrets.token_hex(8)}"
        self.secret_config = f"sentinel-config-{secrets.token_hex(8)}"
        self.url_user = f"sentinel-urluser-{secrets.token_hex(8)}"
        self.git_password = f"sentinel-gitpassword-{secrets.token_hex(8)}"

    def values(self) -> tuple[str, ...]:
        """Every sentinel."""
        return self.passphrase, self.secret_config, self.url_user, self.git_password


FILES_PROGRAMS = {"yaml": "files-yaml", "python": "files"}
"""The files program in each language, by directory under ``testbed/programs``.

Both manage one file with the same config, outputs and project name (``files``). The YAML
one (through the test bed's file provider, which every bed's operator downloads from a
mirror: the ``files_mirror`` on this machine, the ``node_files_mirror`` for run pods) is
what the ``program`` fixture gives: a run costs a Go plugin's start. The Python one (a
dynamic provider: two interpreters per run) is for operators without the mirror and for
the tests that change the program's code.
"""


def files_program(language: str = "python") -> dict[str, str]:
    """The files program's sources, by path in a program repository (under ``app/``)."""
    directory = PROGRAMS / FILES_PROGRAMS[language]
    return {f"app/{p.name}": p.read_text() for p in directory.iterdir() if p.is_file()}


class Program:
    """A git repository holding the files program under ``app/``."""

    def __init__(
        self, server: GitServer | GitHttpServer, work: Path, language: str = "python"
    ) -> None:
        """Create the repository on ``server`` with one commit on main: ``language``'s program.

        Python unless told: it runs anywhere without a plugin mirror; the ``program``
        fixture picks YAML, whose provider every bed's operator has from its mirror.

        Tests push as CI would: over ``git://``, or straight into the bare repository
        (``file://``) when the server is the authenticated HTTP one.
        """
        name = f"program-{secrets.token_hex(4)}"
        self.url = server.create_repo(name)
        push = server.push_url(name) if isinstance(server, GitHttpServer) else self.url
        self.checkout = Checkout(push, work / name)
        self.first = self.checkout.commit(files_program(language), "program")

    def commit(self, message: str = "change", **files: str) -> str:
        """Push a commit touching ``files`` (default: a README) and return its SHA."""
        return self.checkout.commit(files or {"README": message}, message)


class Stacks:
    """Create, read, patch and wait on Stacks in the test namespace."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        backend: Path,
        *,
        program_state: Path | None = None,
        workspace: Mapping[str, Any] | None = None,
        owner: int | None = None,
    ) -> None:
        """Use ``api`` in ``namespace``; Stacks store state under ``backend``.

        ``program_state`` is where programs see ``backend``'s parent (default: where it
        is), ``workspace`` a ``workspaceTemplate`` for every Stack, ``owner`` the uid
        programs write the state as (``tests.e2e.beds``).
        """
        self.api = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.backend = backend
        self.program_state = program_state or backend.parent
        self.workspace = workspace
        self.owner = owner
        self.watcher: StackWatcher | None = None  # set by the fixture

    def manifest(self, name: str, program: Program, **spec: Any) -> dict[str, Any]:
        """A Stack for the files program writing ``<backend>/../<name>.txt``."""
        base: dict[str, Any] = {
            "stack": name,
            "backend": f"file://{self.program_state / self.backend.name}",
            "projectRepo": program.url,
            "branch": "main",
            "repoDir": "app",
            "config": {"path": self.program_path(name), "content": "one"},
            "envRefs": {
                "PULUMI_CONFIG_PASSPHRASE": {
                    "type": "Secret",
                    "secret": {"name": "pulumi-secrets", "key": "passphrase"},
                }
            },
        }
        if self.workspace is not None:
            base["workspaceTemplate"] = json.loads(json.dumps(self.workspace))
        base.update(spec)
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Stack",
            "metadata": {"name": name},
            "spec": {k: v for k, v in base.items() if v is not None},
        }

    def target(self, name: str) -> Path:
        """The file a Stack's program manages, on this machine."""
        return self.backend.parent / f"{name}.txt"

    def program_path(self, name: str) -> str:
        """``target(name)`` as the Stack's program sees it (its ``path`` config)."""
        return str(self.program_state / f"{name}.txt")

    def hand_over(self) -> None:
        """Give what this process wrote into the state to the uid programs write as.

        The state is the backend and the files Stacks manage, ``backend``'s parent.
        """
        if self.owner is None:
            return
        state = self.backend.parent
        for path in [state, *state.rglob("*")]:
            os.chown(path, self.owner, self.owner, follow_symlinks=False)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Stack; the apiserver's answer (the object as stored)."""
        created: dict[str, Any] = self.api.create_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        """Read a Stack."""
        obj: dict[str, Any] = self.api.get_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return obj

    def listing(self) -> list[dict[str, Any]]:
        """Every Stack of the namespace."""
        listing: dict[str, Any] = self.api.list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, self.namespace, PLURAL
        )
        return list(listing["items"])

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch a Stack; the apiserver's answer."""
        patched: dict[str, Any] = self.api.patch_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, self.namespace, PLURAL, name, body
        )
        return patched

    def request_reconcile(self, name: str, value: str) -> None:
        """Annotate a Stack with a reconcile request (``pulumi.com/reconciliation-request``)."""
        self.patch(
            name, {"metadata": {"annotations": {"pulumi.com/reconciliation-request": value}}}
        )

    def delete(self, name: str) -> None:
        """Delete a Stack."""
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def exists(self, name: str) -> bool:
        """Whether the Stack still exists."""
        try:
            self.get(name)
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def secret(self, name: str, data: Mapping[str, str]) -> None:
        """Create a Secret."""
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), data=_encoded(data))
        self.core.create_namespaced_secret(self.namespace, body)

    def update_secret(self, name: str, data: Mapping[str, str]) -> None:
        """Set keys of an existing Secret (merge patch: other keys stay)."""
        self.core.patch_namespaced_secret(name, self.namespace, {"data": _encoded(data)})

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        """A condition of a Stack's status."""
        for condition in self.get(name).get("status", {}).get("conditions", []):
            if condition["type"] == type_:
                found: dict[str, Any] = condition
                return found
        return None

    def wait(
        self, name: str, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = 120
    ) -> dict[str, Any]:
        """Poll the Stack until ``check(stack)``; fail with its status otherwise."""
        seen: dict[str, Any] = {}

        def checked() -> dict[str, Any] | None:
            seen.update(obj=self.get(name))
            return seen["obj"] if check(seen["obj"]) else None

        def status() -> str:
            return "\n" + json.dumps(seen.get("obj", {}).get("status"), indent=1)

        return wait_for(checked, f"{name}: {what}", timeout, POLL, detail=status)

    def wait_gone(self, name: str, timeout: float = 120) -> None:
        """Poll until the Stack no longer exists (its finalizer removed)."""
        wait_for(
            lambda: not self.exists(name),
            f"{name} to be gone",
            timeout,
            POLL,
            detail=lambda: f"it still is: {self.get(name)}",
        )

    def wait_ready(self, name: str, timeout: float = 120) -> dict[str, Any]:
        """Wait until Ready=True for the current generation."""
        return self.wait(name, is_ready, "Ready=True", timeout)

    def wait_reason(
        self, name: str, type_: str, reason: str, timeout: float = 120
    ) -> dict[str, Any]:
        """Wait until condition ``type_`` has ``reason`` for the current generation."""

        def check(obj: dict[str, Any]) -> bool:
            return has_reason(obj, type_, reason)

        return self.wait(name, check, f"{type_} reason {reason}", timeout)

    def wait_seen(self, name: str, type_: str, reason: str, timeout: float = 120) -> dict[str, Any]:
        """Wait until the watch has seen ``type_`` with ``reason``; that version of the Stack.

        For a state the operator may leave again within one poll of ``wait_reason`` (a
        failure retried at once): the watch records every version.
        """
        watcher = self.watcher
        assert watcher is not None, "wait_seen needs the fixture's watcher"

        def seen() -> dict[str, Any] | None:
            found = (o for o in watcher.versions(name) if has_reason(o, type_, reason))
            return dict(next(found, {})) or None

        return wait_for(seen, f"{name}: {type_} reason {reason} seen", timeout, POLL)

    def events(self, name: str) -> list[Any]:
        """Events regarding a Stack, oldest first."""
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return sorted(events, key=lambda e: e.first_timestamp or e.event_time)

    def wait_events(self, name: str, *reasons: str, timeout: float = 30) -> list[Any]:
        """Poll until Events with every one of ``reasons`` exist for a Stack; return them all.

        The recorder posts asynchronously, so an Event may land just after the status
        that caused it: tests read Events through this, never right after a status wait.
        """
        seen: list[Any] = []

        def every_reason() -> list[Any] | None:
            seen[:] = self.events(name)
            return list(seen) if set(reasons) <= {e.reason for e in seen} else None

        def found() -> str:
            return f"Events found: {[e.reason for e in seen]}"

        return wait_for(
            every_reason, f"{sorted(reasons)} Events for {name}", timeout, POLL, detail=found
        )

    def locks(self) -> list[Path]:
        """The lock files on the backend."""
        return locks(self.backend)


def _encoded(data: Mapping[str, str]) -> dict[str, bytes | str]:
    """A Secret's ``data``: each value base64-encoded."""
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


@dataclasses.dataclass(frozen=True)
class PrivateRepo:
    """A program behind HTTP basic authentication, and the account that may read it."""

    server: GitHttpServer
    account: Account
    program: Program


@contextlib.contextmanager
def private_repo(
    stacks: Stacks, sentinels: Sentinels, work: Path, *, right: bool
) -> Iterator[PrivateRepo]:
    """A git server whose one account's password is the sentinel, serving one program.

    Secret ``git-credentials`` (for ``basic_auth``) holds the account with the ``right``
    password or a wrong one (also a sentinel); the server stops on exit.
    """
    account = Account("deployer", sentinels.git_password)
    server = GitHttpServer(work / "git-http", [account])
    server.start()
    try:
        repo = PrivateRepo(server, account, Program(server, work / "checkouts"))
        password = sentinels.git_password if right else f"wrong-{sentinels.git_password}"
        stacks.secret("git-credentials", {"userName": account.username, "password": password})
        yield repo
    finally:
        server.stop()


def basic_auth(secret: str) -> dict[str, Any]:
    """A Stack's ``gitAuth`` reading ``userName`` and ``password`` from Secret ``secret``."""
    keys = ("userName", "password")
    refs = {key: {"type": "Secret", "secret": {"name": secret, "key": key}} for key in keys}
    return {"basicAuth": refs}


def find(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """A condition of ``obj``."""
    for condition in obj.get("status", {}).get("conditions", []):
        if condition["type"] == type_:
            return condition  # type: ignore[no-any-return]
    return None


def has_reason(obj: Mapping[str, Any], type_: str, reason: str) -> bool:
    """Whether condition ``type_`` of ``obj`` has ``reason``, for its current generation."""
    found = find(obj, type_)
    current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
    return current and found is not None and found["reason"] == reason


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Ready=True and the status is about the current generation."""
    ready = find(obj, "Ready")
    status = obj.get("status", {})
    return (
        ready is not None
        and ready["status"] == "True"
        and status.get("observedGeneration") == obj["metadata"]["generation"]
    )


@pytest.fixture
def sentinels() -> Sentinels:
    """Fresh secret sentinel values."""
    return Sentinels()


@pytest.fixture
def runner() -> str:
    """The runner a scenario runs under; ``RUNNERS`` parametrizes it (default ``local``)."""
    return "local"


@pytest.fixture
def bed(runner: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """The scenario's surroundings for ``runner`` (``tests.e2e.beds``)."""
    if runner == "local":
        yield local_bed(request, tmp_path / "state")
        return
    if runner == "agent":
        yield agent_bed(request, tmp_path / "state")
        return
    with pod_bed(request, tmp_path / "state") as found:
        yield found


@pytest.fixture(scope="session")
def node_stack_crd(node_cluster: NodeCluster) -> Path:
    """The Stack CRD on the node's control plane, applied once per session."""
    apply_stack_crd(node_cluster, STACK_CRD)
    return STACK_CRD


@pytest.fixture
def stacks(bed: Bed, sentinels: Sentinels) -> Iterator[Stacks]:
    """Stack helpers in the test namespace, with the passphrase Secret in place.

    A StackWatcher sees every version of every Stack in the namespace; at the end (after
    the operator has stopped) the test fails on any violation of the status rules.
    """
    namespace = bed.namespace
    with bed.control_plane.api_client() as api, StackWatcher(api, namespace) as watcher:
        helper = Stacks(
            api,
            namespace,
            bed.state / "backend",
            program_state=bed.program_state,
            workspace=bed.workspace,
            owner=bed.owner,
        )
        helper.watcher = watcher
        helper.secret("pulumi-secrets", {"passphrase": sentinels.passphrase})
        yield helper
        # Every status the operator wrote, intermediate and final, keeps the status contract's
        # rules 1-18 and 30 (no status rewritten in a loop); every Event is well formed
        # (status contract rule 21) and every Warning matches a condition (rule 19).
        watcher.assert_clean()
        events = helper.core.list_namespaced_event(namespace).items
        # The operator's: under the pod runner, the kubelet's Events about run pods are
        # there too, in the kubelet's own (older) form.
        assert_events_valid(e for e in events if e.involved_object.kind == "Stack")
        assert_warnings_match_conditions(events, watcher)


@pytest.fixture
def program(bed: Bed, tmp_path: Path) -> Program:
    """A fresh repository with the YAML files program, on the bed's git server."""
    return Program(bed.git, tmp_path / "checkouts", "yaml")


@pytest.fixture
def operator_flags() -> tuple[str, ...]:
    """Flags a test module adds to the ``operator`` fixture's (override it there)."""
    return ()


@pytest.fixture
def operator_env() -> dict[str, str]:
    """Environment variables a test module gives the ``operator`` fixture's (override it)."""
    return {}


@pytest.fixture
def operator(
    bed: Bed,
    tmp_path: Path,
    stacks: Stacks,
    sentinels: Sentinels,
    operator_flags: tuple[str, ...],
    operator_env: dict[str, str],
) -> Iterator[Operator]:
    """The operator process (started), stopped afterwards and its output scanned for secrets.

    It authenticates as its ServiceAccount with the single-namespace RBAC of
    ``manifests/`` (a TokenRequest token), so every scenario proves those permissions
    suffice: the test fails on any 401/403 the operator got. While it still runs at the
    end, its metrics must agree with the API and the watcher (status contract rules 23
    and 24). Every test ends by asserting that no sentinel secret appears in any status,
    event, log line or metric, and the process is stopped, whatever failed before.
    """
    namespace = bed.namespace
    op = Operator(
        operator_kubeconfig(bed.control_plane, namespace, watch=[namespace]),
        tmp_path / "operator.log",
        namespaces=[namespace],
        work_dir=tmp_path / "work",
        flags=(
            *E2E_FLAGS,
            f"--leader-election-namespace={namespace}",
            *bed.flags,
            *operator_flags,
        ),
        pulumi_bin=find_pulumi(),
        env=operator_env,
    )
    op.start()
    metrics = ""
    try:
        yield op
        metrics = op.metrics()
        if op.proc is not None and op.proc.poll() is None and stacks.watcher is not None:
            assert_metrics_agree(
                op.metrics, stacks.listing, namespace, stacks.watcher, op.started_at
            )
    finally:  # a failed agreement check must neither leave the process behind nor skip the scan
        op.stop(signal.SIGKILL)
        print(f"--- operator log ({op.log})\n{op.log.read_text()[-6000:]}")  # noqa: T201
        assert_no_leaks(stacks, sentinels, op.log.read_text(), metrics)
    assert not forbidden(metrics), f"the operator's API calls were refused: {forbidden(metrics)}"


def assert_no_leaks(stacks: Stacks, sentinels: Sentinels, *texts: str) -> None:
    """No sentinel secret in any Stack's status, any Event of the namespace, or ``texts``."""
    objects = stacks.api.list_namespaced_custom_object(GROUP, VERSION, stacks.namespace, PLURAL)
    seen = [json.dumps(item.get("status")) for item in objects["items"]]  # type: ignore[index]
    seen += [
        f"{e.reason} {e.message}" for e in stacks.core.list_namespaced_event(stacks.namespace).items
    ]
    found = [leak for text in [*seen, *texts] for leak in leaks(text, sentinels)]
    assert not found, "a secret value leaked into status, events, logs or metrics"


def leaks(text: str, sentinels: Sentinels) -> list[str]:
    """The sentinel values found in ``text``."""
    return [value for value in sentinels.values() if value in text]


def copy_program(dest: Path) -> Path:
    """A copy of the files program (for running the bare CLI next to the operator)."""
    shutil.copytree(PROGRAMS / "files", dest)
    return dest
