"""The session's operator image (a pytest plugin: ``tests/conftest.py`` registers it).

Registered once for the whole suite, so that the image tests, the node e2e and the chart's
install test share one image (built, or found unchanged, once per session).
``operator_image`` skips, naming what is missing, when the image cannot be built here (not
root, no podman or docker engine, no mmdebstrap: see hack/install-image-tools).
"""

from __future__ import annotations

import pytest

from testbed.image import INSTALL_HINT, BuiltImage, Engine, build_image, find_engine, missing_tools


@pytest.fixture(scope="session")
def image_engine() -> Engine:
    """The engine the image is built and run with; skips when the tools are missing."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"image tests need {', '.join(missing)}: {INSTALL_HINT}")
    return find_engine()


@pytest.fixture(scope="session")
def operator_image(image_engine: Engine) -> BuiltImage:
    """The operator's image, built (or found unchanged) once per session."""
    del image_engine  # only for its skip
    image = build_image()
    how = "found unchanged" if image.cached else "built"
    print(f"operator image {image.ref}: {how} in {image.seconds:.1f}s, {image.size} bytes")  # noqa: T201
    return image
