"""``hack/build-pko-v2``: build PKO v2's manager, agent and image ahead of ``make bench``.

``python -m bench.peer.pko_v2_cli [--snapshot GIT_DIR [--tag v2.9.0]] [--image FILE]``
builds (or finds in the cache) the binaries of the tree ``PKO_V2_SOURCE`` names; with
``--snapshot`` and ``PKO_V2_SOURCE`` unset, it first writes the tag's tree from that bare
git snapshot of PKO's repository into the cache (``git archive``). It prints, on stdout,
one ``key=value`` line per result (``source``, ``directory``, ``version``, ``build_s``,
sizes, ``image``) and the ``export PKO_V2_SOURCE=…`` line ``make bench`` needs. Exit
status 1, with the reason on stderr, when there is no source or the build failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.peer.pko_v2_build import (
    SOURCE_ENV,
    BuildError,
    build,
    extract_snapshot,
    source_from_env,
)
from bench.peer.pko_v2_image import image_archive
from testbed.assets import cache_root

DEFAULT_TAG = "v2.9.0"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; ``--help`` documents it."""
    parser = argparse.ArgumentParser(
        prog="hack/build-pko-v2", description="Build PKO v2's manager, agent and image."
    )
    parser.add_argument(
        "--snapshot",
        type=Path,
        help=f"a bare git snapshot of PKO's repository ({SOURCE_ENV} unset)",
    )
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"its release (default {DEFAULT_TAG})")
    parser.add_argument("--image", type=Path, help="also write PKO v2's image archive here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Build; 0 on success, 1 with the reason on stderr."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        source = _source(args.snapshot, args.tag)
        built = build(source)
        results: dict[str, object] = {
            "source": source,
            "directory": built.directory,
            "version": built.version,
            "build_s": f"{built.seconds:.1f}",
            "manager_mib": f"{built.manager.stat().st_size / 2**20:.1f}",
            "agent_mib": f"{built.agent.stat().st_size / 2**20:.1f}",
        }
        if args.image:
            archive = image_archive(built, args.image)
            results |= {"image": archive, "image_mib": f"{archive.stat().st_size / 2**20:.1f}"}
    except BuildError as err:
        sys.stderr.write(f"build-pko-v2: {err}\n")
        return 1
    sys.stdout.write("".join(f"{key}={value}\n" for key, value in results.items()))
    sys.stdout.write(f"export {SOURCE_ENV}={source}\n")
    return 0


def _source(snapshot: Path | None, tag: str) -> Path:
    """``PKO_V2_SOURCE``'s tree, else ``tag``'s tree written from ``snapshot`` into the cache."""
    source = source_from_env()
    if source is not None:
        return source
    if snapshot is None:
        msg = f"{SOURCE_ENV} is unset and no --snapshot was given"
        raise BuildError(msg)
    return extract_snapshot(snapshot, tag, cache_root() / "pko-v2" / f"source-{tag}")


if __name__ == "__main__":
    sys.exit(main())
