"""``reconcile.spec.repo_url``: a projectRepo git cannot or must not fetch is refused."""

from __future__ import annotations

import pytest

from reconcile.spec import SpecError, parse_spec
from tests.reconcile.spec.helpers import NS, base

# projectRepo values git would refuse, could misuse, or that hold credentials.
BAD_REPOS = [
    pytest.param("file:///srv/git/infra.git", "file:// is refused", id="file-url"),
    pytest.param("/srv/git/infra.git", "local paths are refused", id="absolute-path"),
    pytest.param("./infra", "local paths are refused", id="relative-path"),
    pytest.param("infra", "local paths are refused", id="bare-word"),
    pytest.param("ftp://host/infra.git", "unsupported scheme 'ftp://'", id="ftp"),
    pytest.param("git+ssh://host/infra.git", "unsupported scheme", id="git-plus-ssh"),
    pytest.param("HTTPS://host/infra.git", "lower case only: write 'https://'", id="upper-case"),
    pytest.param("https:///infra.git", "the URL has no host", id="no-host"),
    pytest.param("https://host:abc/infra.git", "must be a number", id="port-not-a-number"),
    pytest.param("ssh://host:70000/infra.git", "from 0 to 65535", id="port-too-big"),
    pytest.param("http://[::1/infra.git", "malformed IPv6 host", id="ipv6-unclosed"),
    pytest.param("https:/host/infra.git", "'https:' is not a scheme without '//'", id="one-slash"),
    pytest.param("git@host:", "needs a repository path", id="scp-without-path"),
    pytest.param("@host:infra", "empty user name", id="scp-empty-user"),
    pytest.param("ssh://@host/infra", "empty user name", id="ssh-empty-user"),
    pytest.param("ssh://-oProxyCommand=touch%20x/r", "starting with - is refused", id="ssh-opt"),
    pytest.param("ssh://%2doProxyCommand=x/r", "starting with - is refused", id="ssh-opt-pct"),
    pytest.param("ssh://-oProxyCommand=x@host/r", "starting with - is refused", id="ssh-opt-user"),
    pytest.param("git@-oProxyCommand=x:r", "starting with - is refused", id="scp-opt-host"),
    pytest.param("https://ghp_secret123@github.com/o/r", "set spec.gitAuth", id="https-token"),
    pytest.param("https://bot:hunter2@github.com/o/r", "set spec.gitAuth", id="https-password"),
    pytest.param("http://bot@host/o/r", "set spec.gitAuth", id="http-user"),
    pytest.param("ssh://git:hunter2@host/o/r", "spec.gitAuth.sshAuth", id="ssh-password"),
    pytest.param("git://bot@host/o/r", "git:// takes no user name", id="git-user"),
]


@pytest.mark.parametrize(("repo", "fragment"), BAD_REPOS)
def test_unusable_repo_url_is_refused(repo: str, fragment: str) -> None:
    """A projectRepo git cannot or must not fetch is InvalidSpec on spec.projectRepo.

    The message never repeats the URL (it may hold credentials).
    """
    with pytest.raises(SpecError) as refused:
        parse_spec(base(projectRepo=repo), NS)
    assert refused.value.path == "spec.projectRepo"
    assert fragment in refused.value.problem
    for part in ("ghp_secret123", "hunter2", "bot", "oProxyCommand"):
        assert part not in str(refused.value)


@pytest.mark.parametrize(
    "repo",
    [
        pytest.param("https://github.com/example/infra.git", id="https"),
        pytest.param("http://127.0.0.1:8080/infra.git", id="http-port"),
        pytest.param("ssh://git@github.com/example/infra.git", id="ssh-user"),
        pytest.param("ssh://github.com:2222/example/infra.git", id="ssh-port"),
        pytest.param("ssh://[::1]:22/infra.git", id="ssh-ipv6"),
        pytest.param("git://127.0.0.1:9418/infra.git", id="git-daemon"),
        pytest.param("git@github.com:example/infra.git", id="scp-like"),
        pytest.param("github.com:example/infra.git", id="scp-like-without-user"),
        pytest.param("git@[::1]:infra.git", id="scp-like-ipv6"),
        pytest.param("https://host/path-with-@-in-it", id="at-in-path"),
    ],
)
def test_usable_repo_url_is_accepted(repo: str) -> None:
    """Every form of git URL the operator fetches parses unchanged."""
    assert parse_spec(base(projectRepo=repo), NS).project_repo == repo
