"""Tests of the Pulumi runner (reconcile/runner/)."""
