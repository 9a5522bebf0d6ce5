"""``bench.signals``: a benchmark started with SIGINT ignored starts its children without that."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import subprocess
from bench.signals import take_signals
{take}
print(subprocess.run(["grep", "^SigIgn:", "/proc/self/status"], capture_output=True,
                     text=True, check=True).stdout.split()[1])
"""


def _ignored_in_grandchild(*, take: bool) -> bool:
    """Whether a process started by a SIGINT-ignoring benchmark ignores SIGINT itself."""
    code = CHILD.format(take="take_signals()" if take else "")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    return bool(int(done.stdout.strip(), 16) & (1 << (signal.SIGINT - 1)))


def test_children_get_sigint_back_when_the_bench_inherited_it_ignored() -> None:
    """Without ``take_signals`` the ignored SIGINT reaches the CLI; with it, not."""
    assert _ignored_in_grandchild(take=False)  # what nohup hands on, without the fix
    assert not _ignored_in_grandchild(take=True)


def test_sigterm_unwinds_as_ctrl_c() -> None:
    """SIGTERM raises ``KeyboardInterrupt``, so the test bed is stopped on the way out."""
    code = (
        "import os, signal\nfrom bench.signals import take_signals\ntake_signals()\n"
        "try:\n    os.kill(os.getpid(), signal.SIGTERM)\n    signal.pause()\n"
        "except KeyboardInterrupt:\n    print('unwound')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "unwound"
