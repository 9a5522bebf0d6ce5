"""The source side of the reconciler: git branches and commits, and Flux artifacts.

``resolve_revision`` asks the remote which commit a branch points at (``git ls-remote``);
``checkout`` makes a directory a working tree at exactly one commit, reusing the clone that
is already there; ``program_dir`` finds ``spec.repoDir`` inside a checkout. The first two run
the real ``git`` CLI. ``fetch_artifact`` (for ``spec.fluxSource``) downloads the artifact a
Flux source reports (a ``.tar.gz`` served by source-controller), verifies its digest and
unpacks it safely, with the standard library only. Code outside this package imports only
what is exported here.

Modules, one job each: ``errors`` (the failures), ``credentials`` (credentials and the
environment git runs in), ``url`` (URL checks, credentials out of URLs, redaction), ``git``
(running git under a deadline, classifying its failures), ``fetch`` (resolve and checkout),
``program`` (``spec.repoDir``), ``artifact`` (download and verify a Flux artifact, swap it
in), ``unpack`` (unpack a gzip tar, refusing unsafe entries and oversized archives).

Guarantees:
- Every git call is an argument list (never a shell) with a timeout (by default
  ``LS_REMOTE_TIMEOUT_SECONDS`` for ``resolve_revision``, ``CHECKOUT_TIMEOUT_SECONDS`` for
  ``checkout``); when it expires the whole process group (git, its remote helper, ssh) is
  killed. A stalled HTTP transfer ends sooner (``STALL_TIMEOUT_SECONDS``), an SSH connection
  that does not open or goes silent too (``SSH_CONNECT_TIMEOUT_SECONDS``, keep-alives).
- git sees no system or global configuration, a private ``HOME`` (a fresh 0700 temp dir,
  removed when the call returns), no terminal (``GIT_TERMINAL_PROMPT=0``), ``LC_ALL=C`` (so
  that its messages can be classified), only a whitelisted part of the operator's
  environment (``INHERITED_ENV``), and only the transports in ``ALLOWED_PROTOCOLS`` (no
  ``file://``, which would let one Stack clone another Stack's work directory).
- Credentials are never on a command line (argv is world-readable in /proc) and never in an
  exception message or log line. HTTP credentials reach git through ``GIT_ASKPASS``, a
  script that prints them from environment variables (``/proc/<pid>/environ`` is readable
  only by the same user); an SSH key is a 0600 file in the private ``HOME`` used through
  ``GIT_SSH_COMMAND``, its passphrase is handed over by an ``SSH_ASKPASS`` script. A password
  embedded in an http(s) URL is moved out of the URL the same way (a lone user name, often a
  token, too), so neither git's argv nor ``.git/config`` holds it. Messages and logs are
  scrubbed of every secret value, and every URL in them has its user information masked
  (``redact_url``), git's own stderr included.
- Failures raise ``SourceError`` with a ``reason`` and a ``transient`` flag, classified from
  git's exit status and stderr: a URL git refuses outright (a blocked host name, a transport
  it does not allow, a malformed URL) is not transient; network failures, timeouts and HTTP
  5xx/429 are.
- ``checkout`` never leaves a half-written ``work_dir`` that a later call could take for a
  good clone: a first clone is built in a sibling staging directory and renamed into place;
  an existing clone is updated with git's own atomic fetch, and a clone that git cannot use
  is replaced.
- ``fetch_artifact`` unpacks nothing before the digest matches (sha256, sha384 or sha512;
  others are refused), and never leaves a half-written target: it unpacks into a sibling
  staging directory renamed into place. Only files, directories and links that stay inside
  land, with modes reduced to 0644/0755; the download, the unpacked size and the entries are
  bounded (``MAX_ARTIFACT_BYTES``, ``MAX_UNPACKED_BYTES``, ``MAX_ARTIFACT_ENTRIES``), and so
  is the time (``ARTIFACT_TIMEOUT_SECONDS``). Only http(s) is fetched, redirects included.

Left to others: when to poll (the reconciler), Git LFS and submodules (not fetched), and
serialising calls for one ``work_dir`` or target (one worker per Stack key does that).
"""

from __future__ import annotations

from workspace.source.artifact import (
    ARTIFACT_TIMEOUT_SECONDS,
    MAX_ARTIFACT_BYTES,
    MAX_ARTIFACT_ENTRIES,
    MAX_UNPACKED_BYTES,
    fetch_artifact,
    parse_digest,
)
from workspace.source.credentials import GitCredentials, git_environment
from workspace.source.errors import SourceError, SourceFailure
from workspace.source.fetch import checkout, resolve_revision
from workspace.source.inline import write_project
from workspace.source.program import ProgramDirError, program_dir
from workspace.source.url import redact_url

__all__ = [
    "ARTIFACT_TIMEOUT_SECONDS",
    "MAX_ARTIFACT_BYTES",
    "MAX_ARTIFACT_ENTRIES",
    "MAX_UNPACKED_BYTES",
    "GitCredentials",
    "ProgramDirError",
    "SourceError",
    "SourceFailure",
    "checkout",
    "fetch_artifact",
    "git_environment",
    "parse_digest",
    "program_dir",
    "redact_url",
    "resolve_revision",
    "write_project",
]
