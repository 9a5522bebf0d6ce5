"""Configuration files of the node's daemons: containerd, CNI, kubelet, kube-proxy.

Pure functions of a ``NodeLayout`` (where the node's files live, its names and ranges).
The settings that make a node work on a cgroup v1/v2 hybrid VM without
``CAP_SYS_RESOURCE`` are here: kubelet ``failCgroupV1: false`` with the ``cgroupfs``
driver (containerd 1.6 cannot tell kubelet its driver), containerd
``restrict_oom_score_adj`` (runc may not lower oom_score_adj), kube-proxy without
conntrack tuning (the VM's sysctls are not ours to change). Nothing points at the host's
default paths (``/var/lib/kubelet``, ``/etc/cni``, ``/opt/containerd``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml

CNI_BIN_DIR = Path("/usr/lib/cni")
SANDBOX_IMAGE = "localhost/pulumi-stack-operator/pause:testbed"


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """Where one node's files live and what it is called."""

    root: Path  # everything of the node's under here
    node_name: str
    node_ip: str
    pod_cidr: str
    cgroup_root: str  # kubelet's cgroupRoot, e.g. /pso-<id>

    @property
    def containerd_socket(self) -> Path:
        """The gRPC socket of containerd."""
        return self.root / "containerd" / "containerd.sock"

    def path(self, name: str) -> Path:
        """A file or directory of the node's, by name."""
        return self.root / name


def containerd_toml(layout: NodeLayout) -> str:
    """The config of containerd (v2 schema, containerd 1.6)."""
    base = layout.root / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"

[{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{layout.path("cni")}"
"""


def cni_conflist(layout: NodeLayout) -> str:
    """A bridge network over the Pod range, with host-local IPAM and port mappings."""
    bridge = {
        "type": "bridge",
        "bridge": "cni0",
        "isGateway": True,
        "ipMasq": False,  # the host routes the Pod range: pods keep their source address
        "hairpinMode": True,  # a pod reaches itself through its own Service
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": layout.pod_cidr}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(layout.path("cni-ipam")),
        },
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    conflist = {"cniVersion": "1.0.0", "name": "testbed", "plugins": [bridge, portmap]}
    return json.dumps(conflist, indent=2)


# The kubelet's Lease duration (40 s by default, renewed every 10 s): 8 s, renewed every 2 s.
NODE_LEASE_SECONDS = 8
RESOLV_CONF = "resolv.conf"
RESOLV_CONF_TEXT = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def kubelet_config(layout: NodeLayout, client_ca: Path) -> str:
    """The KubeletConfiguration."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": layout.node_ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(layout.path("pod-logs")),
        "volumePluginDir": str(layout.path("kubelet/volume-plugins")),
        "failSwapOn": False,
        # No cluster DNS runs and nothing outside is reachable. The host's resolver is not
        # reachable from the pod network either, and every lookup there times out (10 s),
        # which would make programs that look a name up (the Pulumi CLI does) crawl. Pods
        # get a resolver on their own loopback instead: lookups fail at once.
        "resolvConf": str(layout.path(RESOLV_CONF)),
        "hairpinMode": "hairpin-veth",
        "serializeImagePulls": False,
        # A shared build machine's disk is not ours to keep free: never evict or GC.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "2s",
        # Renewed every quarter of its duration (2 s); see cluster.NODE_MONITOR_GRACE.
        "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
        "syncFrequency": "10s",
        "fileCheckFrequency": "0s",
        "shutdownGracePeriod": "0s",
    }
    return yaml.safe_dump(config)


def kube_proxy_config(layout: NodeLayout, kubeconfig: Path) -> str:
    """kube-proxy's KubeProxyConfiguration (iptables mode, inside the node's namespace)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": layout.pod_cidr,
        "hostnameOverride": layout.node_name,
        "healthzBindAddress": f"{layout.node_ip}:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False},
    }
    return yaml.safe_dump(config)
