"""Guard: no shipped module reads the time but through a ``Clock``.

``controller/clock.py`` is where time is read; every other module of the shipped packages
(``controller``, ``status``, ``workspace``, ``reconcile``, ``pulumi_stack_operator``) reads
it through a ``Clock`` it is given, so one clock (the composition root's) times the whole
operator and a test on a ``FakeClock`` controls it. The scan is the one of
``tests/controller/test_one_clock.py``; ``controller`` is held to more there (no timed wait
at all), while elsewhere a wait with a timeout that bounds a real process, stream or thread
(``proc.wait``, ``thread.join``) is allowed: it is not a time read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.controller.test_one_clock import findings

REPO = Path(__file__).parents[1]
SHIPPED = ("controller", "status", "workspace", "reconcile", "pulumi_stack_operator")
CLOCK = REPO / "controller" / "clock.py"
MODULES = sorted(path for top in SHIPPED for path in (REPO / top).rglob("*.py") if path != CLOCK)


def reads(source: str) -> list[tuple[int, str]]:
    """The direct time reads of ``source`` (imports of ``time``, ``time.*``, ``*.now()``)."""
    return [(line, what) for line, what in findings(source) if "with a timeout" not in what]


def test_a_direct_read_is_found_and_a_timed_wait_is_not_one() -> None:
    """Positive and negative controls of ``reads``."""
    source = "import time\nstarted = time.monotonic()\nthread.join(5)\nnow = clock.now()\n"
    assert reads(source) == [(1, "import time"), (2, "time.monotonic")]


def test_every_shipped_package_is_scanned() -> None:
    """Each package has modules in the scan (a renamed package cannot drop out of it)."""
    scanned = {path.relative_to(REPO).parts[0] for path in MODULES}
    assert scanned == set(SHIPPED)


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(REPO)) for p in MODULES])
def test_no_shipped_module_reads_time_but_through_a_clock(path: Path) -> None:
    """Outside ``controller/clock.py`` every time read goes through a ``Clock``."""
    assert reads(path.read_text()) == [], f"{path.relative_to(REPO)} reads the time itself"
