"""A real Kubernetes cluster (one node, or more) for the node end-to-end tests.

``NodeCluster`` (``testbed.node.cluster``) runs a control plane with
kube-controller-manager and kube-scheduler on the host and one node (containerd,
kubelet, CNI bridge, kube-proxy; ``testbed.node.member``) in its own network, mount and
PID namespaces -- or, with ``nodes=2``, two such nodes -- and tears all of it down.
``make_oci_archive`` (``testbed.node.oci``) packs small images for it.
"""

from testbed.node.cluster import NodeBinaries, NodeCluster, missing_host_tools
from testbed.node.oci import make_oci_archive

__all__ = ["NodeBinaries", "NodeCluster", "make_oci_archive", "missing_host_tools"]
