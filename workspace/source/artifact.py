"""Flux artifacts: download one from source-controller, verify its digest, unpack it safely.

A Flux source (GitRepository, OCIRepository, Bucket) reports its content in
``status.artifact``: ``url`` (a ``.tar.gz`` source-controller serves over http(s), without
credentials), ``revision`` and ``digest`` (``<algorithm>:<hex>`` of that file).
``fetch_artifact`` streams the file into a temporary file beside the target, hashing it as
it comes; refuses it, before unpacking anything, if its digest differs; then unpacks it
(``unpack``) into a staging directory beside the target and renames that into place. A
failure leaves the old target as it was, and even a crash never leaves a half-written one
(between the two renames that swap it there is no target at all).
Serialising calls for one target is the caller's job (one worker per Stack key does it).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import urllib.response
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Final

from controller.clock import Clock, RealClock
from workspace.source.errors import SourceError, SourceFailure
from workspace.source.fetch import _remove, _remove_leftovers, _staging_prefix, _swap_in
from workspace.source.unpack import UnsafeArchiveError, unpack
from workspace.source.url import checked_url, redact_url

ARTIFACT_TIMEOUT_SECONDS: Final = 120.0
"""Default limit of ``fetch_artifact``: the download and the unpacking together.

source-controller serves artifacts inside the cluster, where even ``MAX_ARTIFACT_BYTES``
takes seconds; a server that stalls is given up on (transient) after 120 s.
"""

MAX_ARTIFACT_BYTES: Final = 256 * 1024 * 1024
"""Default limit of the downloaded (compressed) artifact: 256 MiB; larger is refused."""

MAX_UNPACKED_BYTES: Final = 1024 * 1024 * 1024
"""Default limit of the artifact's file content once unpacked: 1 GiB; more is refused.

A Pulumi program's sources are megabytes; the limit stops a decompression bomb.
"""

MAX_ARTIFACT_ENTRIES: Final = 100_000
"""Default limit of the artifact's entries (files, directories, links): more is refused."""

_DIGEST_SIZES: Final = {"sha256": 32, "sha384": 48, "sha512": 64}  # algorithm -> bytes
_CHUNK: Final = 64 * 1024
_TRANSIENT_STATUS: Final = frozenset({404, 408, 429})  # and every 5xx
_SMALLER: Final = "make the Flux source smaller (its spec.ignore excludes files)"


def parse_digest(digest: str) -> tuple[str, str]:
    """Split a Flux artifact digest ``<algorithm>:<hex>`` into (algorithm, lowercase hex).

    The algorithm is sha256 (Flux's default), sha384 or sha512, and the hex is as long as
    that algorithm's digest.

    Raises:
        ValueError: ``digest`` is malformed, or names another algorithm (``blake3``, ``sha1``).
    """
    algorithm, colon, hexdigits = digest.partition(":")
    size = _DIGEST_SIZES.get(algorithm)
    if not colon or not re.fullmatch(r"[a-z0-9][a-z0-9.+_-]*", algorithm):
        msg = f"not a digest <algorithm>:<hex>: {digest[:80]!r}"
        raise ValueError(msg)
    if size is None:
        supported = ", ".join(_DIGEST_SIZES)
        msg = f"digest algorithm {algorithm!r} is not supported (supported: {supported})"
        raise ValueError(msg)
    if not re.fullmatch(rf"[0-9a-fA-F]{{{2 * size}}}", hexdigits):
        msg = f"not a {algorithm} digest ({2 * size} hex digits): {digest[:160]!r}"
        raise ValueError(msg)
    return algorithm, hexdigits.lower()


def fetch_artifact(  # noqa: PLR0913 - the limits are keyword-only, each with its default
    url: str,
    digest: str,
    target: Path,
    *,
    timeout: float = ARTIFACT_TIMEOUT_SECONDS,
    max_bytes: int = MAX_ARTIFACT_BYTES,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    max_entries: int = MAX_ARTIFACT_ENTRIES,
    clock: Clock | None = None,
) -> None:
    """Make ``target`` a directory holding exactly the artifact at ``url``, once verified.

    ``url`` is an http(s) URL without credentials; redirects are followed to http(s) only.
    ``digest`` is ``status.artifact.digest`` (see ``parse_digest``): the downloaded file
    must have it, or nothing is unpacked. The archive is unpacked safely (see ``unpack``)
    into a staging directory beside ``target`` that then replaces ``target`` (whatever it
    was) in one rename; on any failure ``target`` is left as it was. ``timeout`` bounds
    the whole call on ``clock`` (a stalled read gives up after ``timeout`` at the latest);
    ``max_bytes`` bounds the download, ``max_unpacked_bytes`` and ``max_entries`` the
    archive's content.

    Raises:
        SourceError: ``SourceUnavailable``, transient: the server cannot be reached, times
            out, breaks the transfer off, or answers HTTP 5xx, 429, 408 or 404 (source-
            controller deletes old artifacts; the Flux source soon reports a new one).
            ``SourceUnavailable``, not transient: the URL is not http(s), holds
            credentials or is malformed, a redirect leads to another scheme, the server's
            certificate is not trusted, or another HTTP error. ``ArtifactDigestMismatch``,
            not transient: the file's digest differs (both digests are in the message).
            ``ArtifactUnsafe``, not transient: ``digest`` cannot be verified (malformed,
            or an algorithm not supported), the download exceeds ``max_bytes``, or the
            archive is refused (not a gzip tar, an unsafe entry, a limit exceeded).
            Messages name the URL with its user information masked, and the fix.
        OSError: the local file system failed (disk full, permissions).
    """
    shown = redact_url(url)
    try:
        algorithm, expected = parse_digest(digest)
    except ValueError as err:
        msg = (
            f"cannot verify the artifact {shown}: {err}; run source-controller with"
            " --artifact-digest-algo=sha256 (or sha384, sha512)"
        )
        raise SourceError(msg, reason=SourceFailure.ARTIFACT_UNSAFE, transient=False) from None
    _check_url(url, shown)
    clock = clock or RealClock()
    deadline = _Deadline(clock, clock.now() + timeout, timeout, shown)
    target = target.absolute()
    target = target.parent.resolve() / target.name  # a symlink at target is replaced, not followed
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target)
    fd, name = tempfile.mkstemp(prefix=f"{_staging_prefix(target)}download-", dir=target.parent)
    try:
        with os.fdopen(fd, "w+b") as archive:
            actual = _download(url, shown, archive, algorithm, max_bytes, deadline)
            if actual != expected:
                msg = (
                    f"artifact {shown} does not match its digest: expected"
                    f" {algorithm}:{expected} (status.artifact.digest), got {algorithm}:{actual};"
                    " nothing was unpacked. The artifact was replaced or corrupted on the way:"
                    " reconcile the Flux source so that it reports its current artifact"
                )
                raise SourceError(
                    msg, reason=SourceFailure.ARTIFACT_DIGEST_MISMATCH, transient=False
                )
            archive.seek(0)
            _unpack_into(archive, target, shown, max_unpacked_bytes, max_entries, deadline)
    finally:
        Path(name).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class _Deadline:
    clock: Clock
    at: float
    timeout: float
    shown: str

    def check(self) -> None:
        """Raise a transient ``SourceUnavailable`` once the deadline has passed."""
        if self.clock.now() >= self.at:
            msg = f"fetching the artifact {self.shown} timed out (limit {self.timeout:g}s)"
            raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)


def _check_url(url: str, shown: str) -> None:
    try:
        parts = urllib.parse.urlsplit(checked_url(url))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        problem = f"is malformed ({err})"
    else:
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            problem = "is not an http(s) URL"
        elif "@" in parts.netloc:
            problem = "holds credentials, which source-controller never needs"
        else:
            return
    msg = f"the artifact URL {shown} {problem}: check status.artifact.url of the Flux source"
    raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False)


class _HttpRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) URLs only (urllib's own would follow ftp:// too)."""

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> urllib.response.addinfourl | None:
        location = headers.get("location") or headers.get("uri")
        newurl = urllib.parse.urljoin(req.full_url, location or "")
        if location is not None and urllib.parse.urlsplit(newurl).scheme not in {"http", "https"}:
            fp.close()
            text = (
                f"the artifact {redact_url(req.full_url)} redirects to {redact_url(newurl)},"
                " which is not http(s): check status.artifact.url of the Flux source"
            )
            raise SourceError(text, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False)
        response: urllib.response.addinfourl | None = super().http_error_302(
            req, fp, code, msg, headers
        )
        return response

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _opener() -> urllib.request.OpenerDirector:
    """http(s) only: no file://, ftp:// or data: handler; proxies from the environment."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        _HttpRedirects(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.UnknownHandler(),
    ):
        opener.add_handler(handler)
    return opener


def _download(  # noqa: PLR0913 - one step of fetch_artifact, with its inputs
    url: str, shown: str, out: BinaryIO, algorithm: str, max_bytes: int, deadline: _Deadline
) -> str:
    """Stream ``url`` into ``out``; return the hex digest of what was received."""
    hasher = hashlib.new(algorithm)
    received = 0
    try:
        response: http.client.HTTPResponse = _opener().open(url, timeout=deadline.timeout)
    except urllib.error.HTTPError as err:
        err.close()
        raise _http_failure(shown, err.code) from err
    except (OSError, http.client.HTTPException) as err:  # URLError, timeouts, resets
        raise _unreachable(shown, err) from err
    with response:
        declared = _content_length(response)
        if declared is not None and declared > max_bytes:
            raise _too_large(shown, max_bytes)
        while True:
            deadline.check()
            try:
                chunk = response.read(_CHUNK)
            except (OSError, http.client.HTTPException) as err:
                raise _unreachable(shown, err) from err
            if not chunk:
                break
            received += len(chunk)
            if received > max_bytes:
                raise _too_large(shown, max_bytes)
            hasher.update(chunk)
            out.write(chunk)
    if declared is not None and received != declared:
        msg = f"the download of {shown} broke off after {received} of {declared} bytes"
        raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
    return hasher.hexdigest()


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = response.headers.get("Content-Length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _unpack_into(  # noqa: PLR0913 - one step of fetch_artifact, with its inputs
    archive: BinaryIO,
    target: Path,
    shown: str,
    max_unpacked_bytes: int,
    max_entries: int,
    deadline: _Deadline,
) -> None:
    """Unpack into a staging directory beside ``target``, then swap it in."""
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(target), dir=target.parent))
    try:
        try:
            unpack(
                archive,
                staging,
                max_unpacked_bytes=max_unpacked_bytes,
                max_entries=max_entries,
                check=deadline.check,
            )
        except UnsafeArchiveError as err:
            msg = f"the artifact {shown} is refused: {err}; {_SMALLER}, or check what serves it"
            raise SourceError(msg, reason=SourceFailure.ARTIFACT_UNSAFE, transient=False) from err
        _swap_in(staging, target)
    except BaseException:
        _remove(staging)
        raise


def _http_failure(shown: str, code: int) -> SourceError:
    if code == 404:
        msg = (
            f"the artifact {shown} is gone (HTTP 404): source-controller deletes old artifacts;"
            " the Flux source reports its new one soon"
        )
        return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
    if code in _TRANSIENT_STATUS or code >= 500:
        msg = f"the artifact {shown} is unavailable (HTTP {code}); retrying later"
        return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
    msg = (
        f"the artifact {shown} was refused (HTTP {code}): check status.artifact.url of the"
        " Flux source, and that source-controller serves it to the operator"
    )
    return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False)


def _unreachable(shown: str, err: BaseException) -> SourceError:
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, ssl.SSLCertVerificationError):
        msg = (
            f"the certificate of {shown} is not trusted ({reason.verify_message}): serve the"
            " artifact with a certificate the operator trusts"
        )
        return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False)
    what = "timed out" if isinstance(reason, TimeoutError) else "failed"
    detail = redact_url(str(reason) or type(reason).__name__)
    msg = f"downloading the artifact {shown} {what}: {detail}"
    return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)


def _too_large(shown: str, max_bytes: int) -> SourceError:
    msg = f"the artifact {shown} is larger than {max_bytes} bytes, the limit; {_SMALLER}"
    return SourceError(msg, reason=SourceFailure.ARTIFACT_UNSAFE, transient=False)
