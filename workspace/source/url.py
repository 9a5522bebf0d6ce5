"""Repository URLs: refuse the malformed, move credentials out, mask them wherever shown.

A password embedded in an http(s) URL is moved out of the URL (a lone user name, often a
token, too), so that neither git's argv nor ``.git/config`` holds it: it reaches git like
any other credential (see ``credentials``). Messages and logs pass through ``scrub``:
every secret value and the user information of every URL in them is masked.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from controller.text import plain
from workspace.source.credentials import MASK, GitCredentials
from workspace.source.errors import SourceError, SourceFailure

# scheme://userinfo@ anywhere in a text; userinfo ends at the first "/", "@" or blank.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")
_SHORTEST_SCRUBBED_USERNAME = 8


def redact_url(text: str) -> str:
    """``text`` with the user information of every URL in it masked.

    ``https://user:token@host/r`` and ``https://token@host/r`` both become
    ``https://***@host/r``; text without ``scheme://...@`` is returned unchanged.
    """
    return _USERINFO.sub(rf"\g<scheme>{MASK}@", text)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (plain or URL-encoded) and URL user information masked.

    Longer secrets are masked first, so a secret that contains another is masked whole.
    Terminal codes go first (a git server's ``remote:`` lines may be coloured), so that
    none can split a secret and none reaches a message.
    """
    text = plain(text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK).replace(urllib.parse.quote(secret, ""), MASK)
    return redact_url(text)


def checked_url(url: str) -> str:
    """``url`` unchanged, if git can be given it as an argument.

    Raises:
        ValueError: ``url`` is empty, starts with ``-`` (git would read an option) or holds
            control characters.
    """
    if not url or url.startswith("-") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise ValueError("not a repository URL")
    return url


@dataclass(frozen=True, slots=True, repr=False)
class Login:
    """What one operation authenticates with, and every value to scrub from its messages."""

    credentials: GitCredentials | None
    extra_secrets: tuple[str, ...] = ()

    @property
    def secrets(self) -> list[str]:
        """Every value to mask: the credentials' secrets and ``extra_secrets``."""
        own = self.credentials.secrets() if self.credentials is not None else []
        return [*own, *self.extra_secrets]


def split_userinfo(url: str, credentials: GitCredentials | None) -> tuple[str, Login]:
    """Move user information out of an http(s) URL into credentials (explicit ones win).

    ``user:password@`` becomes that login; a lone ``user@`` (often a token) becomes user name
    ``user`` with an empty password, and is scrubbed from messages like a secret when it is
    long enough to be one (a short name would mask ordinary words). Other URLs are returned
    unchanged, with ``credentials``.

    Raises:
        SourceError: ``SourceUnavailable``, not transient: ``url`` is malformed.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as err:
        msg = f"the repository URL is malformed ({err}): fix spec.projectRepo"
        raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=False) from None
    if parts.scheme not in {"http", "https"} or "@" not in parts.netloc:
        return url, Login(credentials)
    clean = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    username = urllib.parse.unquote(parts.username or "")
    extra = (username,) if len(username) >= _SHORTEST_SCRUBBED_USERNAME else ()
    if credentials is not None and credentials.http_login() is not None:
        return clean, Login(credentials, extra)
    login = {"username": username, "password": urllib.parse.unquote(parts.password or "")}
    return clean, Login(dataclasses.replace(credentials or GitCredentials(), **login), extra)
