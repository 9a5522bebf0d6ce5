"""Run the operator on a local control plane with a sample Stack (`make dev`).

Everything lives under one state directory (default
``~/.cache/pulumi-stack-operator-dev``; wiped when a run starts, kept after it ends so that
its logs can be read) and is started in this order:

1. etcd and kube-apiserver, the test bed's binaries (``hack/test-assets`` builds them);
2. the Stack CRD, server-side applied, then waited on until Established;
3. a git daemon serving ``sample.git``: the test bed's files program, a Python dynamic
   provider that writes one file, so it runs offline with the cached Pulumi CLI;
4. ``sample.yaml``: the passphrase Secret and the Stack ``default/sample`` on a
   ``file://`` backend (edit it and ``kubectl apply -f`` it again);
5. the operator, ``python -m pulumi_stack_operator`` with this interpreter, watching every
   namespace.

Then it prints how to watch the Stack and follows the operator's log. Ctrl-C or SIGTERM
stops the operator first (SIGTERM, so that a running update ends cleanly; a second Ctrl-C
kills it), then the git daemon, then the control plane, and exits 0.

With ``--until-ready`` it exits 0 once the sample Stack is Ready, or 1 with the Stack's
status after ``--timeout`` seconds: the test suite runs it that way so that it cannot rot.
Operator flags go after ``--``: ``make dev ARGS="-- --workers=4"``.

``--node`` (``hack/dev_node.py``) runs the operator's image instead, deployed from
``manifests/default`` onto a real single-node cluster (root only). Both modes share the
sample, the state directory and the waits (``hack/dev_common.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script (hack/dev.py), not as a module
    sys.path.insert(0, str(REPO))

from kubernetes import client  # noqa: E402 - after the sys.path fix-up above

from hack.dev_common import (  # noqa: E402
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
from testbed.assets import AssetError, find_kube_binary, find_pulumi  # noqa: E402
from testbed.control_plane import Binaries, ControlPlane, wait_established  # noqa: E402
from testbed.git_server import Checkout, GitServer  # noqa: E402
from testbed.operator import Operator  # noqa: E402
from testbed.process import ProcessError  # noqa: E402

CRD = REPO / "manifests" / "crd" / "stacks.pulumi.com.yaml"


def default_state_dir() -> Path:
    """``$XDG_CACHE_HOME/pulumi-stack-operator-dev``, outside the repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pulumi-stack-operator-dev"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="hack/dev.py", description=__doc__.split("\n", 1)[0] if __doc__ else None
    )
    parser.add_argument(
        "--until-ready",
        action="store_true",
        help="exit 0 once the sample Stack is Ready (1 on timeout) instead of running on",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300,
        help="seconds from start (with --node: from when the image is ready) until the sample "
        "Stack must be Ready (default: 300)",
    )
    parser.add_argument(
        "--node",
        action="store_true",
        help="run the operator's image on a real single-node cluster (root; see hack/dev_node.py)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help=f"where everything lives, wiped at start (default: {default_state_dir()})",
    )
    parser.add_argument(
        "operator_flags", nargs="*", metavar="-- FLAG", help="flags for the operator"
    )
    return parser.parse_args(argv)


def binaries() -> tuple[Binaries, Path]:
    """The control-plane binaries and the Pulumi CLI's directory, never built here.

    Raises:
        DevError: one is missing (``make dev`` runs ``hack/test-assets`` first).
    """
    if shutil.which("git") is None:
        msg = "git is not installed; install it (the sample program is served by git daemon)"
        raise DevError(msg)
    try:
        kube = Binaries(
            *(find_kube_binary(b, build=False) for b in ("etcd", "kube-apiserver", "kubectl"))
        )
        return kube, find_pulumi(build=False)
    except AssetError as err:
        msg = f"{err} (it needs Go 1.26+; `make dev` runs it first; a first build takes a while)"
        raise DevError(msg) from err


# -- what runs --------------------------------------------------------------------------


class DevCluster:
    """The control plane, the git daemon and the operator of one run, and the sample."""

    def __init__(self, state: Path, kube: Binaries, pulumi_bin: Path, flags: Sequence[str]) -> None:
        """Prepare (start nothing); the operator gets ``flags`` after ours."""
        self.state = state
        self.control_plane = ControlPlane(kube, state)
        self.git = GitServer(state)  # repos/ and logs/ beside the control plane's
        self.operator = Operator(
            self.control_plane.kubeconfig,
            state / "logs" / "operator.log",
            work_dir=state / "work",
            pulumi_bin=pulumi_bin,
            flags=["--log-format=console", f"--shutdown-timeout={SHUTDOWN_TIMEOUT}", *flags],
        )
        self.manifest = state / "sample.yaml"
        self.output = state / "sample-output" / "hello.txt"
        self._kubectl = kube.kubectl
        self._api: client.ApiClient | None = None
        self.following = False  # the operator's log is echoed to stdout
        self._echoed = 0  # bytes of the log echoed so far

    def start(self) -> None:
        """Start everything and create the sample Stack (steps 1-5 of the module doc)."""
        say(f"starting etcd and kube-apiserver in {self.state}")
        self.control_plane.start()
        say("applying the Stack CRD")
        self._install_crd()
        say("serving the sample program with git daemon")
        self.git.start()
        repo = self._publish_program()
        say(f"creating Secret {NAMESPACE}/pulumi-secrets and Stack {NAMESPACE}/{STACK}")
        self._apply_sample(repo)
        say(f"starting the operator (log: {self.operator.log})")
        self.operator.start()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Start everything; on the way out (error, Ctrl-C, SIGTERM) stop it all."""
        try:
            self.start()
            yield
        except KeyboardInterrupt:
            say("interrupted")
            raise
        finally:
            self.stop()
            say(f"stopped; logs are in {self.state / 'logs'}")

    def stop(self) -> None:
        """Stop the operator (SIGTERM; a second Ctrl-C kills it), then git, then the cluster."""
        if self.operator.proc is not None:
            say("stopping the operator (Ctrl-C again to kill it)")
            try:
                self.operator.stop(signal.SIGTERM, timeout=SHUTDOWN_TIMEOUT + 30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                say("killing the operator")
                self.operator.stop(signal.SIGKILL, timeout=30)
            if self.following:
                self.echo_log()  # how it stopped
        # The rest takes seconds and must not be cut short, or processes would be left.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if self._api is not None:
            self._api.close()
        say("stopping git daemon, kube-apiserver and etcd")
        self.git.stop()
        self.control_plane.stop()

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin, with a discovery cache of this run's own.

        The shared ~/.kube/cache is keyed by host:port, and loopback ports are reused by
        other control planes (the test suite's), so its entries may describe another API.
        """
        cache = f"--cache-dir={self.state / 'kube-cache'}"
        return self.control_plane.kubectl(cache, *args, check=check)

    def _install_crd(self) -> None:
        kubectl = self.kubectl
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        wait_established(kubectl, "stacks.pulumi.com")
        # Discovery serves the new group a moment after Established; until then kubectl
        # (which also caches discovery) cannot map the kind Stack.
        deadline = time.monotonic() + 60
        while (listed := kubectl("get", "stacks.pulumi.com", "-A", check=False)).returncode:
            if time.monotonic() > deadline:
                msg = f"the apiserver does not serve stacks.pulumi.com: {listed.stderr}"
                raise DevError(msg)
            time.sleep(0.5)

    def _publish_program(self) -> str:
        url = self.git.create_repo(STACK)
        files = {p.name: p.read_text() for p in PROGRAM.iterdir() if p.is_file()}
        Checkout(url, self.state / "checkout").commit(files, "sample program")
        return url

    def _apply_sample(self, repo: str) -> None:
        backend = self.state / "backend"
        backend.mkdir()  # the file backend does not create its directory
        self.output.parent.mkdir()
        self.manifest.write_text(yaml.safe_dump_all(sample_manifests(repo, backend, self.output)))
        self.kubectl("apply", "--server-side", "-f", str(self.manifest))

    def stack(self) -> dict[str, Any]:
        """The sample Stack as the API serves it."""
        if self._api is None:
            self._api = self.control_plane.api_client()
        obj: dict[str, Any] = client.CustomObjectsApi(self._api).get_namespaced_custom_object(  # type: ignore[assignment]
            "pulumi.com", "v1", NAMESPACE, "stacks", STACK
        )
        return obj

    def echo_log(self) -> None:
        """Copy the operator's complete log lines since the last call to stdout."""
        with self.operator.log.open("rb") as log:
            log.seek(self._echoed)
            chunk = log.read()
        chunk = chunk[: chunk.rfind(b"\n") + 1]
        self._echoed += len(chunk)
        sys.stdout.write(chunk.decode(errors="replace"))
        sys.stdout.flush()

    def check_operator(self) -> None:
        """Raise DevError if the operator has exited."""
        proc = self.operator.proc
        if proc is not None and proc.poll() is not None:
            tail = "\n".join(self.operator.log.read_text(errors="replace").splitlines()[-10:])
            msg = f"the operator exited with {proc.returncode} ({self.operator.log}):\n{tail}"
            raise DevError(msg)

    @property
    def log_hint(self) -> str:
        """Where the operator's log is."""
        return str(self.operator.log)

    def bin_dir(self) -> Path:
        """A directory holding (a link to) the test kubectl, for the developer's PATH."""
        bin_dir = self.state / "bin"
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "kubectl"
        if not link.exists():
            link.symlink_to(self._kubectl)
        return bin_dir


def print_usage(dev: DevCluster) -> None:
    """How to watch the sample Stack from another terminal."""
    metrics = f"http://127.0.0.1:{dev.operator.metrics_port}/metrics"
    print(
        f"""
The operator is starting. In another terminal:

  export KUBECONFIG={dev.control_plane.kubeconfig}
  export PATH={dev.bin_dir()}:$PATH   # the test kubectl ({dev.bin_dir() / "kubectl"})
  kubectl get stacks -w
  kubectl describe stack {STACK}
  curl -s {metrics} | grep '^pulumi_stack_'

  sample manifest:   {dev.manifest}  (edit spec.config.content, then kubectl apply -f it)
  sample program:    git clone {dev.git.url(STACK)}  (push to main; polled every 60 s)
  what it manages:   {dev.output}
  operator log:      {dev.operator.log}
  other logs:        {dev.state / "logs"}
""",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    """Start, then wait for Ready (``--until-ready``) or follow the log; always stop."""
    if args.node:
        from hack import dev_node  # noqa: PLC0415 - only --node needs the node's test bed

        return dev_node.run(args)
    started = time.monotonic()
    kube, pulumi_bin = binaries()
    with claimed(args.state_dir):
        dev = DevCluster(args.state_dir.resolve(), kube, pulumi_bin, args.operator_flags)
        with dev.running():
            print_usage(dev)
            if not args.until_ready:
                follow(dev, started, args.timeout)
            return until_ready(dev, started, args.timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit 0 on Ready or a clean stop, 1 on failure, 130 if interrupted early."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM does what Ctrl-C does
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where it stands
    try:
        return run(args)
    except (DevError, ProcessError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", None) or ""
        print(f"hack/dev.py: {err}\n{detail}".rstrip(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C is how an interactive run ends; --until-ready was cut short.
        return 130 if args.until_ready else 0


if __name__ == "__main__":
    sys.exit(main())
