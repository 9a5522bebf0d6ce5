"""Tests of the git source (workspace/source/), one module per module of the package."""
