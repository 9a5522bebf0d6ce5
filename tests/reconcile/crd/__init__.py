"""Tests of the Stack CRD (manifests/crd/) against a real kube-apiserver and kubectl."""
