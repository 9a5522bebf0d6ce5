"""The volumes of a run pod's template, and the pulumi container's mounts of them.

Role: read ``workspaceTemplate.spec.podTemplate.spec.volumes`` and the ``volumeMounts`` of
its ``pulumi`` container into the pod overrides' ``volumes`` and ``volumeMounts``.

Guarantees: a volume is ``{name, <type>: <contents>}``, its contents a plain JSON copy
passed through as given (only a Secret's or ConfigMap's name is checked); a mount keeps
``name``, ``mountPath``, ``subPath`` and ``readOnly`` as given, except that the mount path is
normalised (no ``//``, ``.`` or trailing ``/``). Every error is a ``SpecError`` on the path of
the offending value.

Refused on purpose: volume types the restricted/baseline Pod Security Standard forbids
(``hostPath``, ``nfs``...: only ``VOLUME_TYPES`` are allowed), a volume with no type or two,
volume names that are not DNS labels or are listed twice, the runner's volumes
(``RUNNER_VOLUMES``: ``workspace``, ``tmp``, ``pulumi-cache``) and their mount paths
(``/workspace``, ``/tmp``, ``/pulumi-cache`` and below, and ``/`` above them), a mount of a
volume the template does not declare, a relative mount path, a path mounted twice, ``..`` in
a mount path or a sub-path, an absolute sub-path, and mount options outside ``name``,
``mountPath``, ``readOnly`` and ``subPath`` (such as ``mountPropagation``).

Left to others: the rest of the template (``reconcile.spec.workspace``); the runner mounts
its own volumes (``workspace.runner``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from controller.names import is_dns_label
from reconcile.spec.fields import FieldPath, read_string, required_string
from reconcile.spec.model import SpecError
from reconcile.spec.names import subdomain
from reconcile.spec.template_fields import (
    closed_object,
    given,
    given_bool,
    plain_object,
    read_items,
)

RUNNER_VOLUMES: Final = ("workspace", "tmp", "pulumi-cache")
"""The runner's own volumes, each mounted at ``/<name>``: their names and paths are refused."""
VOLUME_TYPES: Final = frozenset(
    {
        "emptyDir",
        "configMap",
        "secret",
        "persistentVolumeClaim",
        "projected",
        "downwardAPI",
        "csi",
        "ephemeral",
    }
)
"""The volume types a Stack may declare: those the restricted Pod Security Standard allows."""

_RESERVED_NAMES: Final = frozenset(RUNNER_VOLUMES)
_RESERVED_MOUNTS: Final = frozenset(RUNNER_VOLUMES)  # first components under /
_VOLUME_REFUSED: Final = (
    "refused: the run pod must satisfy the restricted/baseline Pod Security Standard;"
    " use a persistentVolumeClaim"
)
_VOLUME_REFS: Final = MappingProxyType(
    {"secret": ("secretName", "Secret"), "configMap": ("name", "ConfigMap")}
)
_MOUNT_FIELDS: Final = frozenset({"name", "mountPath", "readOnly", "subPath"})


def read_volumes(pod: Mapping[str, Any], path: FieldPath) -> list[dict[str, Any]]:
    """``pod.volumes`` (``pod`` is the pod spec at ``path``), each named once.

    Raises:
        SpecError: a volume of a refused type, with a refused name, or named twice.
    """
    volumes = [_volume(item, item_path) for item_path, item in read_items(pod, path, "volumes")]
    names = [volume["name"] for volume in volumes]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError((path / "volumes").entry(i) / "name", f"{name!r} is listed twice")
    return volumes


def read_mounts(
    container: Mapping[str, Any], path: FieldPath, volumes: frozenset[str]
) -> list[dict[str, Any]]:
    """``container.volumeMounts`` (the container at ``path``): of ``volumes``, each path once.

    Raises:
        SpecError: a mount of another volume, at a refused path, or at a path mounted before.
    """
    mounts = [_mount(item, at, volumes) for at, item in read_items(container, path, "volumeMounts")]
    paths = [mount["mountPath"] for mount in mounts]
    for i, mount_path in enumerate(paths):
        if mount_path in paths[:i]:
            where = (path / "volumeMounts").entry(i) / "mountPath"
            raise SpecError(where, f"{mount_path!r} is mounted twice: remove one")
    return mounts


def _volume(raw: object, path: FieldPath) -> dict[str, Any]:
    """A volume: a free name and exactly one allowed type, its contents passed through."""
    volume = closed_object(raw, path, VOLUME_TYPES | {"name"}, refusal=_VOLUME_REFUSED)
    name = required_string(volume, path, "name")
    if not is_dns_label(name):
        problem = f"{name!r} is not a volume name: use a DNS label (lowercase, digits, -)"
        raise SpecError(path / "name", problem)
    if name in _RESERVED_NAMES:
        reserved = ", ".join(RUNNER_VOLUMES)
        problem = f"{name!r} is reserved by the runner ({reserved}): choose another name"
        raise SpecError(path / "name", problem)
    kinds = sorted(key for key in volume if key in VOLUME_TYPES)
    if len(kinds) != 1:
        where = path if not kinds else path / kinds[1]
        raise SpecError(where, f"set exactly one volume type: {', '.join(sorted(VOLUME_TYPES))}")
    [kind] = kinds
    body = plain_object(volume[kind], path / kind)
    ref, ref_kind = _VOLUME_REFS.get(kind, ("", ""))
    ref_name = body.get(ref)
    if isinstance(ref_name, str):
        subdomain(ref_name, path / kind / ref, ref_kind)
    return {"name": name, kind: body}


def _mount(raw: object, path: FieldPath, volumes: frozenset[str]) -> dict[str, Any]:
    """A VolumeMount of one of ``volumes``, outside the runner's paths."""
    mount = closed_object(raw, path, _MOUNT_FIELDS)
    name = required_string(mount, path, "name")
    if name not in volumes:
        problem = f"no volume {name!r} in podTemplate.spec.volumes: declare it there"
        raise SpecError(path / "name", problem)
    sub_path = read_string(mount, path, "subPath")
    if sub_path is not None and (sub_path.startswith("/") or ".." in sub_path.split("/")):
        raise SpecError(path / "subPath", "must be relative, without .. components")
    return given(
        name=name,
        mountPath=_mount_path(required_string(mount, path, "mountPath"), path / "mountPath"),
        subPath=sub_path,
    ) | given_bool(mount, path, "readOnly")


def _mount_path(raw: str, path: FieldPath) -> str:
    """``raw`` normalised (no //, . or trailing /) if absolute and not the runner's."""
    parts = [part for part in raw.split("/") if part not in {"", "."}]
    if not raw.startswith("/") or ".." in parts:
        raise SpecError(path, "must be an absolute path without .. components")
    if not parts or parts[0] in _RESERVED_MOUNTS:
        *others, last = (f"/{volume}" for volume in RUNNER_VOLUMES)
        problem = (
            f"{', '.join(others)} and {last} (and / above them) are the runner's: mount elsewhere"
        )
        raise SpecError(path, problem)
    return "/" + "/".join(parts)
