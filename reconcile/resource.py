"""The Stack resource's API coordinates and the finalizer this operator puts on Stacks."""

from __future__ import annotations

GROUP, VERSION, PLURAL, KIND = "pulumi.com", "v1", "stacks", "Stack"
FINALIZER = "finalizer.stack.pulumi.com"
