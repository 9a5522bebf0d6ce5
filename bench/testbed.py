"""The benchmarks' test bed: the real components of ``testbed/``, started once per run.

``TestBed.start()`` starts etcd + kube-apiserver (``ControlPlane``, binaries from
``testbed.assets``), applies the Stack CRD with ``kubectl apply --server-side``, starts a
``git daemon`` and pushes the ``files`` test program (under ``app/``) as one commit, which
every benchmark Stack pins; ``push`` puts another program into a repository of its own the
same way. Everything lives under one directory, removed by the caller.

``namespace(prefix)`` makes a fresh namespace holding the passphrase Secret the Stacks'
``envRefs`` point at. The passphrase is the test bed's throw-away one, not a secret.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from kubernetes import client, config

from testbed.assets import find_kube_binary, find_pulumi
from testbed.control_plane import Binaries, ControlPlane
from testbed.git_server import Checkout, GitServer
from testbed.pulumi_env import TEST_PASSPHRASE

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "testbed" / "programs" / "files"
STACK_CRD = REPO / "manifests" / "crd" / "stacks.pulumi.com.yaml"
PASSPHRASE_SECRET = "pulumi-secrets"  # noqa: S105 - the Secret's name
POOL_SIZE = 16  # HTTP connections of the bench's own API client (seeding uses 8 threads)


class TestBed:
    """Control plane, git server and the pinned program; see the module docstring."""

    __test__ = False  # not a pytest class, despite the name

    def __init__(self, root: Path) -> None:
        """Prepare (not start) a test bed under ``root``."""
        self.root = root
        binaries = Binaries(*(find_kube_binary(b) for b in ("etcd", "kube-apiserver", "kubectl")))
        self.control_plane = ControlPlane(binaries, root / "control-plane")
        self.git = GitServer(root / "git")
        self.pulumi_bin = find_pulumi()
        self.backend = root / "state" / "backend"
        self.repo_url = ""
        self.commit = ""
        self._api: client.ApiClient | None = None

    def start(self) -> None:
        """Start everything and push the program; see the module docstring."""
        self.backend.mkdir(parents=True, exist_ok=True)
        self.control_plane.start()
        kubectl = self.control_plane.kubectl
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(STACK_CRD))
        kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/stacks.pulumi.com")
        self.git.start()
        self.repo_url, self.commit = self.push(PROGRAM, "files")

    def push(self, program: Path, repo: str) -> tuple[str, str]:
        """Push ``program``'s files (under ``app/``) as one commit to a new repository ``repo``.

        Returns the repository's clone URL and the commit.
        """
        return push_program(self.git, self.root / "checkouts", program, repo)

    def stop(self) -> None:
        """Stop the git server and the control plane."""
        if self._api is not None:
            self._api.close()
        self.git.stop()
        self.control_plane.stop()

    @property
    def api(self) -> client.ApiClient:
        """The bench's admin API client (shared; thread-safe, pooled)."""
        if self._api is None:
            self._api = admin_client(self.control_plane.kubeconfig)
        return self._api

    def namespace(self, prefix: str) -> str:
        """A fresh namespace with the passphrase Secret in it."""
        return passphrase_namespace(self.api, prefix)

    def event_count(self, namespace: str) -> tuple[int, int]:
        """Event objects in ``namespace`` and the sum of their ``count`` fields."""
        items = client.CoreV1Api(self.api).list_namespaced_event(namespace).items
        return len(items), sum(e.count or 1 for e in items)


@contextlib.contextmanager
def started(prefix: str, *, keep: bool, say: Callable[[str], None]) -> Iterator[TestBed]:
    """A started ``TestBed`` in a new directory named with ``prefix``; stopped on leaving.

    The directory is removed afterwards, or kept (and said) with ``keep``.
    """
    root = Path(tempfile.mkdtemp(prefix=prefix))
    bed = TestBed(root)
    try:
        say(f"starting the test bed in {root}")
        bed.start()
        yield bed
    finally:
        bed.stop()
        if keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def admin_client(kubeconfig: Path) -> client.ApiClient:
    """A pooled, thread-safe API client for the admin user of ``kubeconfig``."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = POOL_SIZE
    return client.ApiClient(configuration)


def push_program(git: GitServer, checkouts: Path, program: Path, repo: str) -> tuple[str, str]:
    """Push ``program``'s files (under ``app/``) as one commit to a new repository ``repo``.

    The work tree is ``checkouts/<repo>``. Returns the repository's clone URL and the commit.
    """
    url = git.create_repo(repo)
    checkout = Checkout(url, checkouts / repo)
    sources = {f"app/{p.name}": p.read_text() for p in program.iterdir() if p.is_file()}
    return url, checkout.commit(sources, f"the {program.name} program")


def passphrase_namespace(api: client.ApiClient, prefix: str) -> str:
    """A fresh namespace ``<prefix>-<random>`` holding the passphrase Secret; its name."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    passphrase_secret(api, name)
    return name


def passphrase_secret(api: client.ApiClient, namespace: str) -> None:
    """Create the passphrase Secret the Stacks' ``envRefs`` point at in ``namespace``."""
    data: dict[str, bytes | str] = {
        "passphrase": base64.b64encode(TEST_PASSPHRASE.encode()).decode()
    }
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name=PASSPHRASE_SECRET), data=data)
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
