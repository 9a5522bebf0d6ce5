"""The operator's own RBAC in the test control plane, and a kubeconfig that acts as the operator.

``operator_kubeconfig`` server-side applies what ``manifests/`` renders for the operator's
identity: the ServiceAccount and its leader-election Role in ``namespace``, the metrics
reviews' ClusterRole, plus either the ClusterRole (``watch`` empty: all namespaces, as
``manifests/default``) or the single-namespace overlay's Role in each watched namespace.
It then asks the TokenRequest API for a token of that ServiceAccount and writes a
kubeconfig that authenticates with it.
An operator started with that kubeconfig has exactly the permissions it has in a cluster,
so a missing rule fails a test with 403 instead of passing as admin.

Caller obligations: ``namespace`` is created if missing, the watched namespaces must exist.
The operator runs outside a pod, so it must be given
``--leader-election-namespace=<namespace>`` (in a pod that is the default).

Cheap and idempotent: the manifests are rendered once per process, the apply is one
server-side ``kubectl apply`` under a fixed field manager, and cluster-scoped bindings are
named after ``namespace``, so operators installed in different namespaces never collide and
calling again for the same namespace changes nothing (it only issues a fresh token). The
token is valid for a day: call once per session, or per test.
"""

from __future__ import annotations

import copy
import functools
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from testbed.control_plane import ControlPlane

MANIFESTS = Path(__file__).parents[1] / "manifests"
SERVICE_ACCOUNT = "pulumi-stack-operator"
METRICS_AUTH = f"{SERVICE_ACCOUNT}-metrics-auth"  # the --metrics-secure reviews, every install
METRICS_READER = f"{SERVICE_ACCOUNT}-metrics-reader"  # scrapers allowed to get /metrics
FIELD_MANAGER = "pulumi-stack-operator-testbed"
TOKEN_SECONDS = 24 * 3600
GRANT_TIMEOUT = 10.0  # seconds for the apiserver's RBAC cache to see the new bindings

Manifest = dict[str, Any]


def operator_kubeconfig(
    control_plane: ControlPlane,
    namespace: str,
    watch: Sequence[str] = (),
    *,
    cluster_role: bool = False,
) -> Path:
    """Install the operator's RBAC for ``namespace`` (all namespaces, or ``watch``).

    With ``watch`` and ``cluster_role``, the watched namespaces are granted the ClusterRole
    by RoleBindings, as ``overlays/namespaces`` does, instead of the single-namespace Role.
    Returns the path of a kubeconfig authenticating as the ServiceAccount
    ``<namespace>/pulumi-stack-operator``, once the apiserver grants it what it should.
    """
    rbac = rbac_objects(control_plane, namespace, watch, cluster_role=cluster_role)
    objects = [_namespace(namespace), *rbac]
    path = control_plane.root / "rbac" / f"{namespace}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects))
    control_plane.kubectl(
        "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
        "-f", str(path),
    )  # fmt: skip
    kubeconfig = control_plane.root / f"kubeconfig-operator-{namespace}"
    _write_token_kubeconfig(control_plane, kubeconfig, _token(control_plane, namespace))
    _wait_for_grant(control_plane, kubeconfig, watch[0] if watch else None)
    return kubeconfig


def rbac_objects(
    control_plane: ControlPlane,
    namespace: str,
    watch: Sequence[str] = (),
    *,
    cluster_role: bool = False,
) -> list[Manifest]:
    """The RBAC objects for an operator whose ServiceAccount lives in ``namespace``.

    ``cluster_role``: see ``operator_kubeconfig``.
    """
    rbac = _render(str(control_plane.binaries.kubectl), "rbac")
    single = _render(str(control_plane.binaries.kubectl), "overlays/single-namespace")
    served = _render(str(control_plane.binaries.kubectl), "overlays/namespaces")
    identity = [
        _pick(rbac, "ServiceAccount", SERVICE_ACCOUNT),
        _pick(rbac, "Role", f"{SERVICE_ACCOUNT}-leader-election"),
        _pick(rbac, "RoleBinding", f"{SERVICE_ACCOUNT}-leader-election"),
    ]
    objects = [_placed(obj, namespace, namespace) for obj in identity]
    reviews = _placed(_pick(rbac, "ClusterRoleBinding", METRICS_AUTH), None, namespace)
    reviews["metadata"]["name"] = f"{METRICS_AUTH}-{namespace}"
    readers = _pick(rbac, "ClusterRole", METRICS_READER)  # for scrapers to be bound to
    objects += [_pick(rbac, "ClusterRole", METRICS_AUTH), reviews, readers]
    if not watch:
        binding = _placed(_pick(rbac, "ClusterRoleBinding", SERVICE_ACCOUNT), None, namespace)
        binding["metadata"]["name"] = f"{SERVICE_ACCOUNT}-{namespace}"
        return [*objects, _pick(rbac, "ClusterRole", SERVICE_ACCOUNT), binding]
    if cluster_role:
        objects.append(_pick(rbac, "ClusterRole", SERVICE_ACCOUNT))
    for watched in watch:
        source = served if cluster_role else single
        binding = _placed(_pick(source, "RoleBinding", SERVICE_ACCOUNT), watched, namespace)
        binding["metadata"]["name"] = f"{SERVICE_ACCOUNT}-{namespace}"
        objects.append(binding)
        if not cluster_role:
            objects.append(_placed(_pick(single, "Role", SERVICE_ACCOUNT), watched, namespace))
    return objects


@functools.cache
def _render(kubectl: str, directory: str) -> tuple[Manifest, ...]:
    """``kubectl kustomize manifests/<directory>``, parsed (once per process)."""
    out = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / directory)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def _pick(objects: Sequence[Manifest], kind: str, name: str) -> Manifest:
    """A deep copy of the first rendered object ``kind/name`` (the render cache stays intact)."""
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return copy.deepcopy(obj)
    msg = f"manifests render no {kind} {name}"
    raise LookupError(msg)


def _placed(obj: Manifest, namespace: str | None, subject_namespace: str) -> Manifest:
    """``obj`` moved to ``namespace`` (None: cluster-scoped), its subjects to the SA's."""
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    for subject in obj.get("subjects", ()):
        subject["namespace"] = subject_namespace
    return obj


def _namespace(name: str) -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _token(control_plane: ControlPlane, namespace: str) -> str:
    """A bound token of the operator's ServiceAccount (the TokenRequest API)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    with control_plane.api_client() as api:
        issued = client.CoreV1Api(api).create_namespaced_service_account_token(
            SERVICE_ACCOUNT, namespace, request
        )
    assert issued.status is not None
    assert issued.status.token
    return issued.status.token


def _write_token_kubeconfig(control_plane: ControlPlane, path: Path, token: str) -> None:
    """The admin kubeconfig's cluster (server, CA) with a bearer-token user."""
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"] = [{"name": "envtest", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


def _wait_for_grant(control_plane: ControlPlane, kubeconfig: Path, namespace: str | None) -> None:
    """Wait until the token may list Stacks where the operator watches them."""
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group="pulumi.com", resource="stacks", verb="list", namespace=namespace
            )
        )
    )
    deadline = time.monotonic() + GRANT_TIMEOUT
    with control_plane.api_client(kubeconfig) as api:
        auth = client.AuthorizationV1Api(api)
        while not _allowed(auth.create_self_subject_access_review(review)):
            if time.monotonic() > deadline:
                msg = f"{kubeconfig} was not granted list on stacks within {GRANT_TIMEOUT}s"
                raise TimeoutError(msg)
            time.sleep(0.05)


def _allowed(review: client.V1SelfSubjectAccessReview) -> bool:
    return review.status is not None and bool(review.status.allowed)
