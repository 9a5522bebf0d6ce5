"""Controller machinery: informer, cache, work queue, rate limiters, workers, leader election.

It turns watch events into reconcile calls and knows nothing about Pulumi.
"""
