"""Node end-to-end tests: a real single-node cluster (kubelet, containerd, CNI, kube-proxy)."""
