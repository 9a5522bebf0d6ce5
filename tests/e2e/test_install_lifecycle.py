"""Upgrading and uninstalling as ``docs/installation.md`` says, on a control plane of its own.

The commands run are the page's own, read from its "Upgrading" and "Uninstalling" sections,
so the page cannot name one that does not do what it says. Each test has a control plane of
its own: they apply and delete the CRDs, which on the session's would touch every worker's
Stacks.

- Upgrading: Stacks and a Program written under the previous CRDs
  (``tests/manifests/previous-crds``), one of them Ready by a run; the page's CRD command
  applies the current CRDs over them; every object reads back as written (nothing pruned),
  takes a status patch, and the restarted operator keeps the Ready Stack's verdict without
  a run, then runs its next change.
- Uninstalling: with the operator running, the page's ``kubectl delete stacks`` destroys
  the resources of the Stack with ``destroyOnFinalize: true`` and leaves the other's; then,
  with the operator gone, deleting the CRDs hangs on a Stack's finalizer until the page's
  patch removes it, and that Stack's resources stay.

The local runner runs the Stacks here: what is proven is the API server's and the
operator's handling of the CRDs, not where a run happens (``tests/charts`` installs and
upgrades the chart on the node, under the pod runner).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.assets import find_pulumi
from testbed.assets.lookup import find_kube_binary
from testbed.control_plane import Binaries, ControlPlane, wait_established
from testbed.git_server import GitServer
from testbed.operator import Operator
from testbed.plugin_mirror import PluginMirror
from testbed.rbac import operator_kubeconfig
from testbed.waits import wait_for
from tests.e2e.conftest import E2E_FLAGS, Program, Sentinels, Stacks, is_ready
from tests.manifests.test_crd_upgrade import PREVIOUS
from tests.reconcile.crd.helpers import FULL_SPEC, apply_stack, get_stack, patch_status
from tests.status.invariants import StackWatcher
from tests.test_docs import CODE, DOCS, REPO, section

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.pulumi, pytest.mark.git]

PAGE: Final = DOCS / "installation.md"
NAMESPACE: Final = "apps"  # the operator's
WRITTEN: Final = "written"  # a namespace the operator does not watch
CRDS: Final = ("stacks.pulumi.com", "programs.pulumi.com")
PROGRAM: Final = {
    "apiVersion": "pulumi.com/v1",
    "kind": "Program",
    "metadata": {"name": "hello", "namespace": WRITTEN},
    "program": {"variables": {"word": "hello"}, "outputs": {"greeting": "${word}"}},
}


UPGRADE_CRDS: Final = "kubectl apply --server-side -k manifests/crd"
DELETE_STACKS: Final = "kubectl delete stacks --all --all-namespaces --wait"
DELETE_CRDS: Final = "kubectl delete -k manifests/crd"
LET_GO: Final = (
    "kubectl patch stack NAME --type=json"
    """ -p '[{"op":"remove","path":"/metadata/finalizers"}]'"""
)


def shown(heading: str, command: str, root: Path = REPO) -> list[str]:
    """``command``'s kubectl arguments, once the page shows it under ``heading``.

    Relative paths that exist under ``root`` (``manifests/crd``, a chart's ``crds/``) are
    made absolute.
    """
    spans = CODE.findall(section(PAGE, heading))
    assert command in spans, f"{PAGE.name} no longer shows {command!r} under {heading!r}"
    args = shlex.split(command)[1:]
    return [str(root / a) if "/" in a and (root / a).exists() else a for a in args]


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane (etcd, kube-apiserver) for this test alone; stopped after."""
    binaries = Binaries(*(find_kube_binary(b) for b in ("etcd", "kube-apiserver", "kubectl")))
    own = ControlPlane(binaries, tmp_path / "control-plane")
    try:
        own.start()
        yield own
    finally:
        own.stop()


@pytest.fixture
def operator(plane: ControlPlane, files_mirror: PluginMirror, tmp_path: Path) -> Iterator[Operator]:
    """The operator (local runner) serving ``NAMESPACE`` with the single-namespace RBAC.

    Not started: each test starts it once the CRDs it means are in place.
    """
    mirror = f"--plugin-mirror={files_mirror.url}"
    op = Operator(
        operator_kubeconfig(plane, NAMESPACE, watch=[NAMESPACE]),
        tmp_path / "operator.log",
        namespaces=[NAMESPACE],
        work_dir=tmp_path / "work",
        flags=(*E2E_FLAGS, f"--leader-election-namespace={NAMESPACE}", mirror),
        pulumi_bin=find_pulumi(),
    )
    try:
        yield op
    finally:
        op.stop()
        if op.log.exists():
            print(f"--- operator log ({op.log})\n{op.log.read_text()[-6000:]}")  # noqa: T201


@pytest.fixture
def program(git_server: GitServer, tmp_path: Path) -> Program:
    """A repository of the files program on the session's git server."""
    return Program(git_server, tmp_path / "checkouts", "yaml")  # its operator has the mirror


@pytest.fixture
def first_crds() -> list[str]:
    """The kubectl arguments that install the CRDs at first: the page's command."""
    return shown("## Upgrading", UPGRADE_CRDS)


@pytest.fixture
def stacks(
    plane: ControlPlane, operator: Operator, sentinels: Sentinels, first_crds: list[str]
) -> Iterator[Stacks]:
    """Stack helpers in ``NAMESPACE`` (which the operator's RBAC created), watched.

    The CRDs ``first_crds`` installs are in place first (the watch needs them).
    """
    del operator
    apply_crds(plane, *first_crds)
    with plane.api_client() as api, StackWatcher(api, NAMESPACE) as watcher:
        helper = Stacks(api, NAMESPACE, plane.root.parent / "state" / "backend")
        helper.backend.mkdir(parents=True)
        helper.watcher = watcher
        helper.secret("pulumi-secrets", {"passphrase": sentinels.passphrase})
        yield helper
        watcher.assert_clean()


def apply_crds(plane: ControlPlane, *args: str) -> None:
    """``kubectl apply`` ``args`` (CRDs), then wait until both are Established."""
    plane.kubectl(*args)
    for crd in CRDS:
        wait_established(plane.kubectl, crd)


def reconciles(metrics: str) -> float:
    """How many reconciles an operator's /metrics text counts, by any result."""
    families = text_string_to_metric_families(metrics)
    return sum(
        sample.value
        for family in families
        if family.name == "controller_runtime_reconcile"
        for sample in family.samples
        if sample.name == "controller_runtime_reconcile_total"
    )


def ran(stacks: Stacks, name: str) -> dict[str, Any]:
    """What the Stack's runs recorded: ``lastUpdate`` and ``history``."""
    status = stacks.get(name).get("status") or {}
    return {"lastUpdate": status.get("lastUpdate"), "history": status.get("history")}


def written(obj: dict[str, Any]) -> dict[str, Any]:
    """What a writer put in an object: everything but the server's bookkeeping."""
    kept = {k: v for k, v in obj.items() if k != "metadata"}
    metadata = obj["metadata"]
    kept["metadata"] = {k: metadata.get(k) for k in ("name", "labels", "annotations", "finalizers")}
    return kept


@pytest.mark.parametrize(
    "first_crds", [["apply", "--server-side", "-f", str(PREVIOUS)]], ids=["previous"]
)
def test_objects_written_under_the_previous_crds_read_and_run_after_the_upgrade(
    plane: ControlPlane, operator: Operator, stacks: Stacks, program: Program, tmp_path: Path
) -> None:
    """Nothing pruned, status patches taken, the verdict kept without a run, the next run runs."""
    stacks.create(stacks.manifest("app", program))
    operator.start()
    stacks.wait_ready("app", timeout=120)
    earned = ran(stacks, "app")
    assert operator.stop() == 0
    # Every field the previous Stack CRD took, with the status the operator wrote.
    plane.kubectl("create", "namespace", WRITTEN)
    apply_stack(plane, tmp_path, WRITTEN, FULL_SPEC, "full").check_returncode()
    status = {k: v for k, v in stacks.get("app")["status"].items() if k != "observedGeneration"}
    patch_status(plane, WRITTEN, "full", status).check_returncode()
    (tmp_path / "program.json").write_text(json.dumps(PROGRAM))
    plane.kubectl("apply", "--server-side", "-f", str(tmp_path / "program.json"))
    before = {
        "full": written(get_stack(plane, WRITTEN, "full")),
        "app": written(stacks.get("app")),
        "program": written(read(plane, "program", "hello", WRITTEN)),
    }

    apply_crds(plane, *shown("## Upgrading", UPGRADE_CRDS))

    # The change between the two: spec.commit takes any string now (no pattern).
    assert "pattern" in commit_schema(yaml.safe_load((PREVIOUS / f"{CRDS[0]}.yaml").read_text()))
    assert "pattern" not in commit_schema(read(plane, "crd", CRDS[0])), "the CRD was not upgraded"
    after = {
        "full": written(get_stack(plane, WRITTEN, "full")),
        "app": written(stacks.get("app")),
        "program": written(read(plane, "program", "hello", WRITTEN)),
    }
    assert after == before, "an object written under the previous CRDs reads differently"
    patch_status(plane, WRITTEN, "full", {"observedGeneration": 1}).check_returncode()

    operator.start()
    wait_for(
        lambda: reconciles(operator.metrics()) >= 2, "two reconciles of the upgraded Stack", 60
    )
    assert is_ready(stacks.get("app"))
    assert ran(stacks, "app") == earned, "the upgraded operator ran the Stack again"
    stacks.patch("app", {"spec": {"config": {"content": "two"}}})
    stacks.wait(
        "app",
        lambda o: is_ready(o) and o["status"]["observedGeneration"] == o["metadata"]["generation"],
        "Ready at the new generation",
        120,
    )
    assert stacks.target("app").read_text() == "two"


def commit_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The schema of ``spec.commit`` in the Stack CRD's storage version."""
    [version] = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    commit: dict[str, Any] = schema["properties"]["commit"]
    return commit


def read(plane: ControlPlane, *args: str) -> dict[str, Any]:
    """``kubectl get ARGS -o json`` (a name, then ``-n NS`` when namespaced)."""
    kind, name, *namespace = args
    scope = ["-n", namespace[0]] if namespace else []
    result: dict[str, Any] = json.loads(
        plane.kubectl("get", kind, name, *scope, "-o", "json").stdout
    )
    return result


def test_uninstalling_as_the_page_says_destroys_what_it_was_told_and_keeps_the_rest(
    plane: ControlPlane, operator: Operator, stacks: Stacks, program: Program
) -> None:
    """``destroyOnFinalize`` destroys; without it resources stay; a stuck Stack is let go."""
    stacks.create(stacks.manifest("destroyed", program, destroyOnFinalize=True))
    stacks.create(stacks.manifest("kept", program))
    operator.start()
    for name in ("destroyed", "kept"):
        stacks.wait_ready(name, timeout=120)
        assert stacks.target(name).read_text() == "one"

    plane.kubectl(*shown("## Uninstalling", DELETE_STACKS), timeout=180)
    assert stacks.listing() == []
    assert not stacks.target("destroyed").exists(), "destroyOnFinalize: true destroyed nothing"
    assert stacks.target("kept").read_text() == "one", "a Stack without it lost its resources"

    stacks.create(stacks.manifest("stranded", program))
    stacks.wait_ready("stranded", timeout=120)
    assert operator.stop() == 0
    plane.kubectl(*shown("## Uninstalling", DELETE_CRDS), "--wait=false")
    wait_for(lambda: terminating(plane, "stacks.pulumi.com"), "the Stack CRD to be terminating", 60)
    # The CRD's finalizer deletes its objects, the operator's finalizer holds this one.
    wait_for(
        lambda: stacks.get("stranded")["metadata"].get("deletionTimestamp"),
        "the CRD's deletion to delete the Stack",
        60,
    )
    assert stacks.get("stranded")["metadata"]["finalizers"] == ["finalizer.stack.pulumi.com"]
    assert terminating(plane, "stacks.pulumi.com"), "the CRD went with a Stack held"
    let_go = shown("## Uninstalling", LET_GO)
    plane.kubectl(*[a if a != "NAME" else "stranded" for a in let_go], "-n", NAMESPACE)
    wait_for(lambda: not crds_left(plane), "the CRDs to be gone", 60)
    assert stacks.target("stranded").read_text() == "one", "the stranded Stack was destroyed"


def terminating(plane: ControlPlane, crd: str) -> bool:
    """Whether the CRD is being deleted (and waits on its objects' finalizers)."""
    return bool(read(plane, "crd", crd)["metadata"].get("deletionTimestamp"))


def crds_left(plane: ControlPlane) -> list[str]:
    """The names of the operator's CRDs the API server still has."""
    names = plane.kubectl("get", "crd", "-o", "name").stdout.split()
    return [n for n in names if re.sub(r"^.*/", "", n) in CRDS]
