import * as pulumi from "@pulumi/pulumi";

const config = new pulumi.Config();

export const greeting: string = `hello ${config.require("who")} from node ${process.version}`;
