"""Every long-lived loop of the operator survives every exception a client call can raise.

A table: each loop (informer, source discovery, leader election acquiring and renewing,
the acknowledger, the status writer's progress thread, the metrics reviews, a run pod's
watch, the event recorder) by each kind of failure (``tests.controller.client_failures``).
The loop runs against a fake API (``FakeApi`` behind a real ``ApiClient``, or a fake of
the seam it calls) on a ``FakeClock``; the API fails every call with the failure until the
loop has failed at least twice (it survived one and came back after its backoff), then
answers again. The loop must still run, do its job again, and have logged the streak once
(``controller.failures``).

Then the manager: the operator's own wiring (``pulumi_stack_operator.wiring``) on a fake API
broken for every thread that calls it, and ``/healthz`` answering 200 once it answers
again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest
import structlog
from kubernetes import client
from prometheus_client import CollectorRegistry

from controller import retry
from controller.cache import ObjectKey, Store, freeze_object
from controller.clock import FAKE_EPOCH, FakeClock
from controller.informer import CustomObjectsListWatcher, Informer
from controller.leaderelection import LeaderElectionConfig, LeaderElector
from controller.manager import Manager
from controller.metrics_server import Certificates, Reviewer, SecureMetricsServer
from controller.view import ReadYourWritesView
from pulumi_stack_operator.config import parse_config
from pulumi_stack_operator.source_watch import SourceKind, SourceWatch
from pulumi_stack_operator.wiring import STACKS, stack_reconciler_factory
from reconcile.acknowledge import Acknowledger
from status import conditions as cond
from status.events import EventRecorder
from status.writer import StatusWriter
from testbed.process import free_port
from testbed.scraper import get_metrics
from testbed.waits import wait_for
from tests.controller.client_failures import FAILURES, Collection, FakeApi, Fault, response, status
from tests.controller.test_metrics_server import probe_registry
from tests.workspace.runner.pod.test_runner import JOB, FakePods, runner
from workspace.runner.pod.api import PodChanges
from workspace.runner.pod.spec import run_pod

TIMEOUT = 30.0  # real seconds; only a failing test waits this long
NS = "ns"
STACKS_PATH = f"/apis/pulumi.com/v1/namespaces/{NS}/stacks"
FLUX_GROUP = "source.toolkit.fluxcd.io"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


@pytest.fixture(autouse=True)
def reachable() -> Iterator[None]:
    """Each test starts (and leaves) the process-wide memory of outages empty."""
    retry.REACHABILITY.forget()
    yield
    retry.REACHABILITY.forget()


def drive(clock: FakeClock, condition: Callable[[], object], what: str, step: float) -> None:
    """Step ``clock`` by ``step`` until ``condition`` holds (looked at between the steps)."""

    def stepped() -> bool:
        if condition():
            return True
        clock.step(step)
        return bool(condition())

    wait_for(stepped, what, TIMEOUT, interval=0.005)


def stack(name: str, generation: int = 1) -> dict[str, Any]:
    """A Stack in ``NS`` whose generation its status has not seen."""
    metadata = {"namespace": NS, "name": name, "generation": generation}
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack", "metadata": metadata, "status": {}}


class Loop(Protocol):
    """One long-lived loop, started against a fake API, and how to tell it works."""

    step: float  # fake seconds per step of the clock while driving it
    warm: bool  # whether it starts against a working API (else one that already fails)

    def start(self) -> None:
        """Start the loop (the API may already be broken)."""

    def provoke(self) -> None:
        """Give the loop a reason to call the API now (called again while it fails)."""

    def did_its_job(self) -> bool:
        """After the API answers again: the loop's work is done (may feed it first)."""

    def alive(self) -> bool:
        """The loop's thread runs."""

    def stop(self) -> None:
        """Stop the loop."""


@dataclasses.dataclass
class Bed:
    """What every loop runs on: a fake API, its client and a fake clock."""

    api: FakeApi
    client: client.ApiClient
    clock: FakeClock
    tmp_path: Path


class InformerLoop:
    """An informer of Stacks: its job is to see a Stack created after the outage."""

    step, warm = 5.0, True

    def __init__(self, bed: Bed) -> None:
        """An informer over the fake's Stacks."""
        self.stacks = Collection(bed.api, STACKS_PATH)
        self.api = bed.api
        self.seen: set[str] = set()
        watcher = CustomObjectsListWatcher(bed.client, "pulumi.com", "v1", "stacks", NS)
        self.informer = Informer([watcher], self, clock=bed.clock)
        self.fed = False

    def on_add(self, obj: Mapping[str, Any]) -> None:
        """Remember the Stack."""
        self.seen.add(obj["metadata"]["name"])

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        """Remember the Stack."""
        del old
        self.seen.add(new["metadata"]["name"])

    def on_delete(self, obj: object) -> None:
        """Nothing to do."""

    def start(self) -> None:
        """Run the informer."""
        self.informer.run()

    def provoke(self) -> None:
        """Drop its watch: it must list or watch again."""
        self.api.cut_watches()

    def did_its_job(self) -> bool:
        """A Stack created once it watches again is seen."""
        if not self.fed and self.api.watching():
            self.stacks.add(stack("after"))
            self.fed = True
        return "after" in self.seen

    def alive(self) -> bool:
        """Every reflector runs."""
        return self.informer.alive()

    def stop(self) -> None:
        """Stop without waiting (the fake's close ends the watches)."""
        self.informer.stop(0.0)


class DiscoveryLoop:
    """Source discovery of a Flux kind: its job is to watch the kind once it is served."""

    step, warm = 30.0, False

    def __init__(self, bed: Bed) -> None:
        """Discovery of GitRepository v1 on the fake, which serves it."""
        Collection(bed.api, f"/apis/{FLUX_GROUP}/v1/namespaces/{NS}/gitrepositories")
        resources = {
            "kind": "APIResourceList",
            "groupVersion": f"{FLUX_GROUP}/v1",
            "resources": [
                {
                    "name": "gitrepositories",
                    "singularName": "gitrepository",
                    "namespaced": True,
                    "kind": "GitRepository",
                    "verbs": ["get", "list", "watch"],
                }
            ],
        }
        bed.api.route("GET", f"/apis/{FLUX_GROUP}/v1", lambda _m, _k: response(200, resources))
        kind = SourceKind("GitRepository", FLUX_GROUP, ("v1",), "gitrepositories")
        self.watch = SourceWatch(bed.client, [NS], Store(), lambda _key: None, bed.clock, (kind,))

    def start(self) -> None:
        """Start looking."""
        self.watch.run()

    def provoke(self) -> None:
        """Discovery looks by itself every period."""

    def did_its_job(self) -> bool:
        """The kind is watched and its informer synced."""
        return self.watch.served("GitRepository")

    def alive(self) -> bool:
        """Discovery (or, once done, every informer) runs."""
        return self.watch.alive()

    def stop(self) -> None:
        """Stop without waiting."""
        self.watch.stop(0.0)


class Leases:
    """The Lease API of ``NS`` on a fake API: get, create, and replace by resourceVersion."""

    def __init__(self, api: FakeApi) -> None:
        """No Lease yet."""
        self.lease: dict[str, Any] | None = None
        self.writes = 0
        self._lock = threading.Lock()
        api.route("GET", LEASES + "/(?P<name>[^/]+)", self._get)
        api.route("POST", LEASES, self._create)
        api.route("PUT", LEASES + "/(?P<name>[^/]+)", self._replace)

    def _get(self, match: Any, kwargs: Mapping[str, Any]) -> Any:
        del match, kwargs
        with self._lock:
            return status(404, "no lease") if self.lease is None else response(200, self.lease)

    def _create(self, match: Any, kwargs: Mapping[str, Any]) -> Any:
        del match
        with self._lock:
            if self.lease is not None:
                return status(409, "exists")
            return response(201, self._store(dict(kwargs["body"])))

    def _replace(self, match: Any, kwargs: Mapping[str, Any]) -> Any:
        del match
        body = dict(kwargs["body"])
        with self._lock:
            assert self.lease is not None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                return status(409, "conflict")
            return response(200, self._store(body))

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        body["metadata"] = {**body["metadata"], "resourceVersion": str(self.writes)}
        self.lease = body
        return body


class ElectionLoop:
    """Leader election: its job is to hold the Lease, renewed after the outage."""

    def __init__(self, bed: Bed, *, renewing: bool) -> None:
        """An elector (60/40/5 s) on the fake's Leases; ``renewing``: it leads first."""
        self.leases = Leases(bed.api)
        self.api, self.clock, self.renewing = bed.api, bed.clock, renewing
        # Renewing: one retry period per step, so that the outage stays within the
        # renew deadline (the elector is the only waiter on this clock).
        self.step = 5.0 if renewing else 30.0
        self.warm = renewing
        self.elector = LeaderElector(
            LeaderElectionConfig("lease", NS, "me"), bed.client, clock=bed.clock
        )
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.writes_at_heal = 0

    def _run(self) -> None:
        self.elector.run(self.stopping, lambda: None, lambda: None)

    def start(self) -> None:
        """Run the elector; when ``renewing``, until it leads."""
        self.thread.start()
        if self.renewing:
            assert self.clock.wait_for_waiters(1)
            assert self.elector.is_leader()

    def provoke(self) -> None:
        """The elector tries every retry period by itself; wait until it waits again."""
        self.clock.wait_for_waiters(1)
        self.writes_at_heal = self.leases.writes

    def did_its_job(self) -> bool:
        """It leads, with a Lease written after the outage."""
        self.clock.wait_for_waiters(1)
        return self.elector.is_leader() and self.leases.writes > self.writes_at_heal

    def alive(self) -> bool:
        """The elector runs (and, renewing, still leads)."""
        return self.thread.is_alive() and (self.elector.is_leader() or not self.renewing)

    def stop(self) -> None:
        """Stop the elector (it releases the Lease) and wait for it."""
        self.stopping.set()
        self.thread.join(TIMEOUT)


def status_view(stacks: Collection) -> ReadYourWritesView:
    """A view whose cache follows ``stacks`` as an informer's would (read at each get)."""

    class Live(Store):
        def get(self, key: ObjectKey) -> Any:
            obj = stacks.objects.get(key.name)
            return None if obj is None else freeze_object(obj)

    return ReadYourWritesView(Live())


class AcknowledgerLoop:
    """The acknowledger, writing through a real StatusWriter: a new Stack is acknowledged."""

    step, warm = 10.0, True

    def __init__(self, bed: Bed) -> None:
        """An active acknowledger over the fake's Stacks."""
        self.stacks = Collection(bed.api, STACKS_PATH)
        view = status_view(self.stacks)
        self.writer = StatusWriter(
            bed.client, view, "pulumi.com", "v1", "stacks", CollectorRegistry(),
            clock=bed.clock, retry_budget=1.0,
        )  # fmt: skip
        self.ack = Acknowledger(self.writer, view, active=lambda: True, clock=bed.clock)
        self.offered = 0
        self.fed = False

    def start(self) -> None:
        """Nothing more to start."""

    def provoke(self) -> None:
        """Offer one more Stack to acknowledge."""
        self.offered += 1
        self.ack.on_add(self.stacks.add(stack(f"during-{self.offered}")))

    def did_its_job(self) -> bool:
        """A Stack offered after the outage is acknowledged."""
        if not self.fed:
            self.ack.on_add(self.stacks.add(stack("after")))
            self.fed = True
        return bool(self.stacks.objects["after"]["status"].get("observedGeneration"))

    def alive(self) -> bool:
        """The acknowledger's thread runs."""
        return self.ack.alive()

    def stop(self) -> None:
        """Close the acknowledger and the writer."""
        self.writer.close(0.0)
        self.ack.close(0.0)


def progress(message: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A progress intent whose Reconciling message is ``message``."""
    return lambda s: cond.progressing(s, 1, message, FAKE_EPOCH)


class WriterLoop:
    """The status writer's progress thread: progress published after the outage lands."""

    step, warm = 10.0, True

    def __init__(self, bed: Bed) -> None:
        """A writer over the fake's one Stack, with no in-call retries."""
        self.stacks = Collection(bed.api, STACKS_PATH)
        self.stacks.add(stack("s"))
        self.writer = StatusWriter(
            bed.client, status_view(self.stacks), "pulumi.com", "v1", "stacks",
            CollectorRegistry(), min_interval=1.0, clock=bed.clock, retry_budget=0.0,
        )  # fmt: skip
        self.fed = False

    def start(self) -> None:
        """The thread starts with the first publish."""
        self.writer.publish(ObjectKey(NS, "s"), progress("before"))

    def provoke(self) -> None:
        """Publish progress again, unless some is still pending."""
        if not self.writer.pending():
            self.writer.publish(ObjectKey(NS, "s"), progress("during"))

    def did_its_job(self) -> bool:
        """Progress published after the outage is written."""
        if not self.fed:
            self.writer.publish(ObjectKey(NS, "s"), progress("after"))
            self.fed = True
        reconciling = cond.get_condition(self.stacks.objects["s"]["status"], cond.RECONCILING)
        return reconciling is not None and reconciling["message"] == "after"

    def alive(self) -> bool:
        """The progress thread runs."""
        return self.writer.alive() and self.writer._thread is not None  # noqa: SLF001

    def stop(self) -> None:
        """Close the writer."""
        self.writer.close(0.0)


class ReviewLoop:
    """The HTTPS metrics server's reviews: a token the API server allows is served again."""

    step, warm = 1.0, True

    def __init__(self, bed: Bed, certificates: Certificates) -> None:
        """A metrics server reviewing every token through the fake, which allows them."""
        allowed = {"spec": {"user": "prometheus"}, "status": {"allowed": True}}
        user = {
            "spec": {"token": "token"},
            "status": {"authenticated": True, "user": {"username": "prometheus"}},
        }
        bed.api.route(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            lambda _m, _k: response(201, user),
        )
        bed.api.route(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            lambda _m, _k: response(201, allowed),
        )
        reviewer = Reviewer(bed.client, bed.clock)
        self.server = SecureMetricsServer(
            ("127.0.0.1", 0), probe_registry(), reviewer, certificates
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.answers: list[int] = []

    def start(self) -> None:
        """Serve."""
        self.thread.start()

    def provoke(self) -> None:
        """A scrape: answered 503 while the reviews fail."""
        self.answers.append(get_metrics(self.url, "token", timeout=TIMEOUT)[0])
        assert self.answers[-1] == 503

    def did_its_job(self) -> bool:
        """A scrape is served."""
        return get_metrics(self.url, "token", timeout=TIMEOUT)[0] == 200

    def alive(self) -> bool:
        """The server runs."""
        return self.thread.is_alive()

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


class FailingPods(FakePods):
    """``FakePods`` whose watch and read fail while the fake API is broken."""

    def __init__(self, api: FakeApi) -> None:
        """Fail through ``api.gate()``."""
        super().__init__()
        self.api = api

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        """A watch, unless broken."""
        self.api.gate()
        return super().list_namespaced_pod(namespace, **kwargs)

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        """The pod, unless broken."""
        self.api.gate()
        return super().read_namespaced_pod(name, namespace, **kwargs)


class PodWatchLoop:
    """A run pod's watch: the pod's state after the outage is published."""

    step, warm = 2.0, True

    def __init__(self, bed: Bed) -> None:
        """A running run pod on fake pods that fail with the fake API."""
        self.pods = FailingPods(bed.api)
        pod = run_pod(JOB, "up", image="operator:1", grace=60)
        pod["metadata"]["uid"] = "u"
        self.pods.add(pod)
        self.api, self.clock = runner(self.pods, bed.clock).api, bed.clock
        self.changes: PodChanges | None = None
        self.fed = False

    def start(self) -> None:
        """Watch the pod."""
        self.changes = PodChanges(self.api, JOB, self.pods.pods["web-pulumi"], self.clock)

    def provoke(self) -> None:
        """Drop the open watch: the thread must watch (or read) again."""
        for watch in self.pods.watches:
            watch.shutdown()

    def did_its_job(self) -> bool:
        """A state the kubelet reports after the outage is published."""
        if not self.fed:
            self.pods.set_status("web-pulumi", {"phase": "Succeeded"})
            self.fed = True
        pod = self.changes.pod if self.changes is not None else None
        return pod is not None and pod.get("status") == {"phase": "Succeeded"}

    def alive(self) -> bool:
        """The watch thread runs."""
        return self.changes is not None and self.changes._thread.is_alive()  # noqa: SLF001

    def stop(self) -> None:
        """Close the watch."""
        if self.changes is not None:
            self.changes.close()
        self.provoke()


class FailingEvents:
    """The recorder's two calls: they fail with the fake API, else record the Event."""

    def __init__(self, api: FakeApi) -> None:
        """Nothing recorded."""
        self.api = api
        self.created: list[str] = []

    def create_namespaced_event(self, namespace: str, body: Any, **kwargs: Any) -> object:
        """Record ``body``'s reason, unless broken."""
        del namespace, kwargs
        self.api.gate()
        self.created.append(body.reason)
        return body

    def patch_namespaced_event(self, *args: Any, **kwargs: Any) -> object:
        """Never needed: every Event here is new."""
        raise AssertionError((args, kwargs))


class EventsLoop:
    """The event recorder's thread: an Event posted after the outage is created."""

    step, warm = 2.0, True

    def __init__(self, bed: Bed) -> None:
        """A recorder writing through ``FailingEvents``."""
        self.sink = FailingEvents(bed.api)
        self.recorder = EventRecorder(None, "test", clock=bed.clock, sink=self.sink)
        self.posted = 0
        self.fed = False

    def _post(self, reason: str) -> None:
        self.posted += 1
        obj = stack(f"s{self.posted}")  # one object per Event: nothing is correlated
        obj["metadata"]["uid"] = f"uid-{self.posted}"
        self.recorder.post(obj, "Normal", reason, "a message")

    def start(self) -> None:
        """Nothing more to start."""

    def provoke(self) -> None:
        """Post an Event."""
        self._post("During")

    def did_its_job(self) -> bool:
        """An Event posted after the outage is created."""
        if not self.fed:
            self._post("After")
            self.fed = True
        return "After" in self.sink.created

    def alive(self) -> bool:
        """The recorder's thread runs."""
        return self.recorder.alive()

    def stop(self) -> None:
        """Close the recorder."""
        self.recorder.close(0.0)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """One self-signed serving certificate for every metrics server of this module."""
    from controller.metrics_server import make_self_signed  # noqa: PLC0415

    directory = tmp_path_factory.mktemp("metrics-tls")
    make_self_signed(directory, datetime.datetime.now(datetime.UTC))
    return Certificates(directory)


LOOPS: dict[str, Callable[[Bed, Certificates], Loop]] = {
    "informer": lambda bed, _certs: InformerLoop(bed),
    "source-discovery": lambda bed, _certs: DiscoveryLoop(bed),
    "leader-election-acquiring": lambda bed, _certs: ElectionLoop(bed, renewing=False),
    "leader-election-renewing": lambda bed, _certs: ElectionLoop(bed, renewing=True),
    "acknowledger": lambda bed, _certs: AcknowledgerLoop(bed),
    "status-writer": lambda bed, _certs: WriterLoop(bed),
    "metrics-reviews": ReviewLoop,
    "run-pod-watch": lambda bed, _certs: PodWatchLoop(bed),
    "event-recorder": lambda bed, _certs: EventsLoop(bed),
}


def streak_lines(logs: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The ``controller.failures`` lines by loop: each event in order."""
    lines: dict[str, list[str]] = {}
    for entry in logs:
        if "loop" in entry and entry.get("log_level") != "debug":
            lines.setdefault(entry["loop"], []).append(entry["event"])
    return lines


@pytest.mark.parametrize("fault", FAILURES.values(), ids=FAILURES.keys())
@pytest.mark.parametrize("name", LOOPS)
def test_a_loop_survives_a_failing_api_and_works_once_it_answers(
    name: str,
    fault: Fault,
    certificates: Certificates,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Failed twice (backing off on the clock in between), the loop runs and works again."""
    api = FakeApi()
    bed = Bed(api, api.install(monkeypatch), FakeClock(), tmp_path)
    loop = LOOPS[name](bed, certificates)
    with structlog.testing.capture_logs() as logs:
        try:
            if loop.warm:
                loop.start()
            api.break_with(fault)
            if not loop.warm:
                loop.start()

            def failed_twice() -> bool:
                assert loop.alive(), f"{name} died of {fault()!r}"
                loop.provoke()
                return api.failed() >= 2

            drive(bed.clock, failed_twice, f"{name} to fail twice", loop.step)
            assert loop.alive(), f"{name} died of {fault()!r}"
            api.heal()
            drive(bed.clock, loop.did_its_job, f"{name} to work again", loop.step)
            assert loop.alive()
        finally:
            api.close()
            loop.stop()
    for lines in streak_lines(logs).values():
        failures = [line for line in lines if "failed" in line]
        assert len(failures) <= 1, f"one line per streak, got {lines}"


# -- the manager -----------------------------------------------------------------------

PROGRAMS_PATH = f"/apis/pulumi.com/v1/namespaces/{NS}/programs"
WATCHED = {
    "source discovery",
    "leader election",
    f"reflector of stacks in {NS}",
    f"reflector of programs in {NS}",
}
"""The loops the outage must reach: discovery (no Flux), the elector and the informers."""
RECOVERED = {"source discovery", "leader election"}
"""The loops that say they recovered by themselves (a reflector says so at its next event)."""


def healthz(port: int) -> int:
    """The status ``/healthz`` answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=TIMEOUT) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def loops_logging(logs: Sequence[Mapping[str, Any]], event: str) -> set[str]:
    """The loops that have logged ``event`` (at any level)."""
    return {entry["loop"] for entry in list(logs) if "loop" in entry and entry["event"] == event}


def served_by_pulumi_com(api: FakeApi) -> None:
    """The API serves Stacks and Programs (the CRDs), and no Flux kind (no route: 404)."""
    Collection(api, PROGRAMS_PATH)
    resources = {
        "kind": "APIResourceList",
        "groupVersion": "pulumi.com/v1",
        "resources": [
            {"name": plural, "singularName": plural[:-1], "namespaced": True, "kind": kind,
             "verbs": ["get", "list", "watch"]}
            for plural, kind in (("stacks", "Stack"), ("programs", "Program"))
        ],
    }  # fmt: skip
    api.route("GET", "/apis/pulumi.com/v1", lambda _m, _k: response(200, resources))


@contextlib.contextmanager
def running(manager: Manager, clock: FakeClock) -> Iterator[threading.Thread]:
    """``manager.run()`` in a thread; on the way out, shut down and step until it returned."""
    thread = threading.Thread(target=manager.run, name="manager", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        manager.request_shutdown()
        drive(clock, lambda: not thread.is_alive(), "the manager to stop", step=5.0)


@pytest.mark.parametrize("fault", FAILURES.values(), ids=FAILURES.keys())
def test_healthz_stays_200_through_an_api_outage_without_flux(
    fault: Fault, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The operator as wired, no Flux kind served, the API failing every call for a while.

    Discovery, leader election and the informers each fail (and back off); ``/healthz``
    answers 200 throughout, and once the API answers again every one of them recovers,
    the manager still runs and ``/healthz`` is 200.
    """
    api = FakeApi()
    Collection(api, STACKS_PATH)
    leases = Leases(api)
    served_by_pulumi_com(api)
    port, clock = free_port(), FakeClock()
    cfg = parse_config(
        [
            f"--namespaces={NS}",
            f"--work-dir={tmp_path / 'work'}",
            "--metrics-bind-address=127.0.0.1:0",
            f"--health-probe-bind-address=127.0.0.1:{port}",
            "--leader-elect",
            f"--leader-election-namespace={NS}",
            # A renew deadline far longer than the outage: leading must outlive it.
            "--lease-duration=1000",
            "--renew-deadline=900",
            "--retry-period=2",
            "--source-discovery-period=5",
            "--runner=pod",  # no Pulumi CLI needed; no Stack runs
            "--run-image=operator:1",
        ],
        environ={},
    )
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "python3")  # the wiring sets it if unset
    monkeypatch.setenv("PULUMI_SKIP_UPDATE_CHECK", "true")
    factory = stack_reconciler_factory(cfg)
    manager = Manager(
        cfg.manager, "stacks", STACKS, factory, api_client=api.install(monkeypatch), clock=clock
    )
    with structlog.testing.capture_logs() as logs, running(manager, clock) as thread:
        drive(
            clock,
            lambda: manager.ready() and leases.lease is not None and healthz(port) == 200,
            "the operator to sync, lead and be healthy",
            step=1.0,
        )
        api.break_with(fault)

        def every_loop_failed() -> bool:
            api.cut_watches()  # the informers must list or watch again
            return (
                loops_logging(logs, "A loop failed; backing off")
                | loops_logging(logs, "A loop failed unexpectedly; backing off")
                >= WATCHED
            )

        drive(clock, every_loop_failed, "every loop to fail", step=1.0)
        assert healthz(port) == 200, "a thread died in the outage"
        api.heal()
        drive(
            clock,
            lambda: loops_logging(logs, "A loop recovered") >= RECOVERED and api.watching() == 2,
            "every loop to recover, both informers watching again",
            step=1.0,
        )
        assert thread.is_alive(), "the manager stopped"
        assert manager.healthy()
        assert healthz(port) == 200
