"""The test bed: real etcd, kube-apiserver, Pulumi CLI, git daemon and Prometheus."""
