"""Whether a ``projectRepo`` is a git remote the operator may fetch.

Role: refuse, before any run, a ``projectRepo`` git would reject, could misuse, or that holds
credentials. Accepted: ``https://``, ``http://``, ``ssh://`` and ``git://`` URLs and git's
scp-like ``[user@]host:path``. Refused: other schemes, ``file://`` and local paths (they
would read the operator's own disk, such as another Stack's checkout), remote helpers
(``ext::sh -c ...`` runs commands), option look-alikes (a leading ``-`` in the URL, host or
user, percent-decoded as git does), user information on http(s) and git URLs and passwords
on ssh URLs, malformed hosts and ports.

Guarantees: a problem never quotes the URL (it may hold credentials).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from reconcile.spec.fields import SPEC
from reconcile.spec.model import SpecError

URL_SCHEME: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
"""``<scheme>://<rest>``: a URL, as opposed to a path or an scp-like remote."""

_REMOTE_HELPER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")
# git's scp-like syntax: [user@]host:path, with the ":" before any "/" (else it is a path).
_SCP_LIKE = re.compile(r"(?:(?P<user>[^@/:]*)@)?(?P<host>\[[^\]/]*\]|[^@/:\[\]]*):(?P<path>.*)")
_PORT = re.compile(r"[0-9]{1,5}")
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")
_GIT_SCHEMES: Final = ("https", "http", "ssh", "git")
_USE_GIT_URL: Final = (
    "use https://host/path, ssh://[user@]host/path, git://host/path or user@host:path"
)


def check_repo_url(repo: str) -> None:
    """Refuse a ``projectRepo`` git would reject, could misuse, or that holds credentials.

    The URL reaches git's command line (no option look-alikes, no remote helpers: "ext::sh
    -c ..." runs commands) and the operator's messages. Problems never quote the URL: it may
    hold credentials.

    Raises:
        SpecError: on ``spec.projectRepo``, saying what to use instead.
    """
    problem: str | None = None
    url = URL_SCHEME.fullmatch(repo)
    if repo.startswith("-") or _CONTROL_OR_SPACE.search(repo):
        problem = f"not a git URL (no spaces, no leading -): {_USE_GIT_URL}"
    elif _REMOTE_HELPER.match(repo):
        problem = "git remote-helper URLs (<transport>::<address>) are refused: use https://"
    elif url is not None:
        problem = _url_problem(url["scheme"], url["rest"])
    else:
        problem = _scp_problem(repo)
    if problem is not None:
        raise SpecError(SPEC / "projectRepo", problem)


def _url_problem(scheme: str, rest: str) -> str | None:
    """What is wrong with ``<scheme>://<rest>`` as a git remote, or None."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, hostport = authority.rpartition("@")
    return (
        _scheme_problem(scheme)
        or (_userinfo_problem(scheme, userinfo) if at else None)
        or _host_problem(scheme, userinfo, hostport)
    )


def _scheme_problem(scheme: str) -> str | None:
    if scheme.lower() == "file":
        return (
            "file:// is refused (it would read the operator's own disk, such as another"
            f" Stack's checkout): serve the repository over git; {_USE_GIT_URL}"
        )
    if scheme.lower() in _GIT_SCHEMES and scheme not in _GIT_SCHEMES:
        return f"git reads URL schemes in lower case only: write {scheme.lower() + '://'!r}"
    if scheme not in _GIT_SCHEMES:
        return f"unsupported scheme {scheme + '://'!r}: {_USE_GIT_URL}"
    return None


def _userinfo_problem(scheme: str, userinfo: str) -> str | None:
    """Credentials never go in a URL; only ssh:// takes a user name (not a secret)."""
    if scheme in {"http", "https"}:
        return (
            "credentials in the URL are refused (they would show in messages, Events and"
            " git's configuration): remove user@ from projectRepo and set spec.gitAuth"
            " (accessToken or basicAuth from a Secret)"
        )
    if scheme == "git":
        return "git:// takes no user name: remove user@ from projectRepo"
    if not userinfo:
        return "empty user name before '@': name the user (ssh://git@host/path) or remove the @"
    if ":" in userinfo:
        return (
            "a password in an ssh:// URL is refused: remove it and set"
            " spec.gitAuth.sshAuth (a private key from a Secret)"
        )
    return None


def _host_problem(scheme: str, user: str, hostport: str) -> str | None:
    """What is wrong with the user and ``host[:port]`` of a git URL, or None."""
    host, port = hostport, ""
    if hostport.startswith("["):
        host, bracket, after = hostport.partition("]")
        host, port = host + bracket, after.removeprefix(":")
        if not bracket or (after and not after.startswith(":")):
            return f"malformed IPv6 host (use [address] or [address]:port): {_USE_GIT_URL}"
    elif ":" in hostport:
        host, _, port = hostport.partition(":")
    if not host.strip("[]"):
        return f"the URL has no host: {_USE_GIT_URL}"
    if _is_option(host) or _is_option(user):
        return "a host or user name starting with - is refused (git would take it for an option)"
    if port and (not _PORT.fullmatch(port) or int(port) > 65535):
        return f"the port of a {scheme}:// URL must be a number from 0 to 65535"
    return None


def _is_option(name: str) -> bool:
    """True if git could pass ``name`` (percent-decoded, as git does) to ssh as an option."""
    return urllib.parse.unquote(name).startswith("-")


def _scp_problem(repo: str) -> str | None:
    """What is wrong with a remote without ``://``: it must be scp-like ``user@host:path``."""
    scp = _SCP_LIKE.fullmatch(repo)
    if scp is None:
        return (
            "local paths are refused (they would read the operator's own disk, such as"
            f" another Stack's checkout): {_USE_GIT_URL}"
        )
    if scp["host"].lower() in {*_GIT_SCHEMES, "file"}:
        return f"{scp['host'] + ':'!r} is not a scheme without '//': {_USE_GIT_URL}"
    if scp["user"] == "":
        return "empty user name before '@': name the user (git@host:path) or remove the @"
    if not scp["path"]:
        return "user@host:path needs a repository path after the ':'"
    return _host_problem("ssh", scp["user"] or "", scp["host"])
