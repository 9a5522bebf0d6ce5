"""The failures of fetching a source: what went wrong, and whether a retry may help."""

from __future__ import annotations

import enum


class SourceFailure(enum.StrEnum):
    """Why a source could not be fetched; the reconciler maps it to a condition reason."""

    AUTHENTICATION_FAILED = "AuthenticationFailed"
    REVISION_NOT_FOUND = "RevisionNotFound"
    SOURCE_UNAVAILABLE = "SourceUnavailable"
    ARTIFACT_DIGEST_MISMATCH = "ArtifactDigestMismatch"
    """A downloaded Flux artifact does not have the digest its source reports (not transient)."""
    ARTIFACT_UNSAFE = "ArtifactUnsafe"
    """A Flux artifact was refused (not transient): unsafe entries, too large, too many
    entries, not a gzip tar, or a digest the operator cannot verify."""


class SourceError(Exception):
    """Fetching the source failed.

    ``reason`` names the failure; ``transient`` is True when retrying later may succeed
    without any change (network failures, timeouts, HTTP 5xx/429) and False when it will not
    (credentials refused, unknown branch or commit, missing repository, a URL git refuses,
    a Flux artifact refused or not matching its digest).
    The message is scrubbed of every credential and of URL user information.
    """

    def __init__(self, message: str, *, reason: SourceFailure, transient: bool) -> None:
        """Record the message, reason and whether a retry may succeed."""
        super().__init__(message)
        self.reason = reason
        self.transient = transient


class UnclassifiedError(SourceError):
    """git failed talking to the remote and its message matched no known pattern.

    Transient ``SourceUnavailable`` to the caller; inside the package it also means "maybe
    the server refused a commit by id" or "maybe the clone is broken", worth one more try.
    """


class BrokenRepositoryError(Exception):
    """A local git command failed: the work directory is not a usable clone."""
