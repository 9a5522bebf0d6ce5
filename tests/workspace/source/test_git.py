"""workspace.source.git: git under a deadline, its failures classified (real servers)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from testbed.git_http import GitHttpServer
from testbed.process import free_port
from tests.workspace.source.helpers import OPERATIONS, SSH, Repo, operate
from workspace.source import GitCredentials, SourceError, SourceFailure, resolve_revision
from workspace.source import credentials as source_credentials
from workspace.source.git import SUMMARY_BYTES, classify, summary

pytestmark = pytest.mark.git

# --- classification and summaries of git's stderr --------------------------------------------


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        pytest.param(
            "fatal: remote error: access denied or repository not exported: /r.git",
            (SourceFailure.SOURCE_UNAVAILABLE, False),
            id="not-exported-before-access-denied",
        ),
        pytest.param(
            "fatal: Authentication failed for 'http://h/r.git/'",
            (SourceFailure.AUTHENTICATION_FAILED, False),
            id="authentication",
        ),
        pytest.param(
            "fatal: couldn't find remote ref refs/heads/x",
            (SourceFailure.REVISION_NOT_FOUND, False),
            id="remote-ref",
        ),
        pytest.param(
            "fatal: unable to access 'http://h/': The requested URL returned error: 503",
            (SourceFailure.SOURCE_UNAVAILABLE, True),
            id="http-503",
        ),
        pytest.param("fatal: something new", None, id="unknown"),
    ],
)
def test_classify_takes_the_first_matching_class(
    stderr: str, expected: tuple[SourceFailure, bool] | None
) -> None:
    """Classes are tried in order: a missing repository wins over a word of another class."""
    assert classify(stderr) == expected


def test_summary_keeps_the_last_lines_and_the_end_of_long_text() -> None:
    """The last four non-blank lines, joined; too long, its end is kept, no character split."""
    assert summary("one\n\ntwo\nthree\nfour\nfive\n") == "two; three; four; five"
    assert summary("  \n") == "no output"
    long = "é" * 1000 + " fatal: the end"
    cut = summary(long)
    assert cut.endswith(" fatal: the end")
    assert len(cut.encode()) <= SUMMARY_BYTES
    assert len(cut.encode()) >= SUMMARY_BYTES - 1  # at most one split character dropped


# --- availability ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "server", [pytest.param("git", id="git-daemon"), pytest.param("http", id="http")]
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_missing_repository_is_not_transient(
    server: str,
    operation: str,
    request: pytest.FixtureRequest,
    basic_auth: GitCredentials,
    tmp_path: Path,
) -> None:
    """A repository the server does not have is SourceUnavailable, not transient."""
    fixture = "git_server" if server == "git" else "git_http"
    url = request.getfixturevalue(fixture).url("no-such-repo")
    with pytest.raises(SourceError) as caught:
        operate(operation, url, tmp_path / "work", basic_auth)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    )


@pytest.mark.parametrize(
    "scheme",
    [
        pytest.param("git", id="git"),
        pytest.param("http", id="http"),
        pytest.param(
            "ssh",
            id="ssh",
            marks=pytest.mark.skipif(SSH is None, reason="no OpenSSH client installed"),
        ),
    ],
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_an_unreachable_server_is_transient(scheme: str, operation: str, tmp_path: Path) -> None:
    """A closed port is SourceUnavailable and transient, for every transport."""
    url = f"{scheme}://127.0.0.1:{free_port()}/repo.git"
    credentials = GitCredentials(ssh_private_key="not a key", token=secrets.token_hex(4))
    with pytest.raises(SourceError) as caught:
        operate(operation, url, tmp_path / "work", credentials)
    assert (caught.value.reason, caught.value.transient) == (SourceFailure.SOURCE_UNAVAILABLE, True)


@pytest.mark.parametrize("status", [pytest.param(s, id=str(s)) for s in (500, 502, 503, 504, 429)])
def test_server_errors_are_transient(
    git_http: GitHttpServer,
    http_repo: Repo,
    repo_name: str,
    basic_auth: GitCredentials,
    status: int,
) -> None:
    """HTTP 5xx and 429 answers are SourceUnavailable and transient."""
    url, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    git_http.fail(repo_name, status)
    try:
        with pytest.raises(SourceError) as caught:
            resolve_revision(url, "main", basic_auth)
    finally:
        git_http.fail(repo_name, None)
    assert (caught.value.reason, caught.value.transient) == (SourceFailure.SOURCE_UNAVAILABLE, True)


@pytest.mark.parametrize("scheme", [pytest.param("git", id="git"), pytest.param("http", id="http")])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_silent_server_times_out_as_transient(
    scheme: str, operation: str, silent_port: int, tmp_path: Path
) -> None:
    """A server that never answers is cut off at the timeout: transient SourceUnavailable."""
    url = f"{scheme}://127.0.0.1:{silent_port}/repo.git"
    with pytest.raises(SourceError, match="timed out") as caught:
        operate(operation, url, tmp_path / "work", timeout=1)
    assert (caught.value.reason, caught.value.transient) == (SourceFailure.SOURCE_UNAVAILABLE, True)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("ssh://-oProxyCommand=touch%20{marker}/r.git", id="ssh-option-host"),
        pytest.param("ssh://-oProxyCommand=touch%20{marker}@host/r.git", id="ssh-option-user"),
        pytest.param(
            "git@-oProxyCommand=touch%20{marker}:r.git",
            id="scp-option-host",
            marks=pytest.mark.skipif(SSH is None, reason="no OpenSSH client installed"),
        ),
        pytest.param("https://127.0.0.1:abc/r.git", id="https-bad-port"),
        pytest.param("http://[::1/r.git", id="http-bad-ipv6"),
        pytest.param("http://exa%20mple/r.git", id="http-bad-host"),
        pytest.param("gopher://127.0.0.1/r.git", id="transport-not-allowed"),
    ],
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_url_git_refuses_is_not_transient(url: str, operation: str, tmp_path: Path) -> None:
    """A URL git or ssh refuses outright can never work: SourceUnavailable, not transient.

    Retrying it forever would only hide the problem; nothing it asks for is run either.
    """
    marker = tmp_path / "pwned"
    with pytest.raises(SourceError) as caught:
        operate(operation, url.format(marker=marker), tmp_path / "work")
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    )
    assert not marker.exists()


@pytest.mark.parametrize("operation", OPERATIONS)
def test_file_urls_are_refused(
    git_http: GitHttpServer, http_repo: Repo, repo_name: str, tmp_path: Path, operation: str
) -> None:
    """file:// (another Stack's work directory, say) is not an allowed transport."""
    _, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    with pytest.raises(SourceError) as caught:
        operate(operation, git_http.push_url(repo_name), tmp_path / "work", commit=tip)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    )
    assert "not allowed" in str(caught.value)


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_stalled_http_remote_is_cut_off_before_the_limit(
    operation: str, silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP remote that sends nothing is dropped after STALL_TIMEOUT_SECONDS, transiently."""
    monkeypatch.setattr(source_credentials, "STALL_TIMEOUT_SECONDS", 1)
    started = time.monotonic()
    url = f"http://127.0.0.1:{silent_port}/repo.git"
    with pytest.raises(SourceError, match="too slow") as caught:
        operate(operation, url, tmp_path / "work", None, 120)
    assert (caught.value.reason, caught.value.transient) == (SourceFailure.SOURCE_UNAVAILABLE, True)
    assert time.monotonic() - started < 30
