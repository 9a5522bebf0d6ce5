"""Fixtures for the status tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.status.event_fakes import FLUSH, Harness


@pytest.fixture
def harness() -> Iterator[Harness]:
    """A Harness whose recorder is closed (and its thread joined) afterwards."""
    h = Harness()
    yield h
    h.sink.gate = None
    assert h.recorder.close(FLUSH)
