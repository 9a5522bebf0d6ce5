"""PKO v2 beside our pod runner on one node cluster (``bench=pko-v2``), one line per run.

Without ``PKO_V2_SOURCE`` (a checkout of PKO's repository at v2.9.x; ``hack/build-pko-v2``
makes one from a git snapshot) the line is ``bench=pko-v2 skipped=<reason>`` and nothing
starts: the Go module proxy refuses PKO v2's module path, so there is nothing to build
from otherwise. CI never needs it.

With it: the manager and agent are built (or found) in the cache (``pko_v2_build``),
PKO v2's image is written (``pko_v2_image``), and the pods benchmark's bed starts a node
cluster with our image, a git server holding the cached TypeScript program
(``node-outputs``) and the npm mirror (``bench.pods.bed``). Then, in one run:

1. *ours*: our operator (``--runner=pod``, its defaults) on a namespace of its own, the
   pods benchmark's Stack spec. ``first_s``: the create until Ready (cold: pod, ``npm
   ci`` from the mirror, the plugin step, ``up``); ``cached_s``: the median of
   ``samples`` spec PATCHes (a new ``value`` config) until Ready for their generation;
   one not Ready within ``CACHED_TIMEOUT`` s is counted in ``cached_timeouts`` instead.
   The Stack is then deleted while our operator still runs (its finalizer).
2. *PKO v2*: its CRDs replace ours (``operator/config/crd/bases``), its image is imported,
   its manager starts (``pko_v2_operator``: a host process like ours, reaching the agents
   through ``pko_v2_proxy``), and the same Stack goes through the same steps on a
   namespace of its own, with what PKO v2 needs on top: the program over HTTPS (it
   refuses ``git://`` and ``http://`` URLs, and wants ``<owner>/<repo>`` in the path: the
   test bed's smart-HTTP git server behind a TLS relay on the node's host address, the
   same files pushed as one commit), and ``workspaceTemplate.spec.image``: our image,
   which has the CLI and the language hosts, run as its user (65532; PKO's restricted
   profile would run it as 1000, which cannot write our image's ``HOME``).

"Ready" is the Stack's ``Ready=True`` with ``observedGeneration`` equal to its generation at
that time, which may have moved on from the change's: PKO v2 writes the spec back as it
adds its finalizer (a defaulted field), so its first run is for generation 2.

For each: ``rss_mib`` (the operator's after the runs), ``requests_per_run`` (API requests
of the operator during the cached runs, divided by them), and, after an ``idle`` window
with nothing changing, ``idle_pods`` (the namespace's pods left running) and
``idle_mem_mib`` (the node's pods' memory, one node). PKO v2 adds ``init_conflicts`` (the
times it deleted a fresh workspace pod because its Update marking the pod initialized
conflicted with a kubelet status write) and ``pod_revisions`` (how many pod templates its
StatefulSet had: PKO v2.9 hashes the Workspace's generation into the template, so every
spec change replaces the pod). Fields are prefixed ``pso_`` and ``pko_``.
"""

from __future__ import annotations

import dataclasses
import ssl
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from bench import machine
from bench.context import Context
from bench.operator import Operator
from bench.peer.pko_v2_build import SKIPPED, Built, build, source_from_env
from bench.peer.pko_v2_image import IMAGE as PKO_IMAGE
from bench.peer.pko_v2_image import USER, image_archive
from bench.peer.pko_v2_operator import PkoV2Manager, grant
from bench.peer.pko_v2_proxy import Relay, WorkspaceProxy
from bench.pods.bed import PROGRAM, PodBed, Tenant
from bench.pods.stacks import Change, Stacks
from bench.programs import PROGRAMS
from bench.running import Running
from bench.stats import Summary, median
from bench.watch import Seen, StackWatch, WatchError, condition, is_true
from testbed.certs import TinyCA
from testbed.git_http import GitHttpServer
from testbed.git_server import Checkout

NAME = "pko-v2"
FIRST_TIMEOUT = 900.0  # seconds: a pod, npm ci through the mirror, the plugin step, up
CACHED_TIMEOUT = 300.0
GONE_TIMEOUT = 300.0
STACK = "cmp"
REQUESTS = "rest_client_requests_total"
GIT_REPO = f"bench/{PROGRAM}"  # PKO wants <owner>/<repository> in an HTTPS URL's path
CRDS = ("stacks.pulumi.com", "programs.pulumi.com", "workspaces.auto.pulumi.com")

Fields = dict[str, float | str]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How much the comparison measures."""

    samples: int = 5  # cached PATCH → Ready runs
    idle_window: float = 300.0  # seconds with nothing changing before the idle read-outs


def skipped() -> Summary | None:
    """The line saying why the comparison is skipped, or ``None`` when it can run."""
    return Summary.of(NAME, skipped=SKIPPED) if source_from_env() is None else None


def run(ctx: Context) -> Summary:
    """The comparison's line: ``skipped`` without a source, else both sides' fields."""
    source = source_from_env()
    if source is None:
        return Summary.of(NAME, skipped=SKIPPED)
    plan = Plan() if ctx.scale.stacks >= 1000 else Plan(samples=2, idle_window=30.0)
    ctx.progress("pko-v2: PKO v2's manager and agent (built once from the source, cached)")
    built = build(source)
    measured = compare(ctx, built, plan)
    return Summary.of(
        NAME,
        version=built.version,
        samples=plan.samples,
        idle_window=plan.idle_window,
        cached_timeout=CACHED_TIMEOUT,
        **measured,
    )


def compare(ctx: Context, built: Built, plan: Plan) -> Fields:
    """Ours, then PKO v2, on one node cluster; their prefixed fields."""
    bed = PodBed(ctx.bed, ctx.progress, 1)
    fields: Fields = {}
    with bed, _GitOverHttps(bed) as git:
        ours = bed.tenant("pso-cmp")
        with bed.operator([ours]) as operator, StackWatch(bed.api, ours.namespace) as watch:
            ctx.progress("pko-v2: our operator, first run then cached runs")
            side = _Side(bed, watch, ours, lambda: _running(operator.pid), _requests(operator))
            fields |= _prefixed("pso", side.measure(plan, bed.spec(ours, STACK, "v0")))
            side.delete(STACK)
        fields |= _prefixed("pko", _pko(ctx, bed, git, built, plan))
    return fields


def _pko(ctx: Context, bed: PodBed, git: _GitOverHttps, built: Built, plan: Plan) -> Fields:
    """PKO v2's side: its CRDs, image, rights, proxy and manager, then the same steps."""
    cluster = bed.node
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(built.crds))
    for crd in CRDS:
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    archive = image_archive(built, bed.root / "pko-v2-image.tar", git.ca.cert_pem)
    cluster.load_image(archive, PKO_IMAGE)
    tenant = bed.tenant("pko-cmp")
    grant(cluster, bed.root, [tenant.namespace])
    with (
        WorkspaceProxy(bed.api) as proxy,
        PkoV2Manager(built, cluster, proxy.url, git.ca_file, bed.root) as manager,
        StackWatch(bed.api, tenant.namespace) as watch,
    ):
        ctx.progress("pko-v2: PKO v2, first run then cached runs")
        side = _Side(bed, watch, tenant, lambda: manager.pid, manager.requests)
        fields = side.measure(plan, pko_spec(bed, git.spec(bed.spec(tenant, STACK, "v0"))))
        fields |= {
            "init_conflicts": manager.init_conflicts(),
            "pod_revisions": _revisions(bed, tenant.namespace),
        }
        side.delete(STACK)
    return fields


def pko_spec(bed: PodBed, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` for PKO v2: its workspace runs our image, as our image's user."""
    template = spec["workspaceTemplate"]
    workspace = dict(template.get("spec") or {})
    workspace |= {"image": bed.image, "imagePullPolicy": "Never"}
    pod = dict(workspace.get("podTemplate") or {})
    pod_spec = dict(pod.get("spec") or {})
    user = int(USER)
    pod_spec["securityContext"] = {"runAsUser": user, "runAsGroup": user, "fsGroup": user}
    workspace["podTemplate"] = {**pod, "spec": pod_spec}
    return {**spec, "workspaceTemplate": {**template, "spec": workspace}}


class _GitOverHttps(Running):
    """The program over smart HTTPS, reachable from pods (PKO v2 takes ``https://`` only)."""

    def __init__(self, bed: PodBed) -> None:
        self.bed, self.ca = bed, TinyCA("pko-v2-git")
        self.ca_file = bed.root / "pko-v2-git-ca.pem"
        self.server = GitHttpServer(bed.root / "git-http", [], public=True)
        self.relay: Relay | None = None
        self.url = self.commit = ""

    def start(self) -> None:
        """Serve, relay with TLS from the node's host address, push the program (one commit)."""
        self.server.start()
        self.server.create_repo(GIT_REPO)
        checkout = Checkout(self.server.push_url(GIT_REPO), self.bed.root / "checkouts-http")
        files = (PROGRAMS / PROGRAM).iterdir()
        sources = {f"app/{f.name}": f.read_text() for f in files if f.is_file()}
        self.commit = checkout.commit(sources, f"the {PROGRAM} program")
        host = self.bed.node.host_ip
        self.relay = Relay(host, ("127.0.0.1", self.server.port), self._tls(host))
        self.relay.start()
        self.url = f"https://{host}:{self.relay.port}/{GIT_REPO}.git"

    def _tls(self, host: str) -> ssl.SSLContext:
        """A server context with a certificate for ``host``; writes the CA to ``ca_file``."""
        pair = self.ca.serving_cert(host)
        self.ca_file.write_bytes(self.ca.cert_pem)
        cert, key = self.bed.root / "pko-v2-git.crt", self.bed.root / "pko-v2-git.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        return context

    def stop(self) -> None:
        """Stop the relay and the server."""
        if self.relay is not None:
            self.relay.stop()
        self.server.stop()

    def spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """``spec`` pointing at this repository and commit."""
        return {**spec, "projectRepo": self.url, "commit": self.commit}


class _Side:
    """One operator's Stack in its namespace: the runs, and the read-outs around them."""

    def __init__(
        self,
        bed: PodBed,
        watch: StackWatch,
        tenant: Tenant,
        pid: Callable[[], int],
        requests: Callable[[], float],
    ) -> None:
        self.bed, self.watch, self.tenant = bed, watch, tenant
        self.stacks = Stacks(bed.api, watch)
        self.pid, self.requests = pid, requests

    def measure(self, plan: Plan, spec: dict[str, Any]) -> Fields:
        """First run, cached runs, then the idle read-outs."""
        namespace = self.tenant.namespace
        first_s = self._settle(self.stacks.create(namespace, STACK, spec), FIRST_TIMEOUT)
        before, cached, timeouts = self.requests(), [], 0
        for index in range(1, plan.samples + 1):
            change = self.stacks.set_value(namespace, STACK, f"v{index}")
            try:
                cached.append(self._settle(change, CACHED_TIMEOUT))
            except WatchError:
                timeouts += 1  # the next PATCH supersedes it; counted, not timed
        requests = (self.requests() - before) / plan.samples
        rss = machine.memory_kib(self.pid())["VmRSS"] / 1024
        time.sleep(plan.idle_window)  # a measuring window: nothing should happen
        return {
            "first_s": first_s,
            "cached_s": median(cached) if cached else float("nan"),
            "cached_timeouts": timeouts,
            "requests_per_run": requests,
            "rss_mib": rss,
            "idle_pods": self._running_pods(),
            "idle_mem_mib": self._node_memory_mib(),
        }

    def _settle(self, change: Change, timeout: float) -> float:
        """Seconds from the change until its Stack is Ready for its current generation.

        The generation may move on after the change: PKO v2 writes the spec back when it
        adds its finalizer (a defaulted field), so the first Ready is for generation 2.

        Raises:
            RuntimeError: the run failed (with Ready's message).
        """
        seen = self.watch.wait_for(_converged(change), timeout, after=change.sent)
        if not is_true(seen.obj, "Ready"):
            found = condition(seen.obj, "Ready") or {}
            msg = f"{change.name} failed: {found.get('message')}"
            raise RuntimeError(msg)
        return seen.arrived - change.sent

    def delete(self, name: str) -> None:
        """Delete the Stack; returns once the Stack watch has seen it go."""
        custom = client.CustomObjectsApi(self.bed.api)
        sent = time.monotonic()
        custom.delete_namespaced_custom_object(
            "pulumi.com", "v1", self.tenant.namespace, "stacks", name
        )
        self.watch.wait_for(
            lambda seen: seen.name == name and seen.type == "DELETED", GONE_TIMEOUT, after=sent
        )

    def _running_pods(self) -> int:
        """Pods of the namespace in phase Running."""
        pods = client.CoreV1Api(self.bed.api).list_namespaced_pod(self.tenant.namespace).items
        return sum(1 for pod in pods if pod.status and pod.status.phase == "Running")

    def _node_memory_mib(self) -> float:
        """Memory the node's pods use now (their cgroup parent), in MiB."""
        for member in self.bed.node.members:
            for directory in member.cgroups.directories():
                for name in ("memory.current", "memory.usage_in_bytes"):
                    if (directory / name).is_file():
                        return int((directory / name).read_text()) / 2**20
        return float("nan")


def _converged(change: Change) -> Callable[[Seen], bool]:
    """A version of the changed Stack, at the change's generation or later, settled for it."""

    def check(seen: Seen) -> bool:
        generation = int(seen.obj["metadata"]["generation"])
        status = seen.obj.get("status") or {}
        last = status.get("lastUpdate") or {}
        if seen.name != change.name or generation < change.generation:
            return False
        if last.get("generation") == generation and last.get("state") == "failed":
            return True
        return status.get("observedGeneration") == generation and is_true(seen.obj, "Ready")

    return check


def _revisions(bed: PodBed, namespace: str) -> int:
    """How many pod templates the namespace's StatefulSets have had (ControllerRevisions)."""
    apps = client.AppsV1Api(bed.api)
    return len(apps.list_namespaced_controller_revision(namespace).items)


def _running(pid: int | None) -> int:
    """``pid``, or ``RuntimeError`` when the operator is not running."""
    if pid is None:
        raise RuntimeError("our operator is not running")
    return pid


def _requests(operator: Operator) -> Callable[[], float]:
    """Our operator's API requests so far (``rest_client_requests_total``), as a reading."""
    return lambda: operator.counter(REQUESTS)


def _prefixed(label: str, fields: Fields) -> Fields:
    return {f"{label}_{key}": value for key, value in fields.items()}
