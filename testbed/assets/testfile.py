"""The test bed's own provider: ``pulumi-resource-testfile``, built from this repository.

``RECIPES``: ``testfile``, the provider of ``testbed/programs/files-yaml`` (one resource,
``testfile:index:File``, a file on the provider's machine; the source, a plain gRPC
server, says the rest). It is compiled against the Pulumi SDK module of the CLI the tests
run (whose modules the ``pulumi`` recipe already downloaded); the recipe's text holds a
hash of the source, so an edited provider is rebuilt and never served from the cache.
Tests serve it to the CLI from a plugin mirror (``testbed.plugin_mirror.file_provider``),
as a release archive, like any third-party provider: it is never on ``PATH``.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Final

from testbed.assets.pulumi import PULUMI_VERSION
from testbed.assets.recipe import Recipe
from testbed.assets.toolchain import Go, new_wrapper

TESTFILE_VERSION: Final = "0.1.0"
SOURCE: Final = Path(__file__).parents[1] / "providers" / "testfile" / "main.go"
BINARY: Final = "pulumi-resource-testfile"


def _source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def _build_testfile(go: Go, out: Path) -> None:
    header = f"go 1.26.0\n\nrequire github.com/pulumi/pulumi/sdk/v3 v{PULUMI_VERSION}\n"
    wrapper = new_wrapper(go, f"testfile-{_source_hash()}", header)
    shutil.copy2(SOURCE, wrapper / "main.go")
    go.run(["mod", "tidy"], wrapper)
    go.run(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / BINARY), "."], wrapper)
    shutil.rmtree(wrapper, ignore_errors=True)


RECIPES = {
    "testfile": Recipe(
        "testfile",
        TESTFILE_VERSION,
        (BINARY,),
        "",
        _build_testfile,
        ("--version",),
        f"testfile:{TESTFILE_VERSION}:sdk-{PULUMI_VERSION}:source-{_source_hash()}",
    ),
}
"""The test bed's provider recipe, by the name ``find_built``/``--with`` use."""
