"""The agent runner: the pod runner's job through the real agent, as child processes here.

Modules: ``runner`` (``AgentRunner``: the job's checkout and run steps, stopped as a pod's
would be), ``env`` (what a run pod's kubelet would give each step). For development and
the test bed only: it has the local runner's trust, not a run pod's boundaries.
"""
