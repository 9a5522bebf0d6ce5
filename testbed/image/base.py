"""The images the operator's image is built on: a Debian made with mmdebstrap, no registry.

``ensure_base`` makes ``localhost/pso-base:<key>``: ``mmdebstrap --variant=minbase`` of
bookworm with Python and its venv module, imported with ``PATH`` and ``LANG`` set. The
root filesystem is cached under the image cache by its key (suite, packages, recipe
revision, architecture), like the test binaries.

``ensure_builder_base`` adds, on top, the host's CA bundle: packages may be reached through
a TLS-intercepting proxy that only the host trusts. Only the Dockerfile's builder stage
(``BUILDER_IMAGE``) is built on it; the operator's image is not.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from testbed.image.cache import ImageError, image_cache, log
from testbed.image.engine import INSTALL_HINT, Engine

SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates")
# Bump when the recipe below changes what it makes.
RECIPE_REVISION = "1"
BASE_REPOSITORY = "localhost/pso-base"
BUILDER_REPOSITORY = "localhost/pso-build-base"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Debian's bundle, read by apt, pip (Debian's), requests and Python's ssl module.
IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)


def base_key() -> str:
    """The base's cache key: suite, a hash of packages, recipe and import, architecture."""
    recipe = "\0".join((RECIPE_REVISION, SUITE, *PACKAGES, *IMPORT_CHANGES))
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:10]
    return f"{SUITE}-{digest}-{platform.machine()}"


def ensure_base(engine: Engine) -> str:
    """The ref of the imported base image, made (mmdebstrap, import) when missing."""
    ref = f"{BASE_REPOSITORY}:{base_key()}"
    if engine.image_id(ref) is None:
        rootfs = _rootfs(base_key())
        started = time.monotonic()
        changes = [arg for change in IMPORT_CHANGES for arg in ("--change", change)]
        engine.run("import", *changes, str(rootfs), ref)
        log(f"imported {ref} in {time.monotonic() - started:.0f}s")
    return ref


def ensure_builder_base(engine: Engine, base_ref: str, ca_bundle: Path = HOST_CA_BUNDLE) -> str:
    """The ref of ``base_ref`` with ``ca_bundle`` as Debian's CA bundle; ``base_ref`` if none."""
    if not ca_bundle.is_file():
        return base_ref
    bundle = ca_bundle.read_bytes()
    key = hashlib.sha256(base_ref.encode() + b"\0" + bundle).hexdigest()[:12]
    ref = f"{BUILDER_REPOSITORY}:{key}"
    if engine.image_id(ref) is not None:
        return ref
    with tempfile.TemporaryDirectory(prefix="pso-builder-base-") as context:
        Path(context, "ca-certificates.crt").write_bytes(bundle)
        Path(context, "Containerfile").write_text(builder_containerfile(base_ref))
        engine.run("build", "--tag", ref, "--file", f"{context}/Containerfile", context)
    log(f"built {ref} (the host's CA bundle on {base_ref})")
    return ref


def builder_containerfile(base_ref: str) -> str:
    """The Containerfile that puts the CA bundle of its context into ``base_ref``."""
    return (
        f"FROM {base_ref}\n"
        f"COPY ca-certificates.crt {IMAGE_CA_BUNDLE}\n"
        f"ENV PIP_CERT={IMAGE_CA_BUNDLE} SSL_CERT_FILE={IMAGE_CA_BUNDLE}\n"
    )


def _rootfs(key: str) -> Path:
    """The cached root filesystem tarball of ``key``, made with mmdebstrap when missing."""
    directory = image_cache() / "base" / key
    tarball = directory / "rootfs.tar"
    if tarball.is_file():
        return tarball
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        msg = f"mmdebstrap is needed to make the image's base; {INSTALL_HINT}"
        raise ImageError(msg)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f"rootfs.tmp.{os.getpid()}.tar"
    argv = [
        mmdebstrap,
        "--quiet",
        "--variant=minbase",
        "--format=tar",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(partial),
    ]
    log(f"mmdebstrap {SUITE} ({', '.join(PACKAGES)}): takes a minute or more")
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        msg = f"mmdebstrap failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        raise ImageError(msg)
    partial.rename(tarball)
    log(f"mmdebstrap made {tarball} in {time.monotonic() - started:.0f}s")
    return tarball
