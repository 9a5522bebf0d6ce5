import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";

const config = new pulumi.Config();

const ns = new k8s.core.v1.Namespace("namespace", {
    metadata: { name: config.require("namespace") },
});

const settings = new k8s.core.v1.ConfigMap("settings", {
    metadata: { name: config.get("configMapName") ?? "settings", namespace: ns.metadata.name },
    data: { content: config.require("content") },
});

export const namespace = ns.metadata.name;
export const configMap = settings.metadata.name;
export const content = settings.data["content"];
