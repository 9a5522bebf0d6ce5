"""The OpenTelemetry family of recipes: a Collector that receives OTLP and writes JSON files.

``RECIPES``: ``otel`` (``otelcol-pso``, for ``testbed.otel_collector`` and the tracing
tests). The Collector's own distribution builder (``ocb``, a published Go module) generates
a distribution with only the OTLP receiver and the file exporter, and compiles it; the
versions are ones the Go module proxy here serves for every module they pull in (the newest
builder's components need modules it refuses).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from testbed.assets.recipe import Recipe
from testbed.assets.toolchain import Go, new_wrapper

OTEL_COLLECTOR_VERSION: Final = "0.161.0"
BUILDER_MODULE: Final = "go.opentelemetry.io/collector/cmd/builder"
COMPONENTS: Final = (
    ("receivers", "go.opentelemetry.io/collector/receiver/otlpreceiver"),
    (
        "exporters",
        "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter",
    ),
)
DIST_NAME: Final = "otelcol-pso"


def _manifest(go_binary: str, output: Path) -> str:
    """The builder's manifest: this distribution, its two components, the toolchain's go."""
    lines = [
        "dist:",
        f"  name: {DIST_NAME}",
        "  description: OpenTelemetry Collector of the pulumi-stack-operator test bed",
        f"  output_path: {output}",
        f"  version: {OTEL_COLLECTOR_VERSION}",
        f"  go: {go_binary}",
    ]
    for kind, module in COMPONENTS:
        lines += [f"{kind}:", f"  - gomod: {module} v{OTEL_COLLECTOR_VERSION}"]
    return "\n".join(lines) + "\n"


def _build_collector(go: Go, out: Path) -> None:
    wrapper = new_wrapper(go, f"otelcol-{OTEL_COLLECTOR_VERSION}", "go 1.26.0\n")
    go_binary = shutil.which("go")
    if go_binary is None:  # Go.find found one, so this only guards the type
        go_binary = "go"
    manifest = wrapper / "manifest.yaml"
    manifest.write_text(_manifest(go_binary, wrapper / "dist"))
    builder = f"{BUILDER_MODULE}@v{OTEL_COLLECTOR_VERSION}"
    go.run(["run", builder, "--config", str(manifest)], wrapper)
    shutil.copy2(wrapper / "dist" / DIST_NAME, out / DIST_NAME)
    shutil.rmtree(wrapper, ignore_errors=True)


RECIPES = {
    "otel": Recipe(
        "otelcol",
        OTEL_COLLECTOR_VERSION,
        (DIST_NAME,),
        "",
        _build_collector,
        ("--version",),
        "otelcol:ocb+otlpreceiver+fileexporter",
    ),
}
"""The OpenTelemetry family's recipes, by the name ``find_built``/``--with`` use."""
