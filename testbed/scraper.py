"""A scraper of ``--metrics-secure`` endpoints: a ServiceAccount, its token, HTTPS GETs.

``scraper_token`` makes (idempotently) a ServiceAccount and, with ``role``, a
ClusterRoleBinding of it to that ClusterRole (the metrics reader role of
``manifests/rbac``, or the chart's), then asks the TokenRequest API for a token, as a
Prometheus in the cluster would hold. ``get_metrics`` GETs a URL over HTTPS with a bearer
token, not verifying the certificate (the operator's is self-signed by default), and
returns the status and body: a 401 or 403 is an answer, not an exception.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.error
import urllib.request

from kubernetes import client

TOKEN_SECONDS = 3600


def scraper_token(api: client.ApiClient, namespace: str, name: str, role: str | None = None) -> str:
    """A token of ServiceAccount ``namespace/name``, bound to ClusterRole ``role`` if given."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    with contextlib.suppress(client.ApiException):  # 409: it exists
        core.create_namespaced_service_account(namespace, account)
    if role is not None:
        binding = client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=f"{role}-{namespace}-{name}"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
        )
        with contextlib.suppress(client.ApiException):
            rbac.create_cluster_role_binding(binding)
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    issued = core.create_namespaced_service_account_token(name, namespace, request)
    assert issued.status is not None
    return str(issued.status.token)


def get_metrics(url: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, str]:
    """GET ``url`` (https, unverified) with ``token`` as bearer; (status, body)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - https by the caller
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:  # noqa: S310
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()
