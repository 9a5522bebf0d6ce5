"""Tests of the Pulumi runner (workspace/runner/)."""
