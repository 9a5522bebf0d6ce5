"""Unpack a gzip-compressed tar archive into an empty directory, refusing anything unsafe.

What lands: regular files and directories, hard links to files unpacked before them, and
relative symbolic links that resolve inside the directory. Refused (``UnsafeArchiveError``):
an absolute name or one with ``..``; a device, FIFO, sparse file or any other kind of entry;
a link that leads outside the directory (an absolute symlink, one that resolves outside,
even through other symlinks, or a hard link to anything but a file unpacked before it);
an entry that collides with another one; more entries, or more bytes of file content, than
the caller's limits; an extended header (pax or GNU long name) larger than
``MAX_HEADER_BYTES``; and a stream that is not a gzip-compressed tar archive.

Modes: a file is 0755 if the archive gives it any execute bit and 0644 otherwise, a
directory 0777, all less the process umask; setuid, setgid and sticky bits never land, nor
do owners or times. Symlinks are made last, after every file and directory, so no entry is
ever written through one.

The checks are made here, on every Python version alike: ``tarfile``'s extraction filters
(3.11.4+) are not used. The caller unpacks into a fresh staging directory and discards it
when this raises, so a refusal part-way leaves nothing behind that anyone uses.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

MAX_HEADER_BYTES: Final = 1024 * 1024
"""The largest extended header (pax header or GNU long name) read: 1 MiB.

``tarfile`` reads one into memory whole, so an archive could otherwise make it allocate
gigabytes; real headers hold a few names and numbers, a few KiB at most.
"""

_CHUNK: Final = 64 * 1024  # bytes of file content read at a time (far below MAX_HEADER_BYTES)
_FILE_MODE: Final = 0o644
_EXEC_MODE: Final = 0o755
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COLLISION: Final = (FileExistsError, NotADirectoryError, IsADirectoryError)


class UnsafeArchiveError(Exception):
    """The archive was refused: the message names the entry or the limit, and why."""


def unpack(
    archive: BinaryIO,
    root: Path,
    *,
    max_unpacked_bytes: int,
    max_entries: int,
    check: Callable[[], None] = lambda: None,
) -> int:
    """Unpack the gzip-compressed tar ``archive`` into the empty directory ``root``.

    Returns the number of entries. ``max_unpacked_bytes`` bounds the file content (the sum
    of the sizes the headers declare, checked before each file is written),
    ``max_entries`` the entries of every kind. ``check`` is called before every read of
    the archive; what it raises (a deadline passing) ends the unpacking.

    Raises:
        UnsafeArchiveError: see the module docstring; ``root`` may then hold part of the
            archive, to be discarded.
        OSError: the local file system failed (disk full, permissions).
    """
    unpacker = _Unpacker(root, max_unpacked_bytes, max_entries)
    try:
        with (
            gzip.GzipFile(fileobj=archive, mode="rb") as stream,
            tarfile.open(fileobj=_Checked(stream, check), mode="r:") as tar,
        ):
            for member in tar:
                unpacker.add(tar, member)
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as err:
        msg = f"it is not a gzip-compressed tar archive ({err})"
        raise UnsafeArchiveError(msg) from err
    unpacker.make_symlinks()
    return unpacker.entries


class _Checked:
    """The decompressed stream as ``tarfile`` reads it: ``check`` first, no huge reads.

    ``tarfile`` reads file content in the chunks asked of it (``_CHUNK``) and an extended
    header in one read of its declared size, so a read above ``MAX_HEADER_BYTES`` is one.
    """

    def __init__(self, stream: gzip.GzipFile, check: Callable[[], None]) -> None:
        self._stream, self._check = stream, check

    def read(self, size: int = -1, /) -> bytes:
        if size < 0 or size > MAX_HEADER_BYTES:
            msg = (
                f"an extended header (pax header or long name) is larger than"
                f" {MAX_HEADER_BYTES} bytes, the limit"
            )
            raise UnsafeArchiveError(msg)
        self._check()
        return self._stream.read(size)

    def write(self, _data: bytes, /) -> int:
        raise io.UnsupportedOperation("read-only")

    def tell(self) -> int:
        return self._stream.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        return self._stream.seek(offset, whence)

    def close(self) -> None:
        """Leave the stream to its owner."""


class _Unpacker:
    """Unpacks one entry at a time, keeping the counts and the symlinks to make last."""

    def __init__(self, root: Path, max_unpacked_bytes: int, max_entries: int) -> None:
        self.root = root
        self.max_unpacked_bytes, self.max_entries = max_unpacked_bytes, max_entries
        self.entries = 0
        self.unpacked_bytes = 0
        self.files: set[PurePosixPath] = set()  # regular files so far: what a hard link may name
        self.symlinks: list[tuple[str, PurePosixPath, str]] = []  # (name, path, link target)

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.entries += 1
        if self.entries > self.max_entries:
            msg = f"it holds more than {self.max_entries} entries, the limit"
            raise UnsafeArchiveError(msg)
        name = member.name
        path = _inside(name)
        if path is None:
            msg = f"entry {name!r} leads outside the archive (an absolute path or ..)"
            raise UnsafeArchiveError(msg)
        if member.isdir():
            self._mkdir(name, path)
            return
        if not path.parts:
            msg = f"entry {name!r} names the archive's root but is no directory"
            raise UnsafeArchiveError(msg)
        if member.isreg() and not member.issparse():
            self._file(tar, member, path)
        elif member.islnk():
            self._hard_link(name, path, member.linkname)
        elif member.issym():
            self.symlinks.append((name, path, member.linkname))
        else:
            kind = _KINDS.get(member.type, f"of tar type {member.type!r}")
            msg = f"entry {name!r} is {kind}: only files, directories and links inside are allowed"
            raise UnsafeArchiveError(msg)

    def _file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: PurePosixPath) -> None:
        self.unpacked_bytes += member.size
        if self.unpacked_bytes > self.max_unpacked_bytes:
            msg = f"its files hold more than {self.max_unpacked_bytes} bytes unpacked, the limit"
            raise UnsafeArchiveError(msg)
        self._mkdir(member.name, path.parent)
        mode = _EXEC_MODE if member.mode & 0o111 else _FILE_MODE
        content = tar.extractfile(member)
        if content is None:  # never for a regular file
            msg = f"entry {member.name!r} has no content"
            raise UnsafeArchiveError(msg)
        try:
            fd = os.open(self.root / path, _CREATE, mode)
        except _COLLISION:
            raise _collision(member.name) from None
        with content, os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(content, out, _CHUNK)
        self.files.add(path)

    def _hard_link(self, name: str, path: PurePosixPath, linkname: str) -> None:
        source = _inside(linkname)
        if source not in self.files:
            msg = (
                f"hard link {name!r} points at {linkname!r}, which is not a file earlier in"
                " the archive (it may lead outside it)"
            )
            raise UnsafeArchiveError(msg)
        self._mkdir(name, path.parent)
        try:
            os.link(self.root / source, self.root / path, follow_symlinks=False)
        except _COLLISION:
            raise _collision(name) from None
        self.files.add(path)

    def make_symlinks(self) -> None:
        """Make the symlinks (after everything else), then refuse any that leads outside."""
        for name, path, target in self.symlinks:
            if not target or PurePosixPath(target).is_absolute():
                msg = (
                    f"symbolic link {name!r} points at {target!r}: only relative links are allowed"
                )
                raise UnsafeArchiveError(msg)
            place = self.root
            for part in path.parent.parts:  # mkdir must not follow a link made before
                place /= part
                if place.is_symlink():
                    msg = f"entry {name!r} lies under a symbolic link"
                    raise UnsafeArchiveError(msg)
            self._mkdir(name, path.parent)
            try:
                (self.root / path).symlink_to(target)
            except _COLLISION:
                raise _collision(name) from None
        root = Path(os.path.realpath(self.root))
        for name, path, target in self.symlinks:  # all in place: resolve them as the OS would
            if not Path(os.path.realpath(self.root / path)).is_relative_to(root):
                msg = f"symbolic link {name!r} points at {target!r}, outside the archive"
                raise UnsafeArchiveError(msg)

    def _mkdir(self, name: str, path: PurePosixPath) -> None:
        try:
            (self.root / path).mkdir(parents=True, exist_ok=True)
        except _COLLISION:
            raise _collision(name) from None


def _inside(name: str) -> PurePosixPath | None:
    """``name`` as a path relative to the archive's root, or None if it may leave it."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts:
        return None
    return path


def _collision(name: str) -> UnsafeArchiveError:
    return UnsafeArchiveError(
        f"entry {name!r} collides with another entry (the same name twice, or a name under a file)"
    )


_KINDS: Final = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.GNUTYPE_SPARSE: "a sparse file",
}
