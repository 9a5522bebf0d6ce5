"""Tests of installing programs' dependencies (workspace/runner/deps/)."""
