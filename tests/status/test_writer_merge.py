"""merge_patch computes the minimal RFC 7386 patch the writer sends."""

from __future__ import annotations

import pytest

from status.writer import merge_patch


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        pytest.param({"a": 1}, {"a": 1}, {}, id="unchanged"),
        pytest.param({"a": 1}, {"a": 2}, {"a": 2}, id="changed"),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, {"b": None}, id="removed"),
        pytest.param(
            {"m": {"x": 1, "y": 2}}, {"m": {"x": 1, "y": 3}}, {"m": {"y": 3}}, id="nested"
        ),
        pytest.param({"l": [1, 2]}, {"l": [1, 3]}, {"l": [1, 3]}, id="list-replaced"),
        pytest.param({}, {"m": {"x": 1}}, {"m": {"x": 1}}, id="added"),
    ],
)
def test_merge_patch(
    old: dict[str, object], new: dict[str, object], patch: dict[str, object]
) -> None:
    """Only differences are sent; removals are nulls; lists go whole."""
    assert merge_patch(old, new) == patch
