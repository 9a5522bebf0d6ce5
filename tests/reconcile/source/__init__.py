"""Tests of the git source (reconcile/source/), one module per module of the package."""
