import * as pulumi from "@pulumi/pulumi";

const config = new pulumi.Config();

export const value = config.get("value") ?? "";
export const modules = require.resolve("@pulumi/pulumi");
export const node = process.version;
