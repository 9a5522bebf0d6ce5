"""The operator's image, built here from the Dockerfile without a registry (``make image``).

``build_image()`` builds it with podman (docker when an engine runs) on a Debian base made
with mmdebstrap, with this machine's Node.js and the test bed's Pulumi CLI, cached by
content; ``save_archive()`` writes
it as an archive containerd imports. ``python3 -m testbed.image`` (hack/build-image) is the
command line. Standard library only: it runs under the system python3.
"""

from testbed.image.build import BuiltImage, build_image, save_archive
from testbed.image.cache import ImageError
from testbed.image.engine import INSTALL_HINT, Engine, find_engine, missing_tools

__all__ = [
    "INSTALL_HINT",
    "BuiltImage",
    "Engine",
    "ImageError",
    "build_image",
    "find_engine",
    "missing_tools",
    "save_archive",
]
