"""``make dev ARGS=--node``: the operator's image on a real single-node cluster, with the sample.

Where plain ``make dev`` runs the operator as a local process, this runs it as users do:
the image ``make image`` builds, deployed from ``manifests/default`` by kubelet and
containerd. It needs root (network namespaces, mounts, cgroups), the node's host packages
and binaries (``hack/install-node``) and the image tools (``hack/install-image-tools``).
In the state directory of ``hack/dev.py`` (same lock, wiped at start, kept afterwards):

1. the image is built, or found unchanged, as ``make image`` does;
2. a ``NodeCluster`` starts under ``cluster/`` (control plane, kube-controller-manager,
   kube-scheduler, one node in its own namespaces) with the image in its containerd
   (seeded: ``testbed.node.image_store``);
3. an overlay of ``manifests/default`` (``overlay/``) swaps the image, mounts ``volume/``
   (owned by uid 65532) at ``/state`` and appends the operator flags; it is applied and
   rolled out;
4. a git daemon on the node network's host address serves ``sample.git``, and
   ``sample.yaml`` (the passphrase Secret, a claim on ``volume/`` in ``default``, and the
   Stack ``default/sample`` on the backend ``file:///state/backend``, whose run pods mount
   that claim at ``/state``) is applied.

Then it prints how to watch, and follows the operator pod's log (``kubectl logs -f``,
again whenever the pod or its container changes; each also copied to ``logs/``). Ctrl-C
or SIGTERM scales the Deployment to zero so that a running update ends cleanly (a second
Ctrl-C skips the wait), then stops git and the cluster, and fails loudly if anything of
the cluster is left on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import yaml
from kubernetes import client

from hack.dev_common import (
    NAMESPACE,
    PROGRAM,
    SHUTDOWN_TIMEOUT,
    STACK,
    DevError,
    claimed,
    follow,
    sample_manifests,
    say,
    until_ready,
)
from testbed.assets import AssetError, find_pulumi
from testbed.git_server import Checkout, GitServer
from testbed.image import (
    INSTALL_HINT,
    BuiltImage,
    ImageError,
    build_image,
    missing_tools,
    save_archive,
)
from testbed.node import NodeBinaries, NodeCluster, deployment, missing_host_tools
from testbed.node.deployment import UID
from testbed.node.image_store import Archive
from testbed.process import ProcessError

MOUNT = Path("/state")  # where the pods see volume/
SAMPLE_CLAIM = "pulumi-stack-operator-sample-state"  # volume/, claimed in the sample's namespace
# Waiting reasons of the operator's container that only a change of ours would cure.
FAILED = {
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}


def prerequisites() -> NodeBinaries:
    """The node's binaries, once everything the node mode needs is known to be here.

    Raises:
        DevError: naming what is missing and what installs it.
    """
    if os.geteuid() != 0:
        msg = "--node needs root (network namespaces, mounts, cgroups); plain `make dev` does not"
        raise DevError(msg)
    if missing := missing_host_tools():
        msg = f"--node needs {', '.join(missing)}: run hack/install-node (as root)"
        raise DevError(msg)
    if missing := missing_tools():
        msg = (
            f"--node builds the operator's image, which needs {', '.join(missing)}: {INSTALL_HINT}"
        )
        raise DevError(msg)
    if shutil.which("git") is None:
        msg = "git is not installed; install it (the sample program is served by git daemon)"
        raise DevError(msg)
    try:
        find_pulumi(build=False)  # the image gets the test bed's Pulumi CLI
        return NodeBinaries.find(build=False)
    except AssetError as err:
        msg = f"{err}: run hack/install-node (node binaries) and hack/test-assets"
        raise DevError(msg) from err


def operator_image() -> BuiltImage:
    """Build (or find unchanged) the operator's image, as ``make image`` does.

    Raises:
        DevError: the build failed (the message says where its log is).
    """
    say("building the operator's image (or finding it unchanged), as `make image` does")
    try:
        image = build_image()
    except ImageError as err:
        raise DevError(str(err)) from err
    how = "found unchanged" if image.cached else "built"
    say(f"image {image.ref}: {how} in {image.seconds:.1f}s")
    return image


class LogFollower:
    """``kubectl logs -f`` of one container instance, into a file echoed to stdout on demand."""

    def __init__(self, kubectl: Sequence[str], pod: str, log: Path) -> None:
        """Start following the current container of pod ``pod``, appending to ``log``."""
        self.log = log
        self._echoed = 0
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*kubectl, "logs", "-f", "-n", deployment.NAMESPACE, pod],
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C must not cut the last lines short
            )

    def echo(self, out: IO[str]) -> None:
        """Write the complete lines that arrived since the last call."""
        with self.log.open("rb") as log:
            log.seek(self._echoed)
            chunk = log.read()
        chunk = chunk[: chunk.rfind(b"\n") + 1]
        self._echoed += len(chunk)
        out.write(chunk.decode(errors="replace"))
        out.flush()

    def stop(self) -> None:
        """Stop following (its container has usually ended, and kubectl with it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class NodeDev:
    """The node cluster, the operator's Deployment, the git daemon and the sample of one run."""

    def __init__(
        self, state: Path, binaries: NodeBinaries, image: BuiltImage, flags: Sequence[str]
    ) -> None:
        """Prepare (start nothing); the operator gets ``flags`` after ours."""
        self.state, self.image = state, image
        self.cluster = NodeCluster(state / "cluster", binaries)
        self.volume = state / "volume"
        self.output = self.volume / "sample-output" / "hello.txt"
        self.manifest = state / "sample.yaml"
        self.flags = ["--log-format=console", f"--shutdown-timeout={SHUTDOWN_TIMEOUT}", *flags]
        self.git: GitServer | None = None
        self.following = False  # the operator's log is echoed to stdout
        self._followers: dict[tuple[str, int], LogFollower] = {}
        self._api: client.ApiClient | None = None

    # -- start and stop ------------------------------------------------------------------

    def start(self) -> None:
        """Start everything and create the sample Stack (steps 2-4 of the module doc)."""
        self._seed_image()
        say(f"starting the node cluster in {self.cluster.root}")
        started = time.monotonic()
        self.cluster.start()
        say(f"node {self.cluster.node_name} Ready in {time.monotonic() - started:.0f}s")
        self._load_image()
        self._deploy()
        say(f"serving the sample program with git daemon on {self.cluster.host_ip}")
        self.git = GitServer(self.state, host=self.cluster.host_ip)
        self.git.start()
        say(f"creating Secret {NAMESPACE}/pulumi-secrets and Stack {NAMESPACE}/{STACK}")
        self._apply_sample(self._publish_program(self.git))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Start everything; on the way out stop it all, failing if the cluster left anything.

        Raises:
            DevError: something of the cluster is still on the machine after stopping.
        """
        clean_exit = False
        try:
            self.start()
            yield
            clean_exit = True
        except KeyboardInterrupt:
            say("interrupted")
            clean_exit = True
            raise
        finally:
            left = self.stop()
            say(f"stopped; logs are in {self.state / 'logs'} and {self.cluster.logs}")
            if left:
                print("\n[dev] WARNING: the node cluster left these behind:", file=sys.stderr)
                print("\n".join(f"[dev]   {item}" for item in left), file=sys.stderr)
                if clean_exit:
                    msg = "the node cluster was not torn down completely (see above)"
                    raise DevError(msg)  # replaces a Ctrl-C: leftovers are worse

    def stop(self) -> list[str]:
        """Stop the operator (scaled to zero), git and the cluster; what is left behind."""
        try:
            self._stop_operator()
        except KeyboardInterrupt:
            say("not waiting for the operator")
        except Exception as err:  # noqa: BLE001 - whatever it was, the teardown must go on
            say(f"could not stop the operator gracefully ({err}); the node stop kills it")
        # The rest takes seconds and must not be cut short, or processes would be left.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        for follower in self._followers.values():
            follower.stop()
        if self.following:
            self.echo_log()  # how it stopped
        if self._api is not None:
            self._api.close()
        say("stopping git daemon and the node cluster")
        if self.git is not None:
            self.git.stop()
        started = time.monotonic()
        self.cluster.stop()
        say(f"node cluster stopped in {time.monotonic() - started:.0f}s")
        return self.cluster.leftovers()

    def _stop_operator(self) -> None:
        """Scale the Deployment to zero and wait for its pods to go (SIGTERM, then drain)."""
        if self._api is None or not self._pods():
            return
        say("stopping the operator: scaling it to zero (Ctrl-C again to skip the wait)")
        scale = ("scale", f"deployment/{deployment.NAME}", "-n", deployment.NAMESPACE)
        self.cluster.kubectl(*scale, "--replicas=0", check=False)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT + 30
        while self._pods() and time.monotonic() < deadline:
            if self.following:
                self.echo_log()
            time.sleep(0.5)

    # -- the steps ------------------------------------------------------------------------

    def _seed_image(self) -> None:
        """The node starts with the image in (``testbed.node.image_store``)."""
        try:
            archive = save_archive(self.image)
        except ImageError as err:
            raise DevError(str(err)) from err
        self.cluster.images = (Archive(archive, self.image.ref),)

    def _load_image(self) -> None:
        try:
            self.cluster.load_image(save_archive(self.image), self.image.ref)
        except (ImageError, ProcessError) as err:
            raise DevError(str(err)) from err

    def _deploy(self) -> None:
        for path in (self.volume, self.volume / "backend", self.output.parent):
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, UID, UID)  # the pod runs as this uid; hostPath keeps host owners
        overlay = deployment.write_overlay(
            self.state / "overlay", self.image.ref, args=self.flags, state=self.volume
        )
        say(f"deploying manifests/default with the image (overlay: {overlay})")
        started = time.monotonic()
        deployment.deploy(self.cluster, overlay)
        say(f"rolled out in {time.monotonic() - started:.0f}s")
        self._api = self.cluster.api_client()

    def _publish_program(self, git: GitServer) -> str:
        url = git.create_repo(STACK)
        files = {p.name: p.read_text() for p in PROGRAM.iterdir() if p.is_file()}
        Checkout(url, self.state / "checkout").commit(files, "sample program")
        return url

    def _apply_sample(self, repo: str) -> None:
        output = MOUNT / self.output.relative_to(self.volume)
        manifests = sample_manifests(repo, MOUNT / "backend", output)
        # The run pods (--runner=pod) mount volume/ at /state through a claim in the
        # sample's namespace; the local runner (--runner=local) uses the operator's mount.
        claim = deployment.state_volume(self.volume, NAMESPACE, SAMPLE_CLAIM, SAMPLE_CLAIM)
        for obj in manifests:
            if obj["kind"] == "Stack":
                obj["spec"]["workspaceTemplate"] = deployment.state_workspace(SAMPLE_CLAIM)
        manifests = [*claim, *manifests]
        self.manifest.write_text(yaml.safe_dump_all(manifests))
        # The CRD came with manifests/default; discovery may serve it a moment later.
        deadline = time.monotonic() + 60
        while (
            applied := self.kubectl("apply", "--server-side", "-f", str(self.manifest))
        ).returncode:
            if time.monotonic() > deadline:
                msg = f"could not apply {self.manifest}: {applied.stderr}"
                raise DevError(msg)
            time.sleep(0.5)

    # -- what the waits use (hack.dev_common.Watched) --------------------------------------

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (unchecked), with a discovery cache of this run's own."""
        cache = f"--cache-dir={self.state / 'kube-cache'}"
        return self.cluster.kubectl(cache, *args, check=False)

    @property
    def log_hint(self) -> str:
        """Where the operator's log is."""
        return f"{self.state / 'logs'}/operator-*.log"

    def stack(self) -> dict[str, Any]:
        """The sample Stack as the API serves it."""
        if self._api is None:
            self._api = self.cluster.api_client()
        obj: dict[str, Any] = client.CustomObjectsApi(self._api).get_namespaced_custom_object(  # type: ignore[assignment]
            "pulumi.com", "v1", NAMESPACE, "stacks", STACK
        )
        return obj

    def check_operator(self) -> None:
        """Follow every new operator container; raise DevError if one cannot run."""
        for pod in self._pods():
            name = str(pod.metadata.name if pod.metadata else "")
            for status in (pod.status.container_statuses if pod.status else None) or []:
                self._follow(name, status)
                waiting = status.state.waiting if status.state else None
                if waiting is not None and waiting.reason in FAILED:
                    msg = (
                        f"the operator's pod {name} cannot run: {waiting.reason}: "
                        f"{waiting.message or ''} (log: {self.log_hint})"
                    )
                    raise DevError(msg)

    def echo_log(self) -> None:
        """Copy every followed container's new complete log lines to stdout."""
        for follower in self._followers.values():
            follower.echo(sys.stdout)

    def _follow(self, pod: str, status: client.V1ContainerStatus) -> None:
        """Start ``kubectl logs -f`` for this container instance once it has started."""
        key = (pod, int(status.restart_count))
        running = status.state is not None and status.state.running is not None
        if key in self._followers or not running:
            return
        logs = self.state / "logs"
        logs.mkdir(exist_ok=True)
        kubectl = [
            str(self.cluster.binaries.control_plane.kubectl),
            f"--kubeconfig={self.cluster.kubeconfig}",
        ]
        log = logs / f"operator-{pod}-{key[1]}.log"
        self._followers[key] = LogFollower(kubectl, pod, log)

    def _pods(self) -> list[client.V1Pod]:
        """The operator's pods, any phase."""
        if self._api is None:
            return []
        listed = client.CoreV1Api(self._api).list_namespaced_pod(
            deployment.NAMESPACE, label_selector=deployment.SELECTOR
        )
        return list(listed.items)

    def bin_dir(self) -> Path:
        """A directory holding (a link to) the test kubectl, for the developer's PATH."""
        bin_dir = self.state / "bin"
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "kubectl"
        if not link.exists():
            link.symlink_to(self.cluster.binaries.control_plane.kubectl)
        return bin_dir


def print_usage(node: NodeDev) -> None:
    """How to watch the sample Stack from another terminal."""
    service = deployment.service_ip(node.cluster)
    name, namespace = deployment.NAME, deployment.NAMESPACE
    deployment.reader_token(node.cluster)  # the scraper account the curl line uses
    repo = node.git.url(STACK) if node.git else "-"
    print(
        f"""
The operator runs in a pod on node {node.cluster.node_name}. In another terminal:

  export KUBECONFIG={node.cluster.kubeconfig}
  export PATH={node.bin_dir()}:$PATH   # the test kubectl; yours works too
  kubectl get stacks -w
  kubectl describe stack {STACK}
  kubectl logs -f deploy/{name} -n {namespace}
  curl -sk -H "Authorization: Bearer $(kubectl create token {deployment.SCRAPER} -n {namespace})" \\
    https://{service}:{deployment.METRICS_PORT}/metrics | grep '^pulumi_stack_'

  image:             {node.image.ref}
  sample manifest:   {node.manifest}  (edit spec.config.content, then kubectl apply -f it)
  sample program:    git clone {repo}  (push to main; polled every 60 s)
  what it manages:   {node.output}  ({MOUNT / node.output.relative_to(node.volume)} in the pod)
  overlay:           {node.state / "overlay"}  (kubectl apply --server-side -k it after edits)
  logs:              {node.state / "logs"}, {node.cluster.logs},
                     {node.cluster.root / "node" / "logs"}
""",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    """``hack/dev.py --node``: as ``hack.dev.run``, on the node (see the module docstring)."""
    binaries = prerequisites()
    with claimed(args.state_dir):
        image = operator_image()
        started = time.monotonic()  # --timeout counts from here: a cold build takes minutes
        node = NodeDev(args.state_dir.resolve(), binaries, image, args.operator_flags)
        with node.running():
            print_usage(node)
            if not args.until_ready:
                follow(node, started, args.timeout)
            return until_ready(node, started, args.timeout)
