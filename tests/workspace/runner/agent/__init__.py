"""Tests of the agent runner (workspace/runner/agent/)."""
