"""workspace.source.url: credentials moved out of URLs, and masked wherever shown."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from testbed.git_http import Account, GitHttpServer
from testbed.git_server import Checkout, git
from tests.workspace.source.helpers import OPERATIONS, Repo, error_texts, operate
from workspace.source import (
    GitCredentials,
    SourceError,
    SourceFailure,
    checkout,
    redact_url,
    resolve_revision,
)
from workspace.source.url import checked_url, scrub, split_userinfo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "fatal: unable to access 'https://ghp_tok@github.com/o/r/': 403",
            "fatal: unable to access 'https://***@github.com/o/r/': 403",
            id="token-as-user",
        ),
        pytest.param(
            "git fetch http://bot:hunter2@127.0.0.1:8080/r.git failed",
            "git fetch http://***@127.0.0.1:8080/r.git failed",
            id="user-and-password",
        ),
        pytest.param(
            "from ssh://git@host/r and https://a:b@h/x",
            "from ssh://***@host/r and https://***@h/x",
            id="two-urls",
        ),
        pytest.param(
            "https://host/path@v1 git@host:r", "https://host/path@v1 git@host:r", id="no-userinfo"
        ),
        pytest.param("https://h/r?u=a@b", "https://h/r?u=a@b", id="at-in-query"),
        pytest.param("nothing here", "nothing here", id="no-url"),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    """redact_url masks the user information of every URL, and nothing else."""
    assert redact_url(text) == expected


def test_scrub_masks_plain_and_url_encoded_secrets_longest_first() -> None:
    """Each secret goes, as typed and URL-encoded; one containing another goes whole."""
    text = "p@ss/word and p%40ss%2Fword and p@ss/word-long, http://u:x@h/r"
    assert scrub(text, ["p@ss/word", "p@ss/word-long"]) == "*** and *** and ***, http://***@h/r"


def test_scrub_drops_a_git_servers_terminal_codes_even_inside_a_secret() -> None:
    """``remote:`` lines may be coloured; a code in the middle must not hide a secret."""
    text = "remote: \x1b[31mdenied\x1b[0m for tok\x1b[1men-value"
    assert scrub(text, ["token-value"]) == "remote: denied for ***"


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("", id="empty"),
        pytest.param("--upload-pack=x", id="option"),
        pytest.param("https://h/r\n", id="newline"),
        pytest.param("https://h/\x7fr", id="delete"),
    ],
)
def test_checked_url_refuses_what_git_must_not_be_given(url: str) -> None:
    """An empty URL, an option-like one and control characters raise ValueError."""
    with pytest.raises(ValueError, match="not a repository URL"):
        checked_url(url)


def test_split_userinfo_keeps_explicit_credentials_and_scrubs_a_long_user_name() -> None:
    """Explicit HTTP credentials win over the URL's; a token-long user name is still masked."""
    explicit = GitCredentials(token=secrets.token_hex(8))
    url, login = split_userinfo("https://ghp_0123456789@h/r.git", explicit)
    assert url == "https://h/r.git"
    assert login.credentials is explicit
    assert "ghp_0123456789" in login.secrets
    short_url, short = split_userinfo("https://git@h/r.git", None)
    assert short_url == "https://h/r.git"
    assert short.credentials == GitCredentials(username="git", password="")
    assert "git" not in short.secrets  # a short name would mask ordinary words


def test_password_in_the_url_is_moved_out_of_it(
    http_repo: Repo, http_account: Account, tmp_path: Path
) -> None:
    """user:password@ in an http URL authenticates, and the clone's config has no password."""
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    with_password = url.replace("://", f"://{http_account.username}:{http_account.password}@")
    work = tmp_path / "work"

    assert resolve_revision(with_password, "main", None) == tip
    assert checkout(with_password, work, commit=tip) == tip

    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert http_account.password not in (work / ".git" / "config").read_text()


def test_a_password_in_the_url_is_scrubbed_from_errors(
    http_repo: Repo, http_account: Account
) -> None:
    """A wrong password embedded in the URL appears in no exception text."""
    url, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    secret = f"url-password-{secrets.token_hex(8)}"
    with pytest.raises(SourceError) as caught:
        resolve_revision(url.replace("://", f"://{http_account.username}:{secret}@"), "main", None)
    assert caught.value.reason == SourceFailure.AUTHENTICATION_FAILED
    assert secret not in error_texts(caught.value)


@pytest.fixture
def token_user_server(tmp_path: Path) -> Iterator[tuple[GitHttpServer, str]]:
    """A server that takes a token as the user name with an empty password (as GitHub does)."""
    token = f"ghp_{secrets.token_hex(16)}"
    server = GitHttpServer(tmp_path / "token-server", [Account(token, "")])
    server.start()
    try:
        yield server, token
    finally:
        server.stop()


@pytest.mark.git
def test_a_token_as_url_user_name_stays_out_of_argv_and_config(
    token_user_server: tuple[GitHttpServer, str], tmp_path: Path, git_argv: list[list[str]]
) -> None:
    """https://<token>@host/r authenticates, but the token is in no argv and no .git/config."""
    server, token = token_user_server
    url = server.create_repo("infra")
    tip = Checkout(server.push_url("infra"), tmp_path / "upstream").commit({"a.txt": "1"})
    with_token = url.replace("://", f"://{token}@")
    work = tmp_path / "work"
    git_argv.clear()

    assert resolve_revision(with_token, "main", None) == tip
    assert checkout(with_token, work, commit=tip) == tip

    assert git_argv  # the recorder saw git run
    assert [argv for argv in git_argv if any(token in arg for arg in argv)] == []
    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert token not in (work / ".git" / "config").read_text()


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_refused_token_as_url_user_name_is_not_shown(
    http_repo: Repo, tmp_path: Path, operation: str
) -> None:
    """A token the server refuses appears in no exception text and no log line."""
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    token = f"ghp_{secrets.token_hex(16)}"
    with capture_logs() as logs, pytest.raises(SourceError) as caught:
        operate(operation, url.replace("://", f"://{token}@"), tmp_path / "work", commit=tip)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    )
    assert token not in error_texts(caught.value)
    assert token not in repr(logs)
