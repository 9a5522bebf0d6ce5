"""The benchmarks' signal dispositions: SIGINT and SIGTERM unwind, and children get the defaults.

Role: called first by each benchmark entry point (``python -m bench``,
``python -m bench.peer.pko_v2_main``).

SIGTERM (``make`` cancelled) unwinds like Ctrl-C, so the test bed is stopped. SIGINT is set
whatever it was at start-up, because a process started with SIGINT ignored (under
``nohup``, or in the background of a non-interactive shell) passes the ignored disposition
on through every exec, and Python then never installs its own handler. A Pulumi CLI
started that way lost 5 s on each ``pulumi up`` of a TypeScript program: the CLI asks the
language host for the update's runtime metadata, then stops it by sending SIGINT to its
process group and kills it only after a 5 s grace; a language host that inherited SIGINT
ignored lives out the grace. The bare ``pulumi up`` of the ``pods`` row measured 6.4 s
instead of 1.4 s that way, while the operators' CLIs (whose operator takes SIGINT itself,
so its children start with the default) did not. A handler set here is reset to the
default in each child by exec, which is what the children need.
"""

from __future__ import annotations

import signal


def take_signals() -> None:
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread (module docstring)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
