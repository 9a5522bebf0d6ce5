"""Users' own programs through the real operator: TypeScript, YAML and Python.

Each program (``testbed/programs/k8s-{ts,yaml,python}``) deploys a Namespace and a ConfigMap
into the test cluster through the real pulumi-kubernetes provider, which the operator gets
from a plugin mirror on this machine (``--plugin-mirror``). The programs' kubeconfig is a
Secret given as the provider's secret config (``kubernetes:kubeconfig``). Under both
runners (``tests.e2e.beds``):

- ``local``: the session's control plane with kube-controller-manager beside it (so a
  destroyed Namespace goes away); packages come from the public registries;
- ``pod``: the node's cluster; run pods have no internet, so packages come through a
  mirror on the host (``workspaceTemplate.spec.env``), and the namespace has the cache
  claim ``pulumi-cache`` (a hostPath volume), which its run pods mount.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed.git_server import Checkout
from testbed.node import NodeCluster
from testbed.node.tenancy import cache_claim, with_env
from testbed.package_mirror import PackageMirror
from testbed.package_mirror import env as mirror_env
from testbed.plugin_mirror import PluginMirror
from testbed.waits import wait_for
from tests.conftest import PROGRAMS
from tests.e2e.beds import OFF_NODE, RUNNERS, Bed
from tests.e2e.conftest import Operator, Stacks, find

pytestmark = [pytest.mark.e2e, pytest.mark.pulumi, pytest.mark.integration]
both_runners = pytest.mark.parametrize("runner", RUNNERS)
off_node = pytest.mark.parametrize("runner", OFF_NODE)  # needs no pod: not on the node
LANGUAGES = {"ts": "nodejs", "yaml": "plugins", "python": "python"}
"""Each program and the dependency kind its second run finds in the cache."""
FIRST_RUN = 900.0  # seconds for a first run: registries, npm ci or pip, the provider


@pytest.fixture
def bed(bed: Bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """The bed, with a plugin mirror, and for pods a package mirror and a cache claim."""
    with with_mirrors(bed, request, tmp_path) as mirrored:
        yield mirrored


@contextlib.contextmanager
def with_mirrors(bed: Bed, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bed]:
    """``bed`` with a plugin mirror, and for pods a package mirror and a cache claim."""
    if not bed.on_node:
        request.getfixturevalue("controller_manager")
        plugins: PluginMirror = request.getfixturevalue("plugin_mirror")
        flags = (*without_mirror(bed.flags), f"--plugin-mirror={plugins.url}")
        yield dataclasses.replace(bed, flags=flags)
        return
    plugins = request.getfixturevalue("node_plugin_mirror")
    packages: PackageMirror = request.getfixturevalue("node_package_mirror")
    cluster: NodeCluster = request.getfixturevalue("node_cluster")
    with cache_claim(cluster, bed.namespace, tmp_path / "cache"):
        yield dataclasses.replace(
            bed,
            flags=(*without_mirror(bed.flags), f"--plugin-mirror={plugins.url}"),
            workspace=with_env(bed.workspace or {}, mirror_env(packages)),
        )


@dataclasses.dataclass(frozen=True)
class Repo:
    """A program's repository on the bed's git server (``url``, the ``checkout`` to push)."""

    url: str
    checkout: Checkout


def push_program(bed: Bed, work: Path, name: str, **changed: str) -> Repo:
    """A repository whose ``app/`` holds the test program ``name`` (files ``changed``)."""
    files = {f"app/{p.name}": p.read_text() for p in (PROGRAMS / name).iterdir() if p.is_file()}
    files |= {f"app/{path}": text for path, text in changed.items()}
    repo = f"{name}-{secrets.token_hex(3)}"
    url = bed.git.create_repo(repo)
    checkout = Checkout(url, work / repo)
    checkout.commit(files, "program")
    return Repo(url, checkout)


def stack(stacks: Stacks, name: str, repo: Repo, config: dict[str, str]) -> dict[str, Any]:
    """A Stack of the program in ``repo``, its kubeconfig from the Secret ``kubeconfig``."""
    kubeconfig = {"type": "Secret", "secret": {"name": "kubeconfig", "key": "value"}}
    return stacks.manifest(
        name,
        repo,  # type: ignore[arg-type]  # has the url a Program has
        config=config,
        secretsRef={"kubernetes:kubeconfig": kubeconfig},
        destroyOnFinalize=True,
    )


def config_map(bed: Bed, namespace: str, name: str = "settings") -> dict[str, str] | None:
    """The ConfigMap's data in the test cluster; None when it does not exist."""
    with bed.control_plane.api_client() as api:
        try:
            found = client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
    return dict(found.data or {})


def namespace_gone(bed: Bed, namespace: str) -> bool:
    """Whether ``namespace`` no longer exists in the test cluster."""
    with bed.control_plane.api_client() as api:
        try:
            client.CoreV1Api(api).read_namespace(namespace)
        except client.ApiException as err:
            if err.status == 404:
                return True
            raise
    return False


def counter(operator: Operator, family: str, kind: str) -> float:
    """A dependency counter's value for ``kind`` on the operator's /metrics."""
    return float(operator.metric(f'{family}{{kind="{kind}"}}') or 0)


def install_seen(stacks: Stacks, name: str) -> list[str]:
    """The install steps the Stack's status showed while it ran (``status.progress``)."""
    assert stacks.watcher is not None
    return [
        str(obj["status"]["progress"]["current"])
        for obj in stacks.watcher.versions(name)
        if (obj.get("status") or {}).get("progress", {}).get("step") == "install"
    ]


@both_runners
@pytest.mark.parametrize("language", list(LANGUAGES))
def test_a_program_deploys_updates_reports_and_destroys(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path, language: str
) -> None:
    """A program's life: deploy, update from the cache, fail, destroy.

    Ready with outputs; the ConfigMap follows the config; the second run installs nothing
    (a cache hit counted); a provider error verbatim in Ready's message; destroyOnFinalize
    removes what it made; no secret leaks (the operator fixture's scan).
    """
    stacks.secret("kubeconfig", {"value": bed.control_plane.kubeconfig.read_text()})
    repo = push_program(bed, tmp_path / "checkouts", f"k8s-{language}")
    namespace = f"app-{language}-{secrets.token_hex(3)}"
    stacks.hand_over()
    stacks.create(stack(stacks, "app", repo, {"namespace": namespace, "content": "one"}))
    status = stacks.wait_ready("app", FIRST_RUN)["status"]
    assert status["outputs"] == {"namespace": namespace, "configMap": "settings", "content": "one"}
    assert config_map(bed, namespace) == {"content": "one"}
    # Progress is written at most every 5 s, so only the longer dependency step is sure
    # to show; the plugin step, often shorter, is seen through its counted miss.
    assert counter(operator, "pulumi_stack_dependency_cache_misses_total", "plugins") == 1
    if language != "yaml":
        seen = install_seen(stacks, "app")
        assert any(step.startswith("installing dependencies") for step in seen), seen
    kind = LANGUAGES[language]
    hits = counter(operator, "pulumi_stack_dependency_cache_hits_total", kind)

    stacks.patch("app", {"spec": {"config": {"content": "two"}}})
    assert stacks.wait_ready("app", 300)["status"]["outputs"]["content"] == "two"
    assert config_map(bed, namespace) == {"content": "two"}
    assert counter(operator, "pulumi_stack_dependency_cache_hits_total", kind) == hits + 1

    stacks.patch("app", {"spec": {"config": {"configMapName": "Not_A_Name"}}})
    failed = stacks.wait_reason("app", "Ready", "UpdateFailed", 300)
    ready = find(failed, "Ready")
    assert ready is not None
    assert 'ConfigMap "Not_A_Name" is invalid' in ready["message"], ready["message"]
    assert "metadata.name: Invalid value" in ready["message"]

    stacks.delete("app")
    stacks.wait_gone("app", 300)
    wait_for(lambda: namespace_gone(bed, namespace), f"namespace {namespace} to go", 180)
    assert_kubeconfig_kept_secret(bed, stacks, operator)


def assert_kubeconfig_kept_secret(bed: Bed, stacks: Stacks, operator: Operator) -> None:
    """The kubeconfig's client key (secret config) is in no status, Event or log line."""
    config = yaml.safe_load(bed.control_plane.kubeconfig.read_text())
    key = config["users"][0]["user"]["client-key-data"]
    assert stacks.watcher is not None
    versions = [json.dumps(obj) for obj in stacks.watcher.versions("app")]  # every status
    seen = [operator.log.read_text(), *versions]
    seen += [str(e.message) for e in stacks.core.list_namespaced_event(stacks.namespace).items]
    assert not [text for text in seen if key in text or key[:64] in text]


@off_node
def test_a_lockfile_out_of_step_stalls_the_stack(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path
) -> None:
    """package.json names a package its lockfile lacks: Stalled DependencyInstallFailed."""
    del operator
    manifest = json.loads((PROGRAMS / "k8s-ts" / "package.json").read_text())
    manifest["dependencies"]["left-pad"] = "1.3.0"
    repo = push_program(
        bed, tmp_path / "checkouts", "k8s-ts", **{"package.json": json.dumps(manifest)}
    )
    stacks.secret("kubeconfig", {"value": bed.control_plane.kubeconfig.read_text()})
    stacks.create(stack(stacks, "broken", repo, {"namespace": "never", "content": "one"}))
    stalled = stacks.wait_reason("broken", "Stalled", "DependencyInstallFailed", FIRST_RUN)
    condition = find(stalled, "Stalled")
    assert condition is not None
    assert condition["message"].startswith("installing dependencies (npm ci) failed: npm EUSAGE")
    assert "left-pad" in condition["message"]
    ready = find(stalled, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "DependencyInstallFailed")
    assert find(stalled, "Reconciling") is None
    events = stacks.wait_events("broken", "DependencyInstallFailed")
    assert {e.type for e in events if e.reason == "DependencyInstallFailed"} == {"Warning"}


NO_SUCH_PACKAGE = "@pulumi/pso-no-such-package"


@both_runners
def test_an_install_failure_names_the_registry_mirror_and_package(
    bed: Bed, stacks: Stacks, operator: Operator, tmp_path: Path
) -> None:
    """The registry's 404 and the plugin mirror's 404 reach Ready whole, not masked.

    The kubeconfig is secret config and, under pods, the package mirror's host is in the
    run pods' plain env (``PIP_TRUSTED_HOST``): neither may mask the registry, the
    mirror, the package or the plugin in the message.
    """
    del operator
    stacks.secret("kubeconfig", {"value": bed.control_plane.kubeconfig.read_text()})
    npm = push_files(bed, tmp_path / "npm", "npm-404", npm_program())
    stacks.create(stack(stacks, "npm-404", npm, {}))
    yaml_program = (PROGRAMS / "k8s-yaml" / "Pulumi.yaml").read_text()
    plugin = push_program(
        bed,
        tmp_path / "plugin",
        "k8s-yaml",
        **{"Pulumi.yaml": yaml_program.replace("4.25.0", "4.99.0")},
    )
    stacks.create(stack(stacks, "plugin-404", plugin, {"namespace": "never", "content": "x"}))

    npm_message = failure_message(stacks, "npm-404")
    assert "404" in npm_message, npm_message
    assert f"{registry(bed)}{NO_SUCH_PACKAGE.replace('/', '%2f')}" in npm_message, npm_message
    plugin_message = failure_message(stacks, "plugin-404")
    assert "4.99.0" in plugin_message, plugin_message
    assert plugin_mirror_url(bed.flags) in plugin_message, plugin_message
    assert "[secret]" not in npm_message + plugin_message


def npm_program() -> dict[str, str]:
    """A TypeScript-less Node.js program depending on a package no registry has."""
    manifest = {"name": "npm-404", "dependencies": {NO_SUCH_PACKAGE: "1.0.0"}}
    return {
        "app/Pulumi.yaml": "name: npm-404\nruntime: nodejs\n",
        "app/package.json": json.dumps(manifest),
        "app/index.js": "module.exports = {};\n",
    }


def push_files(bed: Bed, work: Path, name: str, files: dict[str, str]) -> Repo:
    """A repository of ``files`` on the bed's git server."""
    repo = f"{name}-{secrets.token_hex(3)}"
    url = bed.git.create_repo(repo)
    checkout = Checkout(url, work / repo)
    checkout.commit(files, "program")
    return Repo(url, checkout)


def failure_message(stacks: Stacks, name: str) -> str:
    """Ready's message once the Stack's install failed (retried or stalled)."""

    def failed(obj: dict[str, Any]) -> bool:
        ready = find(obj, "Ready") or {}
        return ready.get("status") == "False" and "install" in str(ready.get("message"))

    found = stacks.wait(name, failed, "Ready=False on an install failure", FIRST_RUN)
    return str(find(found, "Ready")["message"])  # type: ignore[index]


def registry(bed: Bed) -> str:
    """The npm registry the bed's runs use (ends with ``/``)."""
    for entry in ((bed.workspace or {}).get("spec") or {}).get("env", []):
        if entry["name"] == "NPM_CONFIG_REGISTRY":
            return str(entry["value"]).rstrip("/") + "/"
    return "https://registry.npmjs.org/"


def without_mirror(flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` without a ``--plugin-mirror`` (the bed's own, for the files program)."""
    return tuple(f for f in flags if not f.startswith("--plugin-mirror="))


def plugin_mirror_url(flags: tuple[str, ...]) -> str:
    """The ``--plugin-mirror`` the operator was given."""
    [url] = [f.split("=", 1)[1] for f in flags if f.startswith("--plugin-mirror=")]
    return url.rstrip("/")
