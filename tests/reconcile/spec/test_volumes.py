"""``reconcile.spec.volumes``: the run pod's volumes and the pulumi container's mounts of them.

Only the volume types the restricted Pod Security Standard allows, none of the runner's
volumes or paths, each volume named once and each path mounted once; the contents of a
volume pass through as given, mount paths are normalised. (Host paths are refused in the
cases shared with the CRD tests: ``cases``, ``workspace-host-path``.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.reconcile.spec.helpers import (
    CACHE,
    C,
    P,
    assert_refused,
    container,
    freeze,
    overrides,
    pod,
)

TMP = "/tmp"  # noqa: S108 - the runner's mount path, never opened here

ACCEPTED = [
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "//data/./x/"}]),
        {"volumes": [CACHE], "volumeMounts": [{"name": "cache", "mountPath": "/data/x"}]},
        id="mount-path-normalised",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": f"{TMP}data"}]),
        {"volumes": [CACHE], "volumeMounts": [{"name": "cache", "mountPath": f"{TMP}data"}]},
        id="mount-beside-tmp",
    ),
    pytest.param(
        pod(volumes=[{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "k"}]}}]),
        {"volumes": [{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "k"}]}}]},
        id="volume-contents-passed-through",
    ),
]


@pytest.mark.parametrize(("spec", "expected"), ACCEPTED)
def test_accepted(spec: dict[str, Any], expected: dict[str, Any]) -> None:
    """Accepted volumes and mounts parse into the overrides the runner applies, normalised."""
    assert overrides(spec) == expected
    assert overrides(freeze(spec)) == expected


INVALID = [
    # volumes
    pytest.param(pod(volumes={"a": {}}), f"{P}.volumes", "must be a list", id="volumes-object"),
    pytest.param(
        pod(volumes=[CACHE, {"name": "n", "nfs": {"server": "s", "path": "/"}}]),
        f"{P}.volumes[1].nfs",
        "Pod Security Standard",
        id="nfs",
    ),
    pytest.param(
        pod(volumes=[{"name": "v"}]),
        f"{P}.volumes[0]",
        "set exactly one volume type: configMap, csi, downwardAPI, emptyDir, ephemeral,"
        " persistentVolumeClaim, projected, secret",
        id="volume-without-type",
    ),
    pytest.param(
        pod(volumes=[{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]),
        f"{P}.volumes[0].secret",
        "set exactly one volume type",
        id="volume-two-types",
    ),
    pytest.param(
        pod(volumes=[{"name": "v", "emptyDir": "yes"}]),
        f"{P}.volumes[0].emptyDir",
        "must be an object",
        id="volume-type-string",
    ),
    pytest.param(
        pod(volumes=[{"emptyDir": {}}]), f"{P}.volumes[0].name", "is required", id="volume-unnamed"
    ),
    pytest.param(
        pod(volumes=[{"name": "Cache", "emptyDir": {}}]),
        f"{P}.volumes[0].name",
        "not a volume name",
        id="volume-name",
    ),
    pytest.param(
        pod(volumes=[{"name": "workspace", "emptyDir": {}}]),
        f"{P}.volumes[0].name",
        "reserved by the runner",
        id="volume-workspace",
    ),
    pytest.param(
        pod(volumes=[{"name": "tmp", "emptyDir": {}}]),
        f"{P}.volumes[0].name",
        "reserved by the runner",
        id="volume-tmp",
    ),
    pytest.param(
        pod(volumes=[CACHE, {"name": "cache", "emptyDir": {}}]),
        f"{P}.volumes[1].name",
        "listed twice",
        id="volume-duplicate",
    ),
    pytest.param(
        pod(volumes=[{"name": "s", "secret": {"secretName": "Bad_Name"}}]),
        f"{P}.volumes[0].secret.secretName",
        "not a Secret name",
        id="volume-secret-name",
    ),
    pytest.param(
        pod(volumes=[{"name": "c", "configMap": {"name": "-c"}}]),
        f"{P}.volumes[0].configMap.name",
        "not a ConfigMap name",
        id="volume-config-map-name",
    ),
    # volumeMounts
    pytest.param(
        container(volumeMounts=[{"name": "cache", "mountPath": "/c"}]),
        f"{C}.volumeMounts[0].name",
        "no volume 'cache' in podTemplate.spec.volumes: declare it there",
        id="mount-undeclared",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "workspace", "mountPath": "/c"}]),
        f"{C}.volumeMounts[0].name",
        "no volume 'workspace'",
        id="mount-runner-volume",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache"}]),
        f"{C}.volumeMounts[0].mountPath",
        "is required",
        id="mount-no-path",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "cache"}]),
        f"{C}.volumeMounts[0].mountPath",
        "absolute path",
        id="mount-relative",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "/workspace"}]),
        f"{C}.volumeMounts[0].mountPath",
        "/workspace, /tmp and /pulumi-cache",
        id="mount-workspace",
    ),
    pytest.param(
        container(
            [CACHE], volumeMounts=[{"name": "cache", "mountPath": "/workspace/home/.pulumi"}]
        ),
        f"{C}.volumeMounts[0].mountPath",
        "/workspace, /tmp and /pulumi-cache",
        id="mount-under-workspace",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": f"{TMP}/"}]),
        f"{C}.volumeMounts[0].mountPath",
        "/workspace, /tmp and /pulumi-cache",
        id="mount-tmp",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "//tmp/x"}]),
        f"{C}.volumeMounts[0].mountPath",
        "/workspace, /tmp and /pulumi-cache",
        id="mount-under-tmp-double-slash",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "/"}]),
        f"{C}.volumeMounts[0].mountPath",
        "/ above them",
        id="mount-root",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "/data/../tmp"}]),
        f"{C}.volumeMounts[0].mountPath",
        "without .. components",
        id="mount-dot-dot",
    ),
    pytest.param(
        container(
            [CACHE],
            volumeMounts=[
                {"name": "cache", "mountPath": "/data"},
                {"name": "cache", "mountPath": "/data/"},
            ],
        ),
        f"{C}.volumeMounts[1].mountPath",
        "mounted twice",
        id="mount-duplicate-path",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "/c", "subPath": "/etc"}]),
        f"{C}.volumeMounts[0].subPath",
        "must be relative",
        id="sub-path-absolute",
    ),
    pytest.param(
        container(
            [CACHE], volumeMounts=[{"name": "cache", "mountPath": "/c", "subPath": "a/../.."}]
        ),
        f"{C}.volumeMounts[0].subPath",
        "without .. components",
        id="sub-path-dot-dot",
    ),
    pytest.param(
        container([CACHE], volumeMounts=[{"name": "cache", "mountPath": "/c", "readOnly": "yes"}]),
        f"{C}.volumeMounts[0].readOnly",
        "true or false",
        id="mount-read-only-string",
    ),
    pytest.param(
        container(
            [CACHE],
            volumeMounts=[
                {"name": "cache", "mountPath": "/c", "mountPropagation": "Bidirectional"}
            ],
        ),
        f"{C}.volumeMounts[0].mountPropagation",
        "supported: mountPath, name, readOnly, subPath",
        id="mount-propagation",
    ),
    # a volume's contents pass through, as JSON only
    pytest.param(
        pod(volumes=[{"name": "v", "emptyDir": {"sizeLimit": {1, 2}}}]),
        f"{P}.volumes[0].emptyDir.sizeLimit",
        "must be JSON",
        id="pass-through-set",
    ),
]


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_volumes_name_field_and_fix(spec: Any, path: str, fragment: str) -> None:
    """An invalid volume or mount raises SpecError on its path."""
    assert_refused(spec, path, fragment)


@pytest.mark.parametrize(("spec", "path", "fragment"), INVALID)
def test_invalid_cached_volumes_are_refused_the_same(spec: Any, path: str, fragment: str) -> None:
    """The read-only cached form of an invalid volume or mount is refused with the same path."""
    assert_refused(freeze(spec), path, fragment)
