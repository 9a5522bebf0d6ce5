"""The workspace engine: run a Pulumi program's operations in a workspace and report back.

A layer below the reconciler and above ``status``'s text limits. ``runner`` runs one
operation (locally through the Automation API, or in a run pod), ``source`` brings the
program's files (a git checkout), ``process`` runs child processes and ``gitref`` names git
revisions. Nothing here knows what a Stack is: the reconciler (``reconcile``) hands it a plan
and judges the outcome it gets back.
"""
