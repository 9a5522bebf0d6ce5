"""Tests of the local runner (workspace/runner/local/)."""
