"""Reports its config and the interpreter it runs with (test program, no resources)."""

import sys

import pulumi

pulumi.export("value", pulumi.Config().get("value") or "")
pulumi.export("prefix", sys.prefix)
pulumi.export("executable", sys.executable)
