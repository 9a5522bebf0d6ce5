"""A program given inline (a rendered Program): its ``Pulumi.yaml`` written as a source tree.

``write_project`` makes a directory hold exactly one file, ``Pulumi.yaml``, with the given
text. Like a checkout or an unpacked artifact, the directory is built beside its place and
renamed into it, so a failure never leaves a half-written program that a run could take for
a good one.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

PROJECT_FILE = "Pulumi.yaml"


def write_project(target: Path, project: str) -> None:
    """Make ``target`` a directory holding only ``Pulumi.yaml`` with ``project`` (UTF-8).

    Whatever ``target`` was is replaced in one rename.

    Raises:
        OSError: the file system failed (disk full, permissions).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    target = target.parent.resolve() / target.name
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        (staging / PROJECT_FILE).write_text(project, encoding="utf-8")
        staging.chmod(0o755)
        if os.path.lexists(target):
            old = target.with_name(f".{target.name}.old-{secrets.token_hex(4)}")
            target.rename(old)
            staging.rename(target)
            _remove(old)
        else:
            staging.rename(target)
    except BaseException:
        _remove(staging)
        raise


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
