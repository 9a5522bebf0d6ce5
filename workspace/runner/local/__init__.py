"""The local runner: each operation as child processes of the operator, on its own machine.

Module: ``runner`` (``LocalRunner``, its CLI binary and cache limits). What it shares with
the agent in a run pod (one operation's phases, the CLI, the dependency installer) lives
one level up, in ``workspace.runner``.
"""
