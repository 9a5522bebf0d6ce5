"""``python -m bench.peer.pko_v2_main [--quick] [--keep]``: the PKO v2 comparison alone.

Starts the bench's test bed in a temporary directory, runs ``bench.peer.pko_v2.run`` (the
``bench=pko-v2`` line, ``skipped`` without ``PKO_V2_SOURCE``), prints the line on stdout
and progress on stderr, and removes the directory (``--keep`` keeps its logs). ``--quick``
takes two cached samples and a 30 s idle window instead of five and 5 minutes. Exit
status 1 when the comparison failed (its traceback on stderr).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from bench.context import Context, Scale, progress_printer
from bench.fleet import Fleet
from bench.peer import pko_v2
from bench.signals import take_signals
from bench.testbed import started


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison once; 0 when its line was printed."""
    parser = argparse.ArgumentParser(prog="python -m bench.peer.pko_v2_main")
    parser.add_argument("--quick", action="store_true", help="2 samples, 30 s idle")
    parser.add_argument("--keep", action="store_true", help="keep the test bed's directory")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    take_signals()  # SIGTERM unwinds; children get SIGINT's default action
    say = progress_printer(time.monotonic())
    scale = Scale.quick() if args.quick else Scale()
    skipped = pko_v2.skipped()
    if skipped is not None:
        sys.stdout.write(skipped.line() + "\n")
        return 0
    with started("pso-bench-pko-v2-", keep=args.keep, say=say) as bed:
        summary = pko_v2.run(Context(bed, Fleet(bed, say), scale, say))
    sys.stdout.write(summary.line() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
