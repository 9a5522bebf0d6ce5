"""Benchmarks of the operator against the real test bed: ``make bench`` / ``python -m bench``.

Each benchmark starts the real operator (``python -m pulumi_stack_operator``) as a
subprocess against a real etcd + kube-apiserver, git daemon and Pulumi CLI
(``testbed/``), measures from the outside (watches, ``/metrics``, ``/proc``), and
reports exactly one summary line ``bench=<name> key=value ...`` on stdout.
``bench.readme`` turns those lines into the results table of ``docs/benchmarks.md``. Nothing
here asserts a timing: numbers are reported, not judged pass/fail, except in that table's
"target" column, which only says whether each was met.
"""
