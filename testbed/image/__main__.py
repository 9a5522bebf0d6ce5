"""``python3 -m testbed.image``: build the operator's image, print its ref, size and time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from testbed.image.build import build_image
from testbed.image.cache import ImageError


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or find) the image; 0 on success, 1 with the reason on stderr otherwise."""
    parser = argparse.ArgumentParser(
        prog="hack/build-image", description="Build the operator's image (no registry needed)."
    )
    parser.add_argument("--tag", help="also tag the image with this name, e.g. pso:dev")
    parser.add_argument(
        "--no-cache", action="store_true", help="rebuild every step (the base images stay)"
    )
    parser.add_argument("--print-ref", action="store_true", help="print only the image's ref")
    parser.add_argument("--revision", help="the revision label (default: git rev-parse HEAD)")
    parser.add_argument("--pulumi-url", help="the Pulumi release archive (default: the test bed's)")
    parser.add_argument("--pulumi-checksums-url", help="its checksums file (with --pulumi-url)")
    args = parser.parse_args(argv)
    if bool(args.pulumi_url) != bool(args.pulumi_checksums_url):
        parser.error("--pulumi-url and --pulumi-checksums-url go together")
    try:
        image = build_image(
            tag=args.tag,
            no_cache=args.no_cache,
            pulumi_url=args.pulumi_url,
            pulumi_checksums_url=args.pulumi_checksums_url,
            revision=args.revision,
        )
    except ImageError as err:
        sys.stderr.write(f"hack/build-image: {err}\n")
        return 1
    if args.print_ref:
        sys.stdout.write(f"{image.ref}\n")
        return 0
    how = "found (unchanged content)" if image.cached else "built"
    sys.stdout.write(f"{image.ref}\n")
    sys.stdout.write(
        f"{how} in {image.seconds:.1f}s, {image.size / 1e6:.0f} MB, base {image.base}\n"
    )
    if args.tag:
        sys.stdout.write(f"also tagged {args.tag}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
