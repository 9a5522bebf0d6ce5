"""A Stack's own init containers: ``workspaceTemplate.spec.podTemplate.spec.initContainers``.

Role: read the init containers PKO's manifests give a run pod (its ``issue-937`` e2e case,
``examples/custom-workspace``): each with its own image and command, run before the run
after the source is checked out. What is read: ``INIT_CONTAINER_FIELDS``; refused with a
reason: ``REFUSED_INIT_CONTAINER_FIELDS`` (the runner forces the run container's security
context on them; a run pod has no sidecars); a name of the runner's containers, or one
used twice, is refused too. Their mounts are of the pod template's volumes and the run
pod's ``share`` volume, where ``$PULUMI_ENV`` is (``workspace.runner.envfile``).

Left to others: the pod runner builds them into the pod (``workspace.runner.pod.spec``); the
local runner refuses them (``reconcile.tenancy.local_refusal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from controller.names import is_dns_label
from reconcile.spec.container_settings import container_settings, read_image
from reconcile.spec.fields import FieldPath, kind_of, read_string, required_string
from reconcile.spec.model import PULL_POLICIES, SpecError
from reconcile.spec.template_fields import closed_object, given, read_choice, read_items
from reconcile.spec.volumes import read_mounts

INIT_CONTAINER_FIELDS: Final = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "env",
        "envFrom",
        "volumeMounts",
        "resources",
    }
)
"""The keys of a Stack's own init container read here; any other is refused."""
REFUSED_INIT_CONTAINER_FIELDS: Final = MappingProxyType(
    {
        "securityContext": (
            "refused: the runner gives init containers the run container's security context"
        ),
        "restartPolicy": "refused: a run pod has no sidecars (an init container runs to its end)",
    }
)
"""Keys of an init container refused with a reason of their own (others: unknown)."""
_RUNNER_CONTAINERS: Final = frozenset({"pulumi", "checkout"})


def read_init_containers(
    pod: Mapping[str, Any], path: FieldPath, volumes: frozenset[str]
) -> list[dict[str, Any]]:
    """``pod.initContainers``: each named once, none with a name of the runner's."""
    made = [
        _init_container(item, at, volumes) for at, item in read_items(pod, path, "initContainers")
    ]
    names = [container["name"] for container in made]
    for index, name in enumerate(names):
        if name in names[:index]:
            where = (path / "initContainers").entry(index) / "name"
            raise SpecError(where, f"{name!r} is the name of another init container: rename it")
    return made


def _init_container(raw: object, path: FieldPath, volumes: frozenset[str]) -> dict[str, Any]:
    """One init container: the Stack's image and command, mounts of ``volumes`` (and share).

    It runs before the run with the run container's security context, the runner's
    (``workspace.runner.pod.spec``); it may append ``NAME=value`` lines to ``$PULUMI_ENV``.
    """
    container = closed_object(raw, path, INIT_CONTAINER_FIELDS, REFUSED_INIT_CONTAINER_FIELDS)
    name = required_string(container, path, "name")
    if not is_dns_label(name) or name in _RUNNER_CONTAINERS:
        problem = f"{name!r}: name it with a DNS label other than the runner's pulumi and checkout"
        raise SpecError(path / "name", problem)
    image = read_image(container, path)
    if image is None:
        raise SpecError(path / "image", "required: the image the init container runs")
    command = given(
        command=_strings(container, path, "command"),
        args=_strings(container, path, "args"),
        workingDir=read_string(container, path, "workingDir"),
        imagePullPolicy=read_choice(container, path, "imagePullPolicy", PULL_POLICIES),
        volumeMounts=read_mounts(container, path, volumes),
    )
    settings = container_settings(container, path, frozenset())
    return {"name": name, "image": image, **command, **settings}


def _strings(obj: Mapping[str, Any], path: FieldPath, key: str) -> list[str]:
    """``obj[key]`` as a list of strings (a command, its args); empty when unset."""
    return [_string(item, at) for at, item in read_items(obj, path, key)]


def _string(value: object, path: FieldPath) -> str:
    if not isinstance(value, str):
        raise SpecError(path, f"must be a string, not {kind_of(value)}")
    return value
