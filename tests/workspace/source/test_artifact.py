"""workspace.source.artifact and unpack: Flux artifacts fetched from a server in the test.

A ``ThreadingHTTPServer`` on loopback, in a thread of the test, serves the archives the
tests build in memory (no git, no process: the fast tier). Every refusal is checked to
leave the existing target as it was, nothing beside it, and nothing outside it.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import io
import os
import socket
import stat
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from controller.clock import FakeClock
from tests.workspace.source.helpers import error_texts
from workspace.source import (
    ARTIFACT_TIMEOUT_SECONDS,
    MAX_ARTIFACT_BYTES,
    MAX_ARTIFACT_ENTRIES,
    MAX_UNPACKED_BYTES,
    SourceError,
    SourceFailure,
    fetch_artifact,
    parse_digest,
)
from workspace.source.unpack import MAX_HEADER_BYTES, UnsafeArchiveError, unpack

# --- the server and the archives -------------------------------------------------------------


@dataclass
class Reply:
    """What the server answers for one path."""

    body: bytes = b""
    status: int = 200
    declare_length: bool = True  # send Content-Length (else the body ends when it closes)
    length: int | None = None  # a Content-Length other than the body's
    headers: dict[str, str] = field(default_factory=dict)


class ArtifactServer(ThreadingHTTPServer):
    """Serves ``replies`` by path (404 for any other) and records the paths asked for."""

    daemon_threads = True

    def __init__(self) -> None:
        """Listen on a free loopback port."""
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: dict[str, Reply] = {}
        self.requests: list[str] = []

    def serve(self, body: bytes, path: str = "/artifact.tar.gz", **reply: object) -> str:
        """Serve ``body`` at ``path`` (``reply``: the other fields of ``Reply``); its URL."""
        self.replies[path] = Reply(body, **reply)  # type: ignore[arg-type]
        return self.url(path)

    def url(self, path: str) -> str:
        """The URL of ``path`` on this server."""
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    server: ArtifactServer

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        reply = self.server.replies.get(self.path, Reply(b"no such artifact", status=404))
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.declare_length:
            length = len(reply.body) if reply.length is None else reply.length
            self.send_header("Content-Length", str(length))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(reply.body)  # some tests have the client stop reading

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        """Keep the test output clean."""


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reach the loopback server directly, whatever proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def server() -> Iterator[ArtifactServer]:
    """An artifact server running in a thread for the test."""
    httpd = ArtifactServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An existing target with a file in it, alone in its parent directory."""
    path = tmp_path / "work" / "stack"
    path.mkdir(parents=True)
    (path / "old.txt").write_text("previous artifact")
    return path


Entry = tuple[tarfile.TarInfo, bytes | None]


def file(name: str, data: bytes = b"x", mode: int = 0o600) -> Entry:
    """A regular file entry."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def special(name: str, kind: bytes, linkname: str = "", mode: int = 0o750) -> Entry:
    """An entry without content: a directory, a link, a device, a FIFO."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info, None


def archive(*entries: Entry) -> bytes:
    """A gzip-compressed tar of ``entries``, in order."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(raw.getvalue())


def digest(data: bytes, algorithm: str = "sha256") -> str:
    """``<algorithm>:<hex>`` of ``data``, as in ``status.artifact.digest``."""
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root``: file text, ``dir``, or ``-> target`` for a symlink."""
    found = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = f"-> {path.readlink()}"
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = path.read_text()
    return found


def neighbours(target: Path) -> list[str]:
    """What lies beside ``target`` (staging directories and downloads left behind)."""
    return sorted(p.name for p in target.parent.iterdir() if p != target)


# A source-controller artifact: the root "." first, modes 0600/0700/0750, no times.
FLUX_LIKE = archive(
    special(".", tarfile.DIRTYPE),
    file("Pulumi.yaml", b"name: app\nruntime: python\n"),
    file("bin/run.sh", b"#!/bin/sh\n", mode=0o700),
    special("src", tarfile.DIRTYPE),
    file("src/__main__.py", b"print('hi')\n"),
)
FLUX_LIKE_TREE = {
    "Pulumi.yaml": "name: app\nruntime: python\n",
    "bin": "dir",
    "bin/run.sh": "#!/bin/sh\n",
    "src": "dir",
    "src/__main__.py": "print('hi')\n",
}


# --- the happy paths ---------------------------------------------------------------------------


def test_the_artifact_replaces_the_target(server: ArtifactServer, target: Path) -> None:
    """Files land with their content, the exec bit stays, the old target and leftovers go."""
    leftover = target.parent / f".{target.name}.partial-interrupted"
    leftover.mkdir()
    fetch_artifact(server.serve(FLUX_LIKE), digest(FLUX_LIKE), target)
    assert tree(target) == FLUX_LIKE_TREE
    assert (target / "bin/run.sh").stat().st_mode & 0o111
    assert not (target / "Pulumi.yaml").stat().st_mode & 0o111
    assert neighbours(target) == []


def test_a_missing_target_and_its_parents_are_made(server: ArtifactServer, tmp_path: Path) -> None:
    """Without a target (nor its parent) the artifact is unpacked all the same."""
    target = tmp_path / "new" / "stack"
    fetch_artifact(server.serve(FLUX_LIKE), digest(FLUX_LIKE), target)
    assert tree(target) == FLUX_LIKE_TREE


def test_a_symlink_at_the_target_is_replaced_not_followed(
    server: ArtifactServer, tmp_path: Path
) -> None:
    """A symlink named like the target is replaced; the directory it named is untouched."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    target = tmp_path / "stack"
    target.symlink_to(elsewhere)
    fetch_artifact(server.serve(FLUX_LIKE), digest(FLUX_LIKE), target)
    assert not target.is_symlink()
    assert tree(target) == FLUX_LIKE_TREE
    assert tree(elsewhere) == {"keep.txt": "keep"}


def test_modes_are_masked(server: ArtifactServer, target: Path) -> None:
    """setuid, setgid and sticky bits never land; the exec bit does, at 0755."""
    body = archive(file("suid", mode=0o6755), file("sticky", mode=0o1644))
    fetch_artifact(server.serve(body), digest(body), target)
    suid, sticky = (target / "suid").stat().st_mode, (target / "sticky").stat().st_mode
    assert not suid & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
    assert suid & 0o100
    assert not sticky & stat.S_ISVTX


def test_links_inside_the_archive_land(server: ArtifactServer, target: Path) -> None:
    """Relative symlinks that stay inside, and hard links to earlier files, are kept."""
    body = archive(
        file("src/main.py", b"code"),
        special("main.py", tarfile.SYMTYPE, "src/main.py"),
        special("src/up", tarfile.SYMTYPE, ".."),
        special("copy.py", tarfile.LNKTYPE, "src/main.py"),
    )
    fetch_artifact(server.serve(body), digest(body), target)
    assert tree(target) == {
        "copy.py": "code",
        "main.py": "-> src/main.py",
        "src": "dir",
        "src/main.py": "code",
        "src/up": "-> ..",
    }
    assert (target / "copy.py").stat().st_ino == (target / "src/main.py").stat().st_ino


@pytest.mark.parametrize("algorithm", ["sha256", "sha384", "sha512"])
def test_every_supported_digest_algorithm(
    server: ArtifactServer, target: Path, algorithm: str
) -> None:
    """sha256 (Flux's default), sha384 and sha512 digests are verified; hex in any case."""
    algo, hexdigits = digest(FLUX_LIKE, algorithm).split(":")
    fetch_artifact(server.serve(FLUX_LIKE), f"{algo}:{hexdigits.upper()}", target)
    assert tree(target) == FLUX_LIKE_TREE


def test_a_redirect_to_http_is_followed(server: ArtifactServer, target: Path) -> None:
    """A redirect to another http(s) URL is followed."""
    final = server.serve(FLUX_LIKE, "/final.tar.gz")
    url = server.serve(b"", "/moved", status=302, headers={"Location": final})
    fetch_artifact(url, digest(FLUX_LIKE), target)
    assert tree(target) == FLUX_LIKE_TREE
    assert server.requests == ["/moved", "/final.tar.gz"]


def test_the_defaults() -> None:
    """The documented defaults."""
    assert ARTIFACT_TIMEOUT_SECONDS == 120.0
    assert MAX_ARTIFACT_BYTES == 256 * 1024 * 1024
    assert MAX_UNPACKED_BYTES == 1024 * 1024 * 1024
    assert MAX_ARTIFACT_ENTRIES == 100_000


# --- the digest ----------------------------------------------------------------------------------


def refused(
    target: Path, reason: SourceFailure, url: str, digest: str, **limits: float
) -> SourceError:
    """Run a fetch that must fail with ``reason``; check the target and its parent are as before.

    Returns the error.
    """
    before = tree(target)
    with pytest.raises(SourceError) as caught:
        fetch_artifact(url, digest, target, **limits)  # type: ignore[arg-type]
    assert caught.value.reason is reason, str(caught.value)
    assert tree(target) == before
    assert neighbours(target) == []
    return caught.value


def test_a_digest_mismatch_unpacks_nothing(server: ArtifactServer, target: Path) -> None:
    """The digest is checked before unpacking: an unsafe archive is not even looked at."""
    body = archive(file("/etc/evil"))
    wrong = digest(b"another artifact")
    url = server.serve(body)
    err = refused(target, SourceFailure.ARTIFACT_DIGEST_MISMATCH, url, wrong)
    assert not err.transient
    message = str(err)
    assert url in message
    assert f"expected {wrong}" in message
    assert f"got {digest(body)}" in message


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("blake3:" + "ab" * 32, id="blake3"),
        pytest.param("sha1:" + "ab" * 20, id="sha1"),
        pytest.param("sha256:" + "ab" * 31, id="short"),
        pytest.param("sha256:" + "zz" * 32, id="not-hex"),
        pytest.param("ab" * 32, id="no-algorithm"),
        pytest.param("", id="empty"),
    ],
)
def test_a_digest_that_cannot_be_verified_is_refused_before_downloading(
    server: ArtifactServer, target: Path, bad: str
) -> None:
    """An unsupported algorithm or a malformed digest: ArtifactUnsafe, no request made."""
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, server.serve(FLUX_LIKE), bad)
    assert not err.transient
    assert "--artifact-digest-algo" in str(err)
    assert server.requests == []


def test_parse_digest() -> None:
    """Algorithm and lowercase hex; unsupported algorithms and malformed digests refused."""
    assert parse_digest("sha256:" + "AB" * 32) == ("sha256", "ab" * 32)
    assert parse_digest("sha512:" + "0f" * 64) == ("sha512", "0f" * 64)
    with pytest.raises(ValueError, match=r"'blake3' is not supported \(supported: sha256"):
        parse_digest("blake3:" + "ab" * 32)
    for bad in ("sha256:" + "ab" * 33, "sha384:" + "ab" * 32, "sha256", ":ab", "SHA256:ab"):
        with pytest.raises(ValueError, match="digest"):
            parse_digest(bad)


# --- unsafe archives -------------------------------------------------------------------------


UNSAFE = [
    pytest.param([file("/abs.txt")], "leads outside the archive", id="absolute-path"),
    pytest.param([file("../x.txt")], "leads outside the archive", id="dot-dot"),
    pytest.param([file("a/../../x.txt")], "leads outside the archive", id="dot-dot-inside"),
    pytest.param(
        [special("out", tarfile.SYMTYPE, "../../outside")], "outside the archive", id="symlink-out"
    ),
    pytest.param(
        [special("etc", tarfile.SYMTYPE, "/etc")], "only relative links", id="symlink-absolute"
    ),
    pytest.param(
        [special("s", tarfile.SYMTYPE, "."), special("t", tarfile.SYMTYPE, "s/d/../..")],
        "'t' points at 's/d/../..', outside",
        id="symlink-out-through-a-symlink",
    ),
    pytest.param(
        [special("h", tarfile.LNKTYPE, "../../secret.txt")],
        "not a file earlier in the archive",
        id="hardlink-out",
    ),
    pytest.param(
        [special("h", tarfile.LNKTYPE, "SECRET")],  # the absolute path of secret.txt
        "not a file earlier in the archive",
        id="hardlink-absolute",
    ),
    pytest.param(
        [special("h", tarfile.LNKTYPE, "later.txt"), file("later.txt")],
        "not a file earlier in the archive",
        id="hardlink-forward",
    ),
    pytest.param([special("tty", tarfile.CHRTYPE)], "a character device", id="char-device"),
    pytest.param([special("sda", tarfile.BLKTYPE)], "a block device", id="block-device"),
    pytest.param([special("pipe", tarfile.FIFOTYPE)], "a FIFO", id="fifo"),
    pytest.param([file("a.txt"), file("a.txt")], "collides", id="duplicate"),
    pytest.param([file("a"), file("a/b")], "collides", id="file-under-a-file"),
    pytest.param([file(".")], "names the archive's root", id="file-at-the-root"),
]


@pytest.mark.parametrize(("entries", "problem"), UNSAFE)
def test_unsafe_entries_are_refused(
    server: ArtifactServer, target: Path, tmp_path: Path, entries: list[Entry], problem: str
) -> None:
    """Each unsafe entry refuses the artifact: nothing lands, inside the target or outside."""
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    entries = [(copy.copy(info), data) for info, data in entries]
    for info, _ in entries:
        if info.linkname == "SECRET":
            info.linkname = str(secret)
    body = archive(file("first.txt"), *entries)
    before = sorted(tmp_path.rglob("*"))
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, server.serve(body), digest(body))
    assert problem in str(err)
    assert not err.transient
    assert sorted(tmp_path.rglob("*")) == before
    assert secret.stat().st_nlink == 1


def test_nothing_is_made_through_a_symlink(
    server: ArtifactServer, target: Path, tmp_path: Path
) -> None:
    """An entry under a symlink that leads outside makes nothing there (symlinks come last)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    body = archive(
        special("a", tarfile.SYMTYPE, "../../outside"),
        special("a/b/c", tarfile.SYMTYPE, "x"),
    )
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, server.serve(body), digest(body))
    assert "'a/b/c' lies under a symbolic link" in str(err)
    assert list(outside.iterdir()) == []


def test_too_many_entries(server: ArtifactServer, target: Path) -> None:
    """More entries than max_entries (directories count too): refused, naming the limit."""
    body = archive(special("d", tarfile.DIRTYPE), file("d/1"), file("d/2"), file("d/3"))
    url = server.serve(body)
    fetch_artifact(url, digest(body), target, max_entries=4)
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, url, digest(body), max_entries=3)
    assert "more than 3 entries, the limit" in str(err)


@pytest.mark.parametrize(
    "sizes", [pytest.param([1001], id="one-file"), pytest.param([500, 501], id="in-total")]
)
def test_too_large_unpacked(server: ArtifactServer, target: Path, sizes: list[int]) -> None:
    """More file content than max_unpacked_bytes: refused, naming the limit."""
    body = archive(*(file(f"f{i}", b"0" * size) for i, size in enumerate(sizes)))
    url = server.serve(body)
    fetch_artifact(url, digest(body), target, max_unpacked_bytes=1001)
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, url, digest(body), max_unpacked_bytes=1000)
    assert "more than 1000 bytes unpacked, the limit" in str(err)


def test_a_huge_extended_header_is_refused(server: ArtifactServer, target: Path) -> None:
    """A pax header larger than MAX_HEADER_BYTES is not read into memory: refused."""
    info, data = file("a.txt")
    info.pax_headers = {"comment": "x" * MAX_HEADER_BYTES}
    body = archive((info, data))
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, server.serve(body), digest(body))
    assert f"larger than {MAX_HEADER_BYTES} bytes, the limit" in str(err)


@pytest.mark.parametrize("declare_length", [True, False], ids=["declared", "undeclared"])
def test_too_large_download(server: ArtifactServer, target: Path, declare_length: bool) -> None:  # noqa: FBT001
    """A download above max_bytes stops there, whether or not the server says its length."""
    body = os.urandom(200_000)
    url = server.serve(body, declare_length=declare_length)
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, url, digest(body), max_bytes=len(body) - 1)
    assert f"larger than {len(body) - 1} bytes, the limit" in str(err)


def test_a_declared_length_above_the_limit_is_refused_at_once(
    server: ArtifactServer, target: Path
) -> None:
    """A Content-Length above max_bytes is refused before the body is read."""
    url = server.serve(FLUX_LIKE, length=10_000)
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, url, digest(FLUX_LIKE), max_bytes=9_999)
    assert "larger than 9999 bytes, the limit" in str(err)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>not an artifact</html>", id="not-gzip"),
        pytest.param(gzip.compress(b"not a tar archive " * 100), id="gzip-not-tar"),
        pytest.param(FLUX_LIKE[: len(FLUX_LIKE) // 2], id="truncated-gzip"),
        pytest.param(b"", id="empty"),
    ],
)
def test_not_a_gzip_tar(server: ArtifactServer, target: Path, body: bytes) -> None:
    """Whatever is not a gzip-compressed tar archive is refused, with its digest right."""
    err = refused(target, SourceFailure.ARTIFACT_UNSAFE, server.serve(body), digest(body))
    assert "not a gzip-compressed tar archive" in str(err)


# --- the server failing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "transient"),
    [(500, True), (503, True), (429, True), (404, True), (403, False), (400, False)],
)
def test_http_errors(server: ArtifactServer, target: Path, status: int, transient: bool) -> None:  # noqa: FBT001
    """5xx, 429 and 404 (an artifact source-controller deleted) are transient; others not."""
    url = server.serve(b"error", status=status)
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert err.transient is transient
    assert f"HTTP {status}" in str(err)
    assert url in str(err)
    if status == 404:
        assert "source-controller deletes old artifacts" in str(err)


def test_connection_refused_is_transient(target: Path) -> None:
    """Nothing listening: transient SourceUnavailable."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a.tar.gz"
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert err.transient
    assert url in str(err)


def test_a_silent_server_times_out(target: Path, silent_port: int) -> None:
    """A server that never answers: transient, after the timeout."""
    url = f"http://127.0.0.1:{silent_port}/a.tar.gz"
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE), timeout=0.5)
    assert err.transient
    assert "timed out" in str(err)


def test_a_transfer_cut_short_is_transient(server: ArtifactServer, target: Path) -> None:
    """Fewer bytes than Content-Length: transient, not a digest mismatch."""
    url = server.serve(FLUX_LIKE, length=len(FLUX_LIKE) + 100)
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert err.transient


class TickingClock(FakeClock):
    """A fake clock that moves one second each time it is read."""

    def now(self) -> float:
        """Step, then tell the time."""
        self.step(1.0)
        return super().now()


def test_the_deadline_bounds_the_download(server: ArtifactServer, target: Path) -> None:
    """The timeout holds for the whole download, on the clock, not only per read."""
    body = os.urandom(1024 * 1024)  # 16 reads of 64 KiB, one tick each
    err = refused(
        target,
        SourceFailure.SOURCE_UNAVAILABLE,
        server.serve(body),
        digest(body),
        timeout=8,
        clock=TickingClock(),  # type: ignore[arg-type]
    )
    assert err.transient
    assert "timed out (limit 8s)" in str(err)


def test_the_deadline_bounds_the_unpacking(server: ArtifactServer, target: Path) -> None:
    """A small download that unpacks slowly (4 MiB of zeros: 64 reads) times out too."""
    body = archive(file("zeros", b"\0" * 4 * 1024 * 1024))
    assert len(body) < 64 * 1024  # one read to download it
    url = server.serve(body)
    err = refused(
        target,
        SourceFailure.SOURCE_UNAVAILABLE,
        url,
        digest(body),
        timeout=20,
        clock=TickingClock(),  # type: ignore[arg-type]
    )
    assert "timed out (limit 20s)" in str(err)
    assert server.requests == ["/artifact.tar.gz"]


# --- URLs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        pytest.param("file:///etc/passwd", "is not an http(s) URL", id="file"),
        pytest.param("ftp://127.0.0.1/a.tar.gz", "is not an http(s) URL", id="ftp"),
        pytest.param("http:///a.tar.gz", "is not an http(s) URL", id="no-host"),
        pytest.param("http://127.0.0.1:port/a", "is malformed", id="bad-port"),
        pytest.param("http://127.0.0.1/a\nb", "is malformed", id="control-character"),
    ],
)
def test_urls_other_than_http_are_refused(target: Path, url: str, problem: str) -> None:
    """Only http(s) URLs are fetched: not transient."""
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert problem in str(err)
    assert not err.transient


def test_credentials_in_the_url_are_refused_and_masked(
    server: ArtifactServer, target: Path
) -> None:
    """A URL with user information is refused, and the password shown nowhere."""
    url = server.url("/a.tar.gz").replace("//", "//bot:hunter2-secret@")
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert "holds credentials" in str(err)
    assert "hunter2-secret" not in error_texts(err)
    assert server.requests == []


@pytest.mark.parametrize("location", ["ftp://127.0.0.1/a.tar.gz", "file:///etc/passwd"])
def test_a_redirect_to_another_scheme_is_refused(
    server: ArtifactServer, target: Path, location: str
) -> None:
    """A redirect away from http(s) is refused: not transient."""
    url = server.serve(b"", "/moved", status=302, headers={"Location": location})
    err = refused(target, SourceFailure.SOURCE_UNAVAILABLE, url, digest(FLUX_LIKE))
    assert not err.transient
    assert location in str(err)


# --- unpack on its own --------------------------------------------------------------------------


def test_unpack_checks_before_every_read(tmp_path: Path) -> None:
    """What ``check`` raises ends the unpacking: it is called before each read."""
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if len(calls) > 3:
            raise TimeoutError

    body = archive(file("big", b"\0" * 1024 * 1024))
    with pytest.raises(TimeoutError):
        unpack(io.BytesIO(body), tmp_path, max_unpacked_bytes=2**30, max_entries=10, check=check)
    assert len(calls) == 4


def test_unpack_counts_the_entries(tmp_path: Path) -> None:
    """``unpack`` returns the number of entries, the root's included; refusals are its own."""
    assert unpack(io.BytesIO(FLUX_LIKE), tmp_path, max_unpacked_bytes=2**30, max_entries=10) == 5
    with pytest.raises(UnsafeArchiveError, match="more than 4 entries"):
        unpack(io.BytesIO(FLUX_LIKE), tmp_path / "x", max_unpacked_bytes=2**30, max_entries=4)
