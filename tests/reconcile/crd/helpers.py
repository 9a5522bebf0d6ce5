"""Stacks for the CRD tests: specs, conditions, and kubectl calls that apply and read them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from testbed.control_plane import ControlPlane

CRD_PATH = Path(__file__).parents[3] / "manifests" / "crd" / "stacks.pulumi.com.yaml"
SHA = "2b0889718d3e63feeb6079ccd5e4488d8601e353"
TIME = "2026-01-02T03:04:05Z"

DEFAULTED_STATUS = {"observedGeneration": 0}  # the CRD's default: kstatus reads InProgress


def secret(name: str, key: str) -> dict[str, Any]:
    """A ResourceRef to a Secret key."""
    return {"type": "Secret", "secret": {"name": name, "key": key}}


# Every field this operator supports, in a Pulumi Kubernetes Operator manifest.
FULL_SPEC: dict[str, Any] = {
    "stack": "organization/proj/dev",  # a file:// backend's only organisation
    "backend": "file:///state",
    "projectRepo": "https://github.com/example/infra",
    "branch": "refs/heads/main",
    "repoDir": "stacks/app",
    "gitAuth": {
        "accessToken": secret("git", "token"),
        "sshAuth": {"sshPrivateKey": secret("git", "ssh"), "password": secret("git", "phrase")},
        "basicAuth": {
            "userName": {"type": "Literal", "literal": {"value": "bot"}},
            "password": secret("git", "password"),
        },
    },
    "config": {
        "aws:region": "us-east-2",
        "app:replicas": 3,
        "app:ratio": 0.5,
        "app:debug": True,
        "app:tags": {"team": "a", "tier": ["web", "api"]},
    },
    "secretsRef": {"db:password": secret("db", "password")},
    "envRefs": {
        "PULUMI_ACCESS_TOKEN": secret("pulumi", "accessToken"),
        "AWS_REGION": {"type": "Literal", "literal": {"value": "us-east-2"}},
    },
    "secretsProvider": "passphrase",
    "refresh": True,
    "expectNoRefreshChanges": True,
    "preview": False,
    "targets": ["urn:pulumi:dev::proj::aws:s3/bucket:Bucket::logs"],
    "useLocalStackOnly": True,
    "destroyOnFinalize": True,
    "prerequisites": [
        {"name": "network", "requirement": {"succeededWithinDuration": "1h30m"}},
        {"name": "database"},
    ],
    "resyncFrequencySeconds": 120,
    "continueResyncOnCommitMatch": True,
    "retryOnUpdateConflict": True,
    "retryMaxBackoffDurationSeconds": 600,
    "timeoutSeconds": 1800,
    "suspend": False,
    "serviceAccountName": "pulumi-runner",
    "workspaceTemplate": {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "image": "pulumi/pulumi:3.150.0-nonroot",
            "securityProfile": "restricted",
            "resources": {"requests": {"cpu": "500m", "memory": 1073741824}},
            "env": [{"name": "LOG_LEVEL", "value": "debug"}],
            "podTemplate": {
                "spec": {
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "c"}}],
                    "containers": [
                        {"name": "pulumi", "volumeMounts": [{"name": "cache", "mountPath": "/c"}]}
                    ],
                }
            },
        },
    },
}

MINIMAL_SPEC: dict[str, Any] = {
    "stack": "org/proj/dev",
    "projectRepo": "https://github.com/example/infra",
    "branch": "main",
}


def apply_stack(
    plane: ControlPlane, tmp_path: Path, namespace: str, spec: dict[str, Any], name: str = "app"
) -> subprocess.CompletedProcess[str]:
    """Server-side apply a Stack; the result says whether the apiserver accepted it."""
    manifest = {
        "apiVersion": "pulumi.com/v1",
        "kind": "Stack",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    # JSON, not YAML: kubectl's YAML 1.1 reads a bare n or y as a boolean.
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(manifest))
    return plane.kubectl("apply", "--server-side", "-f", str(path), check=False)


def patch_status(
    plane: ControlPlane, namespace: str, name: str, status: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Merge-patch ``status`` through the status subresource."""
    body = json.dumps({"status": status})
    return plane.kubectl(
        "patch", "stack", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", body,
        check=False,
    )  # fmt: skip


def get_stack(plane: ControlPlane, namespace: str, name: str = "app") -> dict[str, Any]:
    """The Stack as the apiserver stores it."""
    result: dict[str, Any] = json.loads(
        plane.kubectl("get", "stack", name, "-n", namespace, "-o", "json").stdout
    )
    return result


def condition(type_: str = "Ready", status: str = "True", **fields: Any) -> dict[str, Any]:
    """A valid condition, with ``fields`` overriding the defaults."""
    base = {
        "type": type_,
        "status": status,
        "observedGeneration": 1,
        "lastTransitionTime": TIME,
        "reason": "Succeeded",
        "message": "Up to date",
    }
    return {**base, **fields}


def table(output: str) -> list[list[str]]:
    """The lines of a kubectl table as lists of cells; an empty cell is "".

    kubectl aligns every cell under its header, and headers are separated by 2+ spaces
    (one header, LAST UPDATE, contains a space), so the header's offsets cut the rows.
    """
    header, *lines = output.rstrip().splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in [header, *lines]]
