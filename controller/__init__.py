"""Controller machinery: informer, cache, work queue, rate limiters, workers, leader election.

It turns watch events into reconcile calls for any custom resource and knows nothing about
Pulumi, Stacks or this operator: it imports nothing from ``status``, ``reconcile`` or
``pulumi_stack_operator`` (``tests/test_layers.py`` checks). An application describes its
command line with ``controller.config.Application`` (adding its own flags), builds a
``controller.manager.Manager`` with a reconciler factory, and reads objects through the
manager's ``controller.view.ReadYourWritesView`` to see its own writes at once.
"""
