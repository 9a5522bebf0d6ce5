"""``controller.labels`` against a real kube-apiserver: same selectors, same objects.

Each selector is sent as a list's ``labelSelector`` (ConfigMaps of a fresh namespace,
labelled in every way the selectors tell apart): the API server refuses what
``parse_selector`` refuses (400), lists exactly the objects ``matches`` selects, and lists
the same for the canonical form. Besides the unit tests' tables, a few hundred strings
made at random (fixed seed) from the grammar's tokens probe the corners.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from kubernetes import client

from controller.labels import SelectorError, parse_selector
from testbed.control_plane import ControlPlane
from tests.conftest import fresh_namespace
from tests.controller.test_labels import INVALID, VALID

pytestmark = pytest.mark.integration

LABEL_SETS: dict[str, dict[str, str]] = {
    "none": {},
    "a": {"x": "a", "shard": "a"},
    "b": {"x": "b", "shard": "b", "n": "7"},
    "empty": {"x": "", "in": "in", "notin": "x"},
    "numbers": {"x": "1", "z": "5", "n": "12"},
    "prefixed": {"example.com/team": "platform", "y": "b"},
    "many": {"x": "foo", "y": "a", "z": "c", "a": "1", "b": "2"},
}
TOKENS = (
    "x", "y", "a", "b", "1", "in", "notin", "example.com/x",
    "=", "==", "!=", "!", "(", ")", ",", ",", " ", ">", "<", "-", "",
)  # fmt: skip
FUZZ_COUNT = 400


@pytest.fixture(scope="module")
def labelled(control_plane: ControlPlane) -> Iterator[tuple[client.CoreV1Api, str]]:
    """A fresh namespace with one ConfigMap per ``LABEL_SETS`` entry; (api, namespace)."""
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    try:
        with fresh_namespace(api) as namespace:
            for name, labels in LABEL_SETS.items():
                body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels))
                core.create_namespaced_config_map(namespace, body)
            yield core, namespace
    finally:
        api.close()


def listed(core: client.CoreV1Api, namespace: str, selector: str) -> set[str] | None:
    """The ConfigMaps the API server lists for ``selector``; None when it refuses it (400)."""
    try:
        items = core.list_namespaced_config_map(namespace, label_selector=selector).items
    except client.ApiException as err:
        if err.status != 400:
            raise
        return None
    return {str(item.metadata.name) for item in items if item.metadata is not None}


def ours(text: str) -> set[str] | None:
    """The ConfigMaps ``parse_selector`` selects for ``text``; None when it refuses it."""
    try:
        selector = parse_selector(text)
    except SelectorError:
        return None
    return {name for name, labels in LABEL_SETS.items() if selector.matches(labels)}


def fuzzed(count: int, seed: int = 20240611) -> list[str]:
    """``count`` strings of 1-7 random tokens, joined with or without spaces."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not a secret
    made = []
    for _ in range(count):
        tokens = rng.choices(TOKENS, k=rng.randint(1, 7))
        made.append(("" if rng.random() < 0.7 else " ").join(tokens))
    return made


def test_the_api_server_agrees_on_the_tables(labelled: tuple[client.CoreV1Api, str]) -> None:
    """Every VALID selector is accepted and selects alike; every INVALID one is refused."""
    core, namespace = labelled
    for text in VALID:
        assert listed(core, namespace, text) == ours(text), text
        canonical = str(parse_selector(text))
        assert listed(core, namespace, canonical) == ours(text), canonical
    for text in INVALID:
        assert listed(core, namespace, text) is None, text


def test_the_api_server_agrees_on_random_selectors(
    labelled: tuple[client.CoreV1Api, str],
) -> None:
    """Strings made of the grammar's tokens: accepted, refused and selected alike."""
    core, namespace = labelled
    disagreements = []
    accepted = 0
    for text in fuzzed(FUZZ_COUNT):
        theirs, mine = listed(core, namespace, text), ours(text)
        if theirs != mine:
            disagreements.append((text, theirs, mine))
        elif mine is not None:
            accepted += 1
            canonical = str(parse_selector(text))
            if listed(core, namespace, canonical) != mine:
                disagreements.append((canonical, listed(core, namespace, canonical), mine))
    assert disagreements == []
    assert accepted > FUZZ_COUNT // 10, "too few valid selectors: the fuzz would prove little"
