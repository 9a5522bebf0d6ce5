"""The sample Stacks' program: outputs only, so it needs no provider and no credentials."""

# ruff: noqa: INP001 - a Pulumi program directory, not a package

import pulumi

config = pulumi.Config()
greeting = config.get("greeting") or "Hello"
pulumi.export("message", f"{greeting} from stack {pulumi.get_stack()}")
pulumi.export("project", pulumi.get_project())
