"""Logged exceptions never show frame locals, in either format: locals can hold secrets."""

from __future__ import annotations

import importlib.util
import json
import logging
import traceback
from collections.abc import Iterator
from typing import TextIO

import pytest
import structlog
from structlog.typing import ExcInfo

from controller.clock import FakeClock
from controller.logs import LogFormat, configure_logging

SENTINEL = "sentinel-2f6c1e9a-do-not-log"
HAS_RICH = importlib.util.find_spec("rich") is not None


def fail_with_a_secret_local() -> None:
    """Raise from a frame whose local variable holds the sentinel."""
    secret = SENTINEL
    msg = f"boom ({len(secret)} characters)"
    raise ValueError(msg)


def locals_traceback(sio: TextIO, exc_info: ExcInfo) -> None:
    """What ``rich`` renders by default (``show_locals=True``), without needing ``rich``."""
    formatted = traceback.TracebackException(*exc_info, capture_locals=True).format()
    sio.write("\n" + "".join(formatted))


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger and structlog back as they were after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.fixture(
    params=[
        pytest.param("rich", marks=pytest.mark.skipif(not HAS_RICH, reason="rich not installed")),
        "stand-in",
    ]
)
def locals_by_default(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the console renderer's default show frame locals, as with ``rich`` installed.

    "rich": the real one (structlog then defaults to it). "stand-in": without ``rich``,
    ConsoleRenderer's default exception formatter is swapped for one that shows locals
    the way rich's does, so the test catches a renderer left on its default either way.
    """
    if request.param == "rich":
        return
    dev = structlog.dev
    init = dev.ConsoleRenderer.__init__
    assert init.__defaults__ is not None
    defaults = tuple(
        locals_traceback if value is dev.default_exception_formatter else value
        for value in init.__defaults__
    )
    assert locals_traceback in defaults, "ConsoleRenderer has no default exception formatter"
    monkeypatch.setattr(init, "__defaults__", defaults)
    monkeypatch.setattr(dev, "default_exception_formatter", locals_traceback)
    monkeypatch.setattr(dev, "default_monochrome_exception_formatter", locals_traceback)


@pytest.mark.usefixtures("locals_by_default")
def test_the_console_default_would_show_the_secret() -> None:
    """The control: structlog's own console default prints the failing frame's locals."""
    renderer = structlog.dev.ConsoleRenderer()
    try:
        fail_with_a_secret_local()
    except ValueError as err:
        line = renderer(None, "error", {"event": "failed", "exc_info": err})
    assert SENTINEL in str(line)


@pytest.mark.usefixtures("locals_by_default", "restore_logging")
@pytest.mark.parametrize("log_format", ["console", "json"])
@pytest.mark.parametrize("source", ["structlog", "logging"])
def test_a_logged_exception_does_not_show_frame_locals(
    log_format: LogFormat, source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The traceback is logged, the secret held in a local of the failing frame is not."""
    configure_logging(log_format, "info")
    try:
        fail_with_a_secret_local()
    except ValueError:
        if source == "structlog":
            structlog.get_logger("test").exception("Reconcile raised unexpectedly")
        else:
            logging.getLogger("some.library").exception("Library call failed")
    err = capsys.readouterr().err
    assert "fail_with_a_secret_local" in err
    assert "boom (" in err
    assert SENTINEL not in err


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("source", ["structlog", "logging"])
def test_each_line_is_stamped_with_the_clocks_wall_time(
    source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The timestamp is ``clock.wall()`` in ISO 8601 UTC with a Z, for library lines too."""
    configure_logging("json", "info", clock=FakeClock(start=1.5))
    if source == "structlog":
        structlog.get_logger("test").info("Reconciled")
    else:
        logging.getLogger("some.library").info("Connected")
    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["timestamp"] == "2026-01-01T00:00:01.500000Z"
