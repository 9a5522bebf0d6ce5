"""Tests of installing programs' dependencies (reconcile/runner/deps/)."""
