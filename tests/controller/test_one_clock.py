"""Guard: outside ``controller/clock.py`` no module of ``controller`` reads time itself.

Every time read and every timed wait in ``controller`` goes through a ``Clock`` (see
``controller/clock.py``), so that a test on a ``FakeClock`` controls all of them. This test
parses each module and reports, by file and line, what would bypass the clock:

- importing ``time`` or ``sched``, or calling ``time.monotonic``, ``time.time``,
  ``time.sleep`` and the like;
- ``datetime.now()``, ``datetime.utcnow()`` or ``date.today()``;
- a timed wait: ``.wait(t)``, ``.wait_for(pred, t)``, ``.join(t)`` (not ``"sep".join``),
  ``.acquire``, ``.get`` or ``.put`` with ``timeout=``; ``threading.Timer``.

Waits without a timeout (``event.wait()``, ``thread.join()``) are not time reads, and the
clock's own ``wait_until``/``wait_event`` are the way to wait with one. The positive
controls prove the scan finds each pattern, in a sample and in ``clock.py`` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONTROLLER = Path(__file__).parents[2] / "controller"
CLOCK = CONTROLLER / "clock.py"

TIME_MODULES = frozenset({"time", "sched"})
TIME_FUNCTIONS = frozenset(
    {"monotonic", "monotonic_ns", "time", "time_ns", "sleep", "perf_counter", "perf_counter_ns"}
)
NOW_METHODS = frozenset({"now", "utcnow", "today"})
DATE_TYPES = frozenset({"datetime", "date"})
TIMED_BY_POSITION = {"wait": 0, "join": 0, "wait_for": 1}  # index of the timeout argument
TIMED_BY_KEYWORD = frozenset({"wait", "wait_for", "join", "acquire", "get", "put"})


def _name(node: ast.expr) -> str | None:
    """The last name of ``a.b.c`` or ``c``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


class _Finder(ast.NodeVisitor):
    """Collects (line, what) for each direct time read or timed wait."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in TIME_MODULES:
                self.found.append((node.lineno, f"import {alias.name}"))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if (node.module or "").split(".")[0] in TIME_MODULES:
            self.found.append((node.lineno, f"from {node.module} import"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in TIME_FUNCTIONS and _name(node.value) == "time":
            self.found.append((node.lineno, f"time.{node.attr}"))
        if node.attr in NOW_METHODS and _name(node.value) in DATE_TYPES:
            self.found.append((node.lineno, f"{_name(node.value)}.{node.attr}"))
        if node.attr == "Timer" and _name(node.value) == "threading":
            self.found.append((node.lineno, "threading.Timer"))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and self._timed(func, node):
            self.found.append((node.lineno, f".{func.attr}() with a timeout"))
        self.generic_visit(node)

    @staticmethod
    def _timed(func: ast.Attribute, call: ast.Call) -> bool:
        if func.attr in TIMED_BY_KEYWORD and any(k.arg == "timeout" for k in call.keywords):
            return True
        position = TIMED_BY_POSITION.get(func.attr)
        if position is None or len(call.args) <= position:
            return False
        is_string_join = func.attr == "join" and isinstance(func.value, ast.Constant)
        return not is_string_join


def findings(source: str) -> list[tuple[int, str]]:
    """Every direct time read or timed wait in ``source``, as (line, what), in line order."""
    finder = _Finder()
    finder.visit(ast.parse(source))
    return sorted(finder.found)


SAMPLE = """\
import time
from time import monotonic
import datetime
from datetime import datetime as dt_type, date
a = time.monotonic()
b = datetime.datetime.now(datetime.UTC)
c = datetime.datetime.utcnow()
d = date.today()
stop.wait(5)
cond.wait(timeout=1.0)
cond.wait_for(ready, 2.0)
thread.join(10)
lock.acquire(timeout=1)
timer = threading.Timer(1.0, fire)
"""
SAMPLE_LINES = [1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]

CLEAN = """\
import datetime
import threading
now = clock.now()
at = clock.wall() + datetime.timedelta(seconds=5)
clock.wait_event(stop, now + 5)
clock.wait_until(cond, None)
stop.wait()
thread.join()
cond.wait_for(ready)
threads.join_until(now + 10)
line = ", ".join(words)
value = mapping.get(key)
"""


def test_the_scan_finds_every_kind_of_direct_time_read() -> None:
    """Positive control: each pattern of the sample is reported, on its own line."""
    assert [line for line, _ in findings(SAMPLE)] == SAMPLE_LINES


def test_the_scan_leaves_reads_through_the_clock_alone() -> None:
    """Negative control: reads through a clock and waits without a timeout pass."""
    assert findings(CLEAN) == []


def test_the_scan_finds_the_real_clocks_own_time_reads() -> None:
    """Positive control on real source: ``clock.py`` itself is where time is read."""
    found = findings(CLOCK.read_text())
    assert any(what == "import time" for _, what in found)
    assert any(what == "time.monotonic" for _, what in found)
    assert any(what == "datetime.now" for _, what in found)
    assert any(what.startswith(".wait() with") for _, what in found)


MODULES = sorted(path for path in CONTROLLER.glob("*.py") if path != CLOCK)


def test_the_scan_covers_the_controller_package() -> None:
    """The modules that wait the most are among those scanned."""
    names = {path.name for path in MODULES}
    assert {"informer.py", "leaderelection.py", "workers.py", "manager.py", "retry.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_no_controller_module_reads_time_but_through_the_clock(path: Path) -> None:
    """Outside ``clock.py``, every time read and timed wait goes through a ``Clock``."""
    assert findings(path.read_text()) == [], f"{path.name} reads time directly"
