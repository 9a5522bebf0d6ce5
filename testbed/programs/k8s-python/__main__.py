"""A Namespace and a ConfigMap through pulumi-kubernetes (test program)."""

import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()

namespace = k8s.core.v1.Namespace(
    "namespace", metadata={"name": config.require("namespace")}
)
settings = k8s.core.v1.ConfigMap(
    "settings",
    metadata={
        "name": config.get("configMapName") or "settings",
        "namespace": namespace.metadata.name,
    },
    data={"content": config.require("content")},
)

pulumi.export("namespace", namespace.metadata.name)
pulumi.export("configMap", settings.metadata.name)
pulumi.export("content", settings.data["content"])
