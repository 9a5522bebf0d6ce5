"""Tests of charts/pulumi-stack-operator: lint, renders against manifests/, dry runs, installs."""
