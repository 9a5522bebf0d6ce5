"""Running git for one operation: one environment, one deadline, classified failures.

Every git call is an argument list (never a shell), run by ``workspace.process`` under the
operation's deadline; when it runs out git's process group and every descendant (its remote
helper, ssh) are killed and the call fails as a transient ``SourceUnavailable``. A failed
command that talks to the remote raises a ``SourceError`` classified from git's stderr
(under ``LC_ALL=C``); a failed local command means the clone is broken. Every message and
log line is scrubbed (``url.scrub``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

import structlog

from controller.clock import Clock
from controller.text import truncate
from workspace import process
from workspace.process import REAL_CLOCK, Completed
from workspace.source.errors import (
    BrokenRepositoryError,
    SourceError,
    SourceFailure,
    UnclassifiedError,
)
from workspace.source.url import Login, scrub

log = structlog.get_logger(__name__)

SUMMARY_LINES = 4
"""How many of git's last stderr lines a failure message quotes."""

SUMMARY_BYTES = 600
"""The most of git's stderr a failure message quotes (its end: git's last word)."""

# Ordered: the first match wins. Patterns are git's, curl's and ssh's messages under LC_ALL=C.
_CLASSES: tuple[tuple[re.Pattern[str], SourceFailure, bool], ...] = (
    (
        re.compile(
            r"repository not exported|no such repository|repository '[^']*' not found"
            r"|repository not found"
            r"|does not appear to be a git repository|returned error: 404"
            r"|transport '[^']*' not allowed|unable to find remote helper"
            # URLs git or ssh refuse outright: an option-like host or user, a malformed URL
            r"|strange (hostname|username|pathname|port)|hostname contains invalid characters"
            r"|url using bad/illegal format|unsupported protocol|protocol \S+ not supported"
            r"|port number was not a decimal number|no host part in the url"
            r"|ssl certificate problem|certificate verify failed",  # a CA does not fix itself
            re.IGNORECASE,
        ),
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    ),
    (
        re.compile(
            r"authentication failed|could not read (username|password)|permission denied \("
            r"|access denied|returned error: 40[13]|host key verification failed"
            r"|passphrase|load key|invalid username or password",
            re.IGNORECASE,
        ),
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    ),
    (
        re.compile(
            r"couldn't find remote ref|not our ref|unadvertised object|no such ref",
            re.IGNORECASE,
        ),
        SourceFailure.REVISION_NOT_FOUND,
        False,
    ),
    (
        re.compile(
            r"could not resolve|connection refused|connection timed out|connection reset"
            r"|timed out|too slow|failed to connect|unable to connect|early eof"
            r"|hung up unexpectedly|rpc failed|returned error: (5\d\d|429)|temporary failure"
            r"|network is unreachable|no route to host|ssh: connect to host|ssl|tls|gnutls"
            r"|broken pipe",
            re.IGNORECASE,
        ),
        SourceFailure.SOURCE_UNAVAILABLE,
        True,
    ),
)


def classify(stderr: str) -> tuple[SourceFailure, bool] | None:
    """(reason, transient) for git's stderr, or None when no known pattern matches."""
    for pattern, reason, transient in _CLASSES:
        if pattern.search(stderr):
            return reason, transient
    return None


def summary(stderr: str) -> str:
    """The last ``SUMMARY_LINES`` lines of git's stderr on one line, its last ``SUMMARY_BYTES``.

    The end is kept, not the start: git's last line says what finally failed. Characters are
    never split (``controller.text.truncate`` cuts the reversed text).
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    joined = "; ".join(lines[-SUMMARY_LINES:])
    return truncate(joined[::-1], SUMMARY_BYTES)[::-1] or "no output"


class Git:
    """Runs the git commands of one operation: one environment, deadline and scrubber.

    ``url`` is the remote (credentials already moved out of it); ``login`` names what to
    scrub; ``timeout`` (seconds) bounds every command of the operation together.
    """

    def __init__(
        self, env: dict[str, str], url: str, login: Login, timeout: float, clock: Clock = REAL_CLOCK
    ) -> None:
        """Start the operation's deadline now, on ``clock``."""
        self._env = env
        self.url = url
        self._secrets = login.secrets
        self._clock = clock
        self._deadline = clock.now() + timeout
        self._timeout = timeout

    def run(self, args: Sequence[str], cwd: Path) -> Completed:
        """Run ``git <args>`` in ``cwd``; raise a transient SourceError when time runs out."""
        remaining = self._deadline - self._clock.now()
        if remaining <= 0:
            raise self._timed_out(args)
        argv = ["git", *args]
        # git never looks above cwd for a repository: a broken work_dir is not "inside" a
        # repository that happens to contain it.
        env = {**self._env, "GIT_CEILING_DIRECTORIES": str(cwd.resolve().parent)}
        log.debug("Running git", argv=self.scrub(shlex.join(argv)), cwd=str(cwd))
        # Its own process group: at the deadline git, its remote helper and ssh all die.
        command = process.Command(argv, cwd=cwd, env=env, timeout=remaining)
        result = process.run(command, clock=self._clock)
        if result.timed_out:
            raise self._timed_out(args)
        return result

    def local(self, args: Sequence[str], cwd: Path) -> str:
        """Run a command that does not touch the network; return its stdout.

        Raises:
            BrokenRepositoryError: it failed, so ``cwd`` is not a usable clone.
            SourceError: the operation's time ran out.
        """
        proc = self.run(args, cwd)
        if proc.code != 0:
            msg = f"git {args[0]} failed: {summary(self.scrub(proc.stderr))}"
            raise BrokenRepositoryError(msg)
        return proc.stdout

    def remote(self, args: Sequence[str], cwd: Path) -> str:
        """Run a command that talks to the remote; return its stdout.

        Raises:
            SourceError: it failed, classified from git's stderr; ``UnclassifiedError``
                (transient ``SourceUnavailable``) when no known pattern matches.
        """
        proc = self.run(args, cwd)
        if proc.code == 0:
            return proc.stdout
        stderr = self.scrub(proc.stderr)
        msg = f"git {args[0]} {self.scrub(self.url)} failed: {summary(stderr)}"
        known = classify(stderr)
        if known is None:
            raise UnclassifiedError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
        raise SourceError(msg, reason=known[0], transient=known[1])

    def scrub(self, text: str) -> str:
        """``text`` with this operation's secrets and every URL's user information masked."""
        return scrub(text, self._secrets)

    def _timed_out(self, args: Sequence[str]) -> SourceError:
        msg = f"git {args[0]} {self.scrub(self.url)} timed out (limit {self._timeout:g}s)"
        return SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True)
