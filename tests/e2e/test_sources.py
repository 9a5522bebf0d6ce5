"""PKO's other program sources through the real operator: Program objects and Flux sources.

Under both runners (``tests.e2e.beds``), with the real pulumi-kubernetes provider from the
plugin mirror (as ``test_programs``), a YAML program creates a Namespace and a ConfigMap in
the test cluster:

- from a ``Program`` (``programRef``, PKO's program-source example with a Kubernetes
  resource instead of a random password), its config partly from a ConfigMap
  (``configRef``, PKO's structured-config example): Ready, ``status.projectInfo``; an edit
  of the Program runs the Stack again, by the Program's informer;
- from a Flux ``GitRepository`` (``fluxSource``, PKO's flux-source example) served by the
  real source-controller, which builds the artifact from a smart-HTTP git server: Ready at
  the artifact's revision; a push gives a new revision, which runs the Stack again, by the
  GitRepository's informer. Under the pod runner the run pod downloads and verifies the
  artifact itself, from the source-controller on the host (``host_ip``).
"""

from __future__ import annotations

import contextlib
import secrets
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from testbed.flux import SourceController
from testbed.flux import find_binary as find_source_controller
from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout
from testbed.node import NodeCluster
from testbed.waits import wait_for
from tests.conftest import PROGRAMS
from tests.e2e.beds import OFF_NODE, RUNNERS, Bed
from tests.e2e.conftest import Operator, Stacks
from tests.e2e.test_programs import (
    FIRST_RUN,
    assert_kubeconfig_kept_secret,
    config_map,
    namespace_gone,
    with_mirrors,
)

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
both_runners = pytest.mark.parametrize("runner", RUNNERS)
off_node = pytest.mark.parametrize("runner", OFF_NODE)  # needs no pod: not on the node
KUBECONFIG = {"type": "Secret", "secret": {"name": "kubeconfig", "key": "value"}}
BRANCH = "main"
NO_REPO = types.SimpleNamespace(url=None)
GIT_CREDENTIALS = "git-credentials"


@pytest.fixture
def bed(bed: Bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """The bed, with a plugin mirror, and for pods a package mirror and a cache claim."""
    with with_mirrors(bed, request, tmp_path) as mirrored:
        yield mirrored


def k8s_program() -> dict[str, Any]:
    """The k8s-yaml test program as a Program's ``program`` (``config`` → ``configuration``)."""
    project = yaml.safe_load((PROGRAMS / "k8s-yaml" / "Pulumi.yaml").read_text())
    configuration = {
        name: {"type": "String", **({"default": v["default"]} if "default" in v else {})}
        for name, v in project["config"].items()
    }
    return {
        "configuration": configuration,
        "resources": project["resources"],
        "outputs": project["outputs"],
    }


def source_stack(stacks: Stacks, name: str, **spec: Any) -> dict[str, Any]:
    """A Stack with no git source (``spec`` gives one), the provider's kubeconfig secret."""
    return stacks.manifest(
        name,
        NO_REPO,  # type: ignore[arg-type]  # has the url a Program has; removed below
        projectRepo=None,
        branch=None,
        repoDir=None,
        secretsRef={"kubernetes:kubeconfig": KUBECONFIG},
        destroyOnFinalize=True,
        **spec,
    )


def apply_program(bed: Bed, namespace: str, name: str, program: dict[str, Any]) -> None:
    """Create or replace the Program ``name`` in ``namespace``."""
    metadata: dict[str, Any] = {"name": name}
    body: dict[str, Any] = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Program",
        "metadata": metadata,
        "program": program,
    }
    with bed.control_plane.api_client() as api:
        programs = client.CustomObjectsApi(api)
        try:
            current = cast(
                "dict[str, Any]",
                programs.get_namespaced_custom_object(
                    "pulumi.com", "v1", namespace, "programs", name
                ),
            )
        except client.ApiException as err:
            if err.status != 404:
                raise
            programs.create_namespaced_custom_object(
                "pulumi.com", "v1", namespace, "programs", body
            )
            return
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        programs.replace_namespaced_custom_object(
            "pulumi.com", "v1", namespace, "programs", name, body
        )


def put_config_map(bed: Bed, namespace: str, name: str, data: dict[str, str]) -> None:
    """Create the ConfigMap ``name`` in ``namespace``."""
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)
    with bed.control_plane.api_client() as api:
        client.CoreV1Api(api).create_namespaced_config_map(namespace, body)


def updates(stacks: Stacks, name: str) -> int:
    """How many finished updates the Stack's history records."""
    return len(stacks.get(name).get("status", {}).get("history") or [])


@off_node
def test_a_program_object_deploys_and_each_edit_runs_again(
    bed: Bed, stacks: Stacks, operator: Operator
) -> None:
    """A Program and configRef: Ready with projectInfo; an edit runs it again; destroy."""
    stacks.secret("kubeconfig", {"value": bed.control_plane.kubeconfig.read_text()})
    namespace = f"prog-{bed.runner}-{secrets.token_hex(3)}"
    put_config_map(bed, bed.namespace, "app-config", {"content": "from-configmap"})
    program = k8s_program()
    apply_program(bed, bed.namespace, "k8s-yaml", program)
    stacks.hand_over()
    stacks.create(
        source_stack(
            stacks,
            "app",
            programRef={"name": "k8s-yaml"},
            config={"namespace": namespace, "content": "inline"},
            configRef={"content": {"name": "app-config", "key": "content"}},
        )
    )
    status = stacks.wait_ready("app", FIRST_RUN)["status"]
    assert config_map(bed, namespace) == {"content": "from-configmap"}, "configRef wins"
    assert status["projectInfo"] == {"name": "k8s-yaml", "runtime": "yaml"}
    first = status["lastUpdate"]["lastSuccessfulCommit"]
    assert first.startswith("sha256:")
    runs = updates(stacks, "app")

    program["outputs"]["extra"] = "${settings.metadata.namespace}"
    apply_program(bed, bed.namespace, "k8s-yaml", program)
    wait_for(lambda: updates(stacks, "app") > runs, "the Program's edit to run the Stack", 300)
    status = stacks.wait_ready("app", 300)["status"]
    assert status["outputs"]["extra"] == namespace
    assert status["lastUpdate"]["lastSuccessfulCommit"] != first

    stacks.delete("app")
    stacks.wait_gone("app", 300)
    wait_for(lambda: namespace_gone(bed, namespace), f"namespace {namespace} to go", 180)
    assert_kubeconfig_kept_secret(bed, stacks, operator)


@pytest.fixture
def flux(bed: Bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SourceController]:
    """The source-controller of the bed's control plane, serving what its run pods reach.

    The session's on loopback for the local runner; for pods one on the node's control
    plane whose artifact server listens on the host's address on the node's network.
    """
    if not bed.on_node:
        yield request.getfixturevalue("flux_source")
        return
    cluster: NodeCluster = request.getfixturevalue("node_cluster")
    with contextlib.ExitStack() as stack:
        controller = SourceController(
            find_source_controller(build=False),
            cluster.kubeconfig,
            cluster.kubectl,
            tmp_path / "flux",
            host=cluster.host_ip,
        )
        stack.enter_context(controller)
        yield controller
    assert controller.leftovers() == [], f"source-controller left {controller.leftovers()}"


@both_runners
@pytest.mark.flux
def test_a_flux_source_deploys_each_new_revision(
    bed: Bed,
    stacks: Stacks,
    operator: Operator,
    flux: SourceController,
    flux_git: GitHttpServer,
    flux_account: Account,
    tmp_path: Path,
) -> None:
    """A Flux GitRepository: Ready at its artifact's revision; a push runs it again; destroy."""
    stacks.secret("kubeconfig", {"value": bed.control_plane.kubeconfig.read_text()})
    namespace = f"flux-{bed.runner}-{secrets.token_hex(3)}"
    repo = f"infra-{secrets.token_hex(3)}"
    url = flux_git.create_repo(repo, BRANCH)
    checkout = Checkout(flux_git.push_url(repo), tmp_path / repo, BRANCH)
    program = (PROGRAMS / "k8s-yaml" / "Pulumi.yaml").read_text()
    first = checkout.commit({"app/Pulumi.yaml": program}, "program")
    flux.credentials(bed.namespace, GIT_CREDENTIALS, flux_account.username, flux_account.password)
    flux.git_repository(bed.namespace, "infra", url, BRANCH, secret=GIT_CREDENTIALS)
    stacks.hand_over()
    stacks.create(
        source_stack(
            stacks,
            "app",
            fluxSource={
                "sourceRef": {
                    "apiVersion": "source.toolkit.fluxcd.io/v1",
                    "kind": "GitRepository",
                    "name": "infra",
                },
                "dir": "app/",
            },
            config={"namespace": namespace, "content": "one"},
        )
    )
    status = stacks.wait_ready("app", FIRST_RUN)["status"]
    assert status["lastUpdate"]["lastSuccessfulCommit"] == f"{BRANCH}@sha1:{first}"
    assert status["lastUpdate"]["shortCommit"] == first[:7]
    assert config_map(bed, namespace) == {"content": "one"}

    changed = program.replace("content: ${content}", "content: ${content}-pushed")
    second = checkout.commit({"app/Pulumi.yaml": changed}, "change")
    flux.reconcile_now(bed.namespace, "infra")
    wanted = f"{BRANCH}@sha1:{second}"

    def deployed() -> bool:
        last = stacks.get("app").get("status", {}).get("lastUpdate") or {}
        return bool(last.get("lastSuccessfulCommit") == wanted)

    wait_for(deployed, "the pushed revision to be deployed", 300)
    assert config_map(bed, namespace) == {"content": "one-pushed"}

    stacks.delete("app")
    stacks.wait_gone("app", 300)
    wait_for(lambda: namespace_gone(bed, namespace), f"namespace {namespace} to go", 180)
    assert_kubeconfig_kept_secret(bed, stacks, operator)
