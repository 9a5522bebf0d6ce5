"""The operator's composition root: flags, wiring and the entry point.

``controller`` (generic machinery), ``status`` and ``reconcile`` know nothing of each
other's construction; this package builds them and connects them, and nothing imports it.
Run it as ``pulumi-stack-operator`` or ``python -m pulumi_stack_operator``.
"""
