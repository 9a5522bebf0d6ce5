"""Tests of the pod runner (workspace/runner/pod/)."""
