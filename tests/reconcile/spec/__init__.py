"""Tests of the Stack spec parser (reconcile/spec/)."""
