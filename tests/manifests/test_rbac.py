"""The operator's RBAC is exactly docs/installation.md's Permissions table, and works.

The table is the contract: each row names a rule and the code that needs it. The
ClusterRole (all namespaces) and the single-namespace overlay's Role, each with the
leader-election Role, must grant exactly its rows. Against the real apiserver, a token of
the operator's ServiceAccount (``testbed.rbac``) is allowed every row and refused
every other verb on the same resources, and real calls shaped like the operator's succeed
where a call outside the table gets 403.
"""

from __future__ import annotations

import datetime
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from urllib3 import HTTPResponse

from testbed.control_plane import ControlPlane
from testbed.rbac import SERVICE_ACCOUNT, operator_kubeconfig
from tests.manifests.conftest import MANIFESTS, pick, render

PAGE = MANIFESTS.parent / "docs" / "installation.md"
HEADER = "| API group | resource | verbs | why |"
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
LEADER_ELECTION = f"{SERVICE_ACCOUNT}-leader-election"
METRICS_AUTH = f"{SERVICE_ACCOUNT}-metrics-auth"
METRICS_READER = f"{SERVICE_ACCOUNT}-metrics-reader"
GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"

Permission = tuple[str, str, str]  # (API group, resource, verb); the core group is ""
REVIEWS: frozenset[Permission] = frozenset(
    {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
)
"""The --metrics-secure reviews: cluster-scoped, granted in every install."""


def table() -> set[Permission]:
    """docs/installation.md's Permissions table as (group, resource, verb) triples."""
    lines = PAGE.read_text().split("\n## Permissions\n", 1)[1].splitlines()
    start = lines.index(HEADER) + 2  # the header and its --- row
    found: set[Permission] = set()
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        group, resource, verbs, _why = (cell.strip() for cell in line.strip("|").split("|"))
        group = group.strip("`")
        for verb in re.findall(r"`(\w+)`", verbs):
            found.add(("" if group == "core" else group, resource.strip("`"), verb))
    return found


def granted(role: dict[str, object]) -> set[Permission]:
    """The triples a Role or ClusterRole grants (no wildcards or resourceNames allowed)."""
    found: set[Permission] = set()
    for rule in role["rules"]:  # type: ignore[attr-defined]
        assert "resourceNames" not in rule
        assert "nonResourceURLs" not in rule
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        found |= {
            (group, resource, verb)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    return found


def test_the_permissions_table_is_read() -> None:
    """The table parses into the operator's known rules (the parser is not vacuous)."""
    rows = table()
    assert ("pulumi.com", "stacks/status", "patch") in rows
    assert ("", "secrets", "get") in rows
    assert ("coordination.k8s.io", "leases", "update") in rows


@pytest.mark.integration  # kubectl kustomize
def test_cluster_role_is_the_table() -> None:
    """ClusterRoles + leader-election Role grant exactly the table, the Lease only by Role.

    The metrics reviews (cluster-scoped) have a ClusterRole of their own, kept in every
    install; nothing else is in two places.
    """
    objects = render("default")
    cluster = granted(pick(objects, "ClusterRole", SERVICE_ACCOUNT))
    reviews = granted(pick(objects, "ClusterRole", METRICS_AUTH))
    leases = granted(pick(objects, "Role", LEADER_ELECTION))
    assert cluster | reviews | leases == table()
    assert not cluster & leases
    assert not cluster & reviews
    assert {resource for _, resource, _ in leases} == {"leases"}
    assert {resource for _, resource, _ in reviews} == {"tokenreviews", "subjectaccessreviews"}


@pytest.mark.integration  # kubectl kustomize
def test_single_namespace_role_is_the_table() -> None:
    """The overlay's Role + leader-election Role + metrics reviews grant exactly the table.

    No cluster-wide grant of anything but the reviews.
    """
    objects = render("overlays/single-namespace")
    cluster_wide = {
        (obj["kind"], obj["metadata"]["name"])
        for obj in objects
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding"}
    }
    assert cluster_wide == {
        ("ClusterRole", METRICS_AUTH),
        ("ClusterRole", METRICS_READER),
        ("ClusterRoleBinding", f"{METRICS_AUTH}.pulumi-stack-operator-system"),
    }
    role = granted(pick(objects, "Role", SERVICE_ACCOUNT))
    leases = granted(pick(objects, "Role", LEADER_ELECTION))
    reviews = granted(pick(objects, "ClusterRole", METRICS_AUTH))
    assert role | leases | reviews == table()
    assert role == granted(pick(render("default"), "ClusterRole", SERVICE_ACCOUNT))


@pytest.mark.integration  # kubectl kustomize
def test_namespaces_overlay_grants_the_cluster_role_only_where_it_watches() -> None:
    """overlays/namespaces: the ClusterRole bound by a RoleBinding per watched namespace."""
    objects = render("overlays/namespaces")
    bindings = [obj for obj in objects if obj["kind"] == "ClusterRoleBinding"]
    assert {b["roleRef"]["name"] for b in bindings} == {METRICS_AUTH}
    granted_in = {
        obj["metadata"]["namespace"]
        for obj in objects
        if obj["kind"] == "RoleBinding" and obj["roleRef"]["name"] == SERVICE_ACCOUNT
    }
    assert granted_in == {"team-a", "team-b"}
    [manager] = pick(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {var["name"]: var.get("value") for var in manager["env"]}
    assert set(env["WATCH_NAMESPACE"].split(",")) == granted_in
    assert env["PSO_RUN_IMAGE"] == manager["image"]


# -- with the ServiceAccount's own token ---------------------------------------------------


def can_i(api: client.ApiClient, permission: Permission, namespace: str | None) -> bool:
    """A SelfSubjectAccessReview: what ``kubectl auth can-i`` asks."""
    group, resource, verb = permission
    resource, _, subresource = resource.partition("/")
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group=group,
                resource=resource,
                subresource=subresource or None,
                verb=verb,
                namespace=namespace,
            )
        )
    )
    answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return answer.status is not None and bool(answer.status.allowed)


def refused(permission: Permission) -> bool:
    """Whether ``permission`` is outside the table (every verb of a listed resource)."""
    return permission not in table()


def all_verbs() -> list[Permission]:
    """Every standard verb on every resource the table names."""
    resources = {(group, resource) for group, resource, _ in table()}
    return [(group, resource, verb) for group, resource in sorted(resources) for verb in VERBS]


def new_namespace(api: client.ApiClient) -> str:
    """A fresh namespace (left behind: namespaces never finish deleting here)."""
    name = f"test-{secrets.token_hex(4)}"
    client.CoreV1Api(api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    )
    return name


@pytest.fixture
def operator_api(control_plane: ControlPlane, namespace: str) -> Iterator[client.ApiClient]:
    """An API client authenticated as the operator installed cluster-wide in ``namespace``."""
    kubeconfig = operator_kubeconfig(control_plane, namespace)
    api = control_plane.api_client(kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.mark.integration
def test_cluster_wide_token_has_exactly_the_table(
    operator_api: client.ApiClient, api_client: client.ApiClient, namespace: str
) -> None:
    """Every table row is allowed in any namespace; every other verb on them is refused.

    Leases are allowed only in the operator's own namespace.
    """
    elsewhere = new_namespace(api_client)
    wrong = []
    for permission in all_verbs():
        lease = permission[1] == "leases"
        for where in (namespace, elsewhere):
            want = not refused(permission) and (where == namespace or not lease)
            if can_i(operator_api, permission, where) != want:
                wrong.append((permission, where, want))
    assert wrong == []
    assert can_i(operator_api, (GROUP, "stacks", "list"), None)  # all namespaces at once
    assert not can_i(operator_api, ("", "secrets", "list"), None)


@pytest.mark.integration
def test_single_namespace_token_is_confined(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str
) -> None:
    """Installed for its own namespace, the token gets the table there and nothing elsewhere.

    Nothing but the metrics reviews, which are cluster-scoped (no namespace to confine).
    """
    elsewhere = new_namespace(api_client)
    kubeconfig = operator_kubeconfig(control_plane, namespace, watch=[namespace])
    wrong = []
    with control_plane.api_client(kubeconfig) as api:
        for permission in all_verbs():
            if can_i(api, permission, namespace) == refused(permission):
                wrong.append((permission, namespace))
            if can_i(api, permission, elsewhere) != (permission in REVIEWS):
                wrong.append((permission, elsewhere))
        assert not can_i(api, (GROUP, "stacks", "list"), None)
    assert wrong == []


@pytest.mark.integration
def test_a_token_serving_some_namespaces_reaches_no_other(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str
) -> None:
    """overlays/namespaces: the table in each served namespace, nothing in the others.

    Not ``kube-system``, not a fresh one: no pods created there, no Secrets read, so a
    compromise of the operator is not a compromise of the cluster. The reviews excepted.
    """
    served = [new_namespace(api_client), new_namespace(api_client)]
    outside = [new_namespace(api_client), "kube-system"]
    kubeconfig = operator_kubeconfig(control_plane, namespace, watch=served, cluster_role=True)
    with control_plane.api_client(kubeconfig) as api:

        def expected(permission: Permission, where: str) -> bool:
            if where in served:
                return not refused(permission) and permission[1] != "leases"
            return permission in REVIEWS

        wrong = [
            (permission, where)
            for permission in all_verbs()
            for where in (*served, *outside)
            if can_i(api, permission, where) != expected(permission, where)
        ]
        assert not can_i(api, (GROUP, "stacks", "list"), None)
        assert not can_i(api, ("", "pods", "create"), "kube-system")
    assert wrong == []


@pytest.mark.integration
def test_installing_twice_changes_nothing(control_plane: ControlPlane, namespace: str) -> None:
    """A second call for the same namespace succeeds and both tokens work (idempotent)."""
    first = operator_kubeconfig(control_plane, namespace)
    second = operator_kubeconfig(control_plane, namespace)
    for kubeconfig in (first, second):
        with control_plane.api_client(kubeconfig) as api:
            assert can_i(api, (GROUP, "stacks", "watch"), None)


def forbidden(call: object, *args: object, **kwargs: object) -> int:
    """The HTTP status of a call expected to fail."""
    assert callable(call)
    with pytest.raises(client.ApiException) as info:
        call(*args, **kwargs)
    return int(info.value.status)


@pytest.mark.integration
@pytest.mark.usefixtures("stack_crd")
def test_the_operators_calls_work_and_others_get_403(
    operator_api: client.ApiClient, api_client: client.ApiClient, namespace: str
) -> None:
    """Calls shaped like the operator's succeed with its token; others are 403 Forbidden."""
    stack = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": {"name": "s"},
        "spec": {"stack": "dev"},
    }
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, stack
    )
    client.CoreV1Api(api_client).create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"k": "v"}),
    )
    objects = client.CustomObjectsApi(operator_api)
    core = client.CoreV1Api(operator_api)
    listed: Any = objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert (namespace, "s") in {
        (s["metadata"]["namespace"], s["metadata"]["name"]) for s in listed["items"]
    }
    watched: Any = objects.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, watch=True, timeout_seconds=1, _preload_content=False
    )
    assert watched.status == 200
    # Read the watch to its end (the server closes it after timeout_seconds) before the
    # connection goes back to the pool: reused with the stream still open, the next
    # request fails with ResponseNotReady when the first event has not yet arrived.
    assert b'"type":"ADDED"' in watched.read()
    watched.release_conn()
    finalizer = {"metadata": {"finalizers": ["finalizer.stack.pulumi.com"]}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "s", finalizer)
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "s", {"status": {"observedGeneration": 1}}
    )
    fresh: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "s")
    assert fresh["status"]["observedGeneration"] == 1
    assert core.read_namespaced_secret("creds", namespace).data
    post_event(core, namespace)
    take_lease(operator_api, namespace)
    run_a_pod(core, namespace)

    assert forbidden(core.list_namespaced_secret, namespace) == 403
    assert forbidden(core.list_namespaced_config_map, namespace) == 403
    assert (
        forbidden(objects.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, "s")
        == 403
    )
    assert (
        forbidden(objects.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, stack)
        == 403
    )


def run_a_pod(core: client.CoreV1Api, namespace: str) -> None:
    """Create a run pod, read, watch and log it, delete it, as the pod runner does.

    This control plane has no node: the pod stays Pending, so its log answers an error
    (no container yet) or nothing; either way not 403: the call was allowed.
    """
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="s-pulumi"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="pulumi", image="x:1")]),
    )
    created = core.create_namespaced_pod(namespace, pod)
    assert created.metadata is not None
    assert core.read_namespaced_pod("s-pulumi", namespace).metadata is not None
    status = 200
    try:
        core.read_namespaced_pod_log("s-pulumi", namespace)
    except client.ApiException as err:
        status = int(err.status)
    assert status != 403
    assert forbidden(core.list_namespaced_pod, namespace) == 403
    events: HTTPResponse = core.list_namespaced_pod(  # type: ignore[assignment]
        namespace,
        field_selector="metadata.name=s-pulumi",
        watch=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    assert b"s-pulumi" in events.read()  # watched by name, as workspace/runner/pod/api.py does
    core.delete_namespaced_pod("s-pulumi", namespace)


def post_event(core: client.CoreV1Api, namespace: str) -> None:
    """Create an Event, then raise its count with a patch, as status/events.py does."""
    now = datetime.datetime.now(datetime.UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="s.1"),
        involved_object=client.V1ObjectReference(
            api_version=f"{GROUP}/{VERSION}", kind="Stack", name="s", namespace=namespace
        ),
        reason="Succeeded",
        message="ok",
        type="Normal",
        count=1,
        first_timestamp=now,
        last_timestamp=now,
    )
    core.create_namespaced_event(namespace, event)
    core.patch_namespaced_event(
        "s.1",
        namespace,
        {"count": 2},
        _content_type="application/strategic-merge-patch+json",
    )


def take_lease(api: client.ApiClient, namespace: str) -> None:
    """Create, read and renew a Lease in the operator's namespace, as leader election does."""
    leases = client.CoordinationV1Api(api)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="pulumi-stack-operator"),
        spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=60),
    )
    leases.create_namespaced_lease(namespace, lease)
    held = leases.read_namespaced_lease("pulumi-stack-operator", namespace)
    assert held.spec is not None
    held.spec.renew_time = datetime.datetime.now(datetime.UTC)
    leases.replace_namespaced_lease("pulumi-stack-operator", namespace, held)
