"""The pod runner: each operation in a run pod of its own, followed from the operator.

Modules, one job each: ``runner`` (``PodRunner``: which pod a run follows), ``run``
(following one run pod to its outcome), ``api`` (its API calls and watch), ``state``
(reading a pod as the API serves it), ``node`` (its node and the path to it), ``spec``
(its manifest). Nothing is imported here: ``workspace.runner.pod.spec`` is read by the
agent's side and by benchmarks without loading the runner and its API client.
"""
