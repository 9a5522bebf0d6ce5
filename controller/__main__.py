"""Command-line entry point (``pulumi-stack-operator``, ``python -m controller``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import version


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags; the manager that runs the operator is not built yet."""
    parser = argparse.ArgumentParser(
        prog="pulumi-stack-operator",
        description="Reconcile pulumi.com/v1 Stacks through the Pulumi Automation API.",
    )
    parser.add_argument("--version", action="version", version=version("pulumi-stack-operator"))
    parser.parse_args(argv)
    print("pulumi-stack-operator: not yet - the manager lands with the controller core")  # noqa: T201
    return 1


if __name__ == "__main__":
    sys.exit(main())
