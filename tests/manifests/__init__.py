"""Tests of manifests/: kustomize builds, server-side dry-runs, RBAC, alerts and dashboards."""
