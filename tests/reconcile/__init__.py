"""Tests of the Stack reconciler (reconcile/)."""
