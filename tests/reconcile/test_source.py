"""reconcile.source against real git servers: git daemon (anonymous) and smart HTTP (basic auth).

SSH is covered at the level of the environment handed to git (key file, GIT_SSH_COMMAND,
SSH_ASKPASS, clean-up), with the real OpenSSH client where one is installed; there is no
sshd in the test bed, so no SSH transfer is tested.
"""

from __future__ import annotations

import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from reconcile import source
from reconcile.source import (
    GitCredentials,
    ProgramDirError,
    SourceError,
    SourceFailure,
    checkout,
    git_environment,
    program_dir,
    redact_url,
    resolve_revision,
)
from tests.testbed.git_http import Account, GitHttpServer
from tests.testbed.git_server import Checkout, git
from tests.testbed.process import free_port

Repo = tuple[str, Checkout]
SSH_KEYGEN = shutil.which("ssh-keygen")
SSH = shutil.which("ssh")


def head(work: Path) -> str:
    """The commit checked out in ``work``."""
    return git("rev-parse", "HEAD", cwd=work).strip()


def tree(work: Path) -> dict[str, str]:
    """Every file under ``work`` outside ``.git``, as relative path → text."""
    return {
        str(path.relative_to(work)): path.read_text()
        for path in sorted(work.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(work).parts
    }


def leftovers(work: Path) -> list[str]:
    """Staging directories of interrupted clones next to ``work``."""
    return [p.name for p in work.parent.glob(f".{work.name}.partial-*")]


def fetch(
    operation: str,
    url: str,
    work: Path,
    credentials: GitCredentials | None = None,
    timeout: float = 60,
) -> str:
    """Run ``resolve_revision`` or ``checkout`` of branch ``main``; returns the commit."""
    if operation == "resolve":
        return resolve_revision(url, "main", credentials, timeout=timeout)
    return checkout(url, work, branch="main", credentials=credentials, timeout=timeout)


OPERATIONS = [pytest.param("resolve", id="resolve"), pytest.param("checkout", id="checkout")]


def error_texts(err: BaseException) -> str:
    """Everything an exception (and its chain) would show in a log or a status message."""
    texts = []
    seen: BaseException | None = err
    while seen is not None:
        texts += [str(seen), repr(seen), *map(str, seen.args)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) but never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


@pytest.fixture
def ssh_key(tmp_path: Path) -> tuple[str, str]:
    """An ed25519 private key protected by a passphrase: (key text, passphrase)."""
    if SSH_KEYGEN is None:
        pytest.skip("ssh-keygen (OpenSSH client) is not installed")
    passphrase = secrets.token_urlsafe(12)
    key = tmp_path / "id_test"
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", passphrase, "-C", "test", "-f", str(key)],
        check=True,
        timeout=60,
    )
    return key.read_text(), passphrase


# --- resolve_revision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "branch", [pytest.param("main", id="short-name"), pytest.param("refs/heads/main", id="ref")]
)
def test_resolve_revision_follows_the_branch(git_repo: Repo, branch: str) -> None:
    """resolve_revision reports the branch tip, and the new tip after every push."""
    url, upstream = git_repo
    first = upstream.commit({"a.txt": "1"})
    assert resolve_revision(url, branch, None) == first
    second = upstream.commit({"a.txt": "2"})
    assert resolve_revision(url, branch, None) == second


def test_resolve_revision_matches_the_whole_ref(git_repo: Repo, tmp_path: Path) -> None:
    """A branch whose name merely ends in the wanted name (team/main) is not taken for it."""
    url, upstream = git_repo
    main = upstream.commit({"a.txt": "main"})
    Checkout(url, tmp_path / "team", branch="team/main").commit({"a.txt": "team"})
    assert resolve_revision(url, "main", None) == main


def test_resolve_revision_of_an_unknown_branch(git_repo: Repo) -> None:
    """An unknown branch is RevisionNotFound, which no retry will fix."""
    url, upstream = git_repo
    upstream.commit({"a.txt": "1"})
    with pytest.raises(SourceError) as caught:
        resolve_revision(url, "no-such-branch", None)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.REVISION_NOT_FOUND,
        False,
    )
    assert "no-such-branch" in str(caught.value)


# --- checkout --------------------------------------------------------------------------------


def test_checkout_of_a_branch(git_repo: Repo, tmp_path: Path) -> None:
    """Checking out a branch gives its tip, detached, with exactly the committed files."""
    url, upstream = git_repo
    tip = upstream.commit({"Pulumi.yaml": "name: p\n", "src/main.py": "print()\n"})
    work = tmp_path / "work"

    assert checkout(url, work, branch="main") == tip

    assert head(work) == tip
    assert tree(work) == {"Pulumi.yaml": "name: p\n", "src/main.py": "print()\n"}
    assert git("status", "--porcelain", cwd=work) == ""
    assert leftovers(work) == []


@pytest.mark.parametrize(
    "length", [pytest.param(40, id="full-sha"), pytest.param(10, id="abbreviated-sha")]
)
def test_checkout_of_an_older_pinned_commit(git_repo: Repo, tmp_path: Path, length: int) -> None:
    """A commit no branch points at any more is fetched by id and checked out."""
    url, upstream = git_repo
    old = upstream.commit({"a.txt": "old"})
    upstream.commit({"a.txt": "new"})
    work = tmp_path / "work"

    assert checkout(url, work, commit=old[:length]) == old

    assert head(work) == old
    assert tree(work) == {"a.txt": "old"}
    # A full id is fetched alone (shallow); an abbreviated one needs every branch's history.
    shallow = git("rev-parse", "--is-shallow-repository", cwd=work).strip()
    assert shallow == ("true" if length == 40 else "false")


def test_checkout_when_the_server_refuses_commits_by_id(
    git_http_v0: GitHttpServer, repo_name: str, basic_auth: GitCredentials, tmp_path: Path
) -> None:
    """A protocol-v0 server refuses an unadvertised commit; all refs are fetched instead."""
    url = git_http_v0.create_repo(repo_name)
    upstream = Checkout(git_http_v0.push_url(repo_name), tmp_path / "upstream")
    old = upstream.commit({"a.txt": "old"})
    upstream.commit({"a.txt": "new"})
    work = tmp_path / "work"

    assert checkout(url, work, commit=old, credentials=basic_auth) == old

    assert tree(work) == {"a.txt": "old"}
    # The shallow fetch by id was refused; the full fetch that followed is not shallow.
    assert git("rev-parse", "--is-shallow-repository", cwd=work).strip() == "false"


def test_switching_between_branch_and_commit(git_repo: Repo, tmp_path: Path) -> None:
    """One clone moves from branch tip to a pinned commit and back, files added and removed."""
    url, upstream = git_repo
    old = upstream.commit({"a.txt": "1", "gone-later.txt": "x"})
    (upstream.path / "gone-later.txt").unlink()
    new = upstream.commit({"a.txt": "2"})
    work = tmp_path / "work"

    assert checkout(url, work, branch="main") == new
    marker = work / ".git" / "test-marker"
    marker.write_text("same clone")
    assert tree(work) == {"a.txt": "2"}

    assert checkout(url, work, commit=old) == old
    assert tree(work) == {"a.txt": "1", "gone-later.txt": "x"}

    assert checkout(url, work, branch="main") == new
    assert tree(work) == {"a.txt": "2"}
    assert marker.exists()


def test_second_checkout_fetches_into_the_existing_clone(git_repo: Repo, tmp_path: Path) -> None:
    """A new commit on the branch is fetched into the clone already there, shallowly."""
    url, upstream = git_repo
    upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    checkout(url, work, branch="main")
    marker = work / ".git" / "test-marker"
    marker.write_text("same clone")

    tip = upstream.commit({"a.txt": "2"})
    assert checkout(url, work, branch="main") == tip

    assert marker.read_text() == "same clone"
    assert tree(work) == {"a.txt": "2"}
    assert git("rev-parse", "--is-shallow-repository", cwd=work).strip() == "true"


def test_a_pinned_commit_already_present_is_not_fetched_again(
    git_http: GitHttpServer,
    http_repo: Repo,
    repo_name: str,
    basic_auth: GitCredentials,
    tmp_path: Path,
) -> None:
    """Checking out a commit the clone already has sends no request to the server."""
    url, upstream = http_repo
    sha = upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    checkout(url, work, commit=sha, credentials=basic_auth)
    requests_before = len(git_http.requests_for(repo_name))

    assert checkout(url, work, commit=sha, credentials=basic_auth) == sha

    assert requests_before > 0
    assert len(git_http.requests_for(repo_name)) == requests_before


def _delete_head(work: Path) -> None:
    (work / ".git" / "HEAD").unlink()


def _git_dir_becomes_a_file(work: Path) -> None:
    shutil.rmtree(work / ".git")
    (work / ".git").write_text("gitdir: /nonexistent\n")


def _corrupt_objects(work: Path) -> None:
    for path in (work / ".git" / "objects").rglob("*"):
        if path.is_file():
            path.chmod(0o644)
            path.write_bytes(b"garbage")


def _plain_directory(work: Path) -> None:
    shutil.rmtree(work)
    work.mkdir()
    (work / "junk.txt").write_text("not a clone")


def _plain_file(work: Path) -> None:
    shutil.rmtree(work)
    work.write_text("not a directory")


def _other_origin(work: Path) -> None:
    git("remote", "set-url", "origin", "git://127.0.0.1:9/other.git", cwd=work)
    (work / "junk.txt").write_text("from the other repository")


def _interrupted_clone(work: Path) -> None:
    shutil.rmtree(work)
    staging = work.parent / f".{work.name}.partial-abc123"
    (staging / ".git").mkdir(parents=True)
    (staging / "half.txt").write_text("half-written")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(_delete_head, id="head-deleted"),
        pytest.param(_git_dir_becomes_a_file, id="git-dir-is-a-file"),
        pytest.param(_corrupt_objects, id="objects-corrupted"),
        pytest.param(_plain_directory, id="not-a-repository"),
        pytest.param(_plain_file, id="a-plain-file"),
        pytest.param(_other_origin, id="other-origin-url"),
        pytest.param(_interrupted_clone, id="interrupted-first-clone"),
    ],
)
def test_checkout_recovers_from_a_damaged_work_dir(
    git_repo: Repo, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    """A work_dir that is not a usable clone of the URL is replaced by a good one."""
    url, upstream = git_repo
    upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    checkout(url, work, branch="main")
    damage(work)
    tip = upstream.commit({"a.txt": "2"})

    assert checkout(url, work, branch="main") == tip

    assert head(work) == tip
    assert tree(work) == {"a.txt": "2"}
    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert leftovers(work) == []


def test_untracked_files_go_and_keep_paths_stay(git_repo: Repo, tmp_path: Path) -> None:
    """Untracked, ignored and modified files are reset; only the keep paths survive."""
    url, upstream = git_repo
    upstream.commit({"main.py": "print()\n", ".gitignore": "build/\n"})
    work = tmp_path / "work"
    checkout(url, work, branch="main")
    for relative in [".venv/bin/python", "cache/pip/wheel", "cache/other", "stray.txt", "build/o"]:
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        (work / relative).write_text("made by the program")
    (work / "main.py").write_text("edited\n")

    checkout(url, work, branch="main", keep=[".venv", "cache/pip"])

    assert tree(work) == {
        ".gitignore": "build/\n",
        ".venv/bin/python": "made by the program",
        "cache/pip/wheel": "made by the program",
        "main.py": "print()\n",
    }


def test_keep_paths_survive_a_fresh_clone(git_repo: Repo, tmp_path: Path) -> None:
    """When a broken clone is replaced, the keep paths move into the new one."""
    url, upstream = git_repo
    upstream.commit({"main.py": "print()\n"})
    work = tmp_path / "work"
    checkout(url, work, branch="main")
    (work / ".venv").mkdir()
    (work / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (work / "stray.txt").write_text("untracked")
    _delete_head(work)

    checkout(url, work, branch="main", keep=[".venv"])

    assert tree(work) == {".venv/pyvenv.cfg": "home = /usr\n", "main.py": "print()\n"}


def test_keep_paths_behind_a_symlink_are_not_carried_over(git_repo: Repo, tmp_path: Path) -> None:
    """A keep path whose parent is a symlink out of the work tree is left where it is."""
    url, upstream = git_repo
    upstream.commit({"main.py": "print()\n"})
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not the checkout's")
    checkout(url, work, branch="main")
    (work / "link").symlink_to(outside)
    _delete_head(work)

    checkout(url, work, branch="main", keep=["link/precious"])

    assert (outside / "precious").read_text() == "not the checkout's"
    assert tree(work) == {"main.py": "print()\n"}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda w: checkout("git://h/r", w, commit="a" * 40, branch="x"), id="both"),
        pytest.param(lambda w: checkout("git://h/r", w), id="neither"),
        pytest.param(lambda w: checkout("git://h/r", w, commit="not-hex"), id="bad-commit"),
        pytest.param(lambda w: checkout("git://h/r", w, branch="-f"), id="option-branch"),
        pytest.param(lambda w: checkout("git://h/r", w, branch="a..b"), id="dotdot-branch"),
        pytest.param(lambda w: checkout("--upload-pack=x", w, branch="main"), id="option-url"),
        pytest.param(lambda w: checkout("git://h/r", w, branch="m", keep=["../x"]), id="keep-up"),
        pytest.param(lambda w: checkout("git://h/r", w, branch="m", keep=["/x"]), id="keep-abs"),
        pytest.param(lambda w: checkout("git://h/r", w, branch="m", keep=[".git"]), id="keep-git"),
        pytest.param(lambda _: resolve_revision("git://h/r", "a b", None), id="space-branch"),
    ],
)
def test_malformed_arguments_are_refused(call: Callable[[Path], object], tmp_path: Path) -> None:
    """Malformed URLs, revisions and keep paths raise ValueError before git runs."""
    with pytest.raises(ValueError, match=r"."):
        call(tmp_path / "work")
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    ("commit", "branch"),
    [
        pytest.param(None, "no-such-branch", id="branch"),
        pytest.param("0123456789" * 4, None, id="commit"),
    ],
)
def test_checkout_of_an_unknown_revision(
    git_repo: Repo, tmp_path: Path, commit: str | None, branch: str | None
) -> None:
    """An unknown branch or commit is RevisionNotFound and leaves no work_dir behind."""
    url, upstream = git_repo
    upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    with pytest.raises(SourceError) as caught:
        checkout(url, work, commit=commit, branch=branch)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.REVISION_NOT_FOUND,
        False,
    )
    assert not work.exists()
    assert leftovers(work) == []


# --- authentication --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "credentials", [pytest.param("basic_auth", id="basic"), pytest.param("token_auth", id="token")]
)
def test_http_authentication_succeeds(
    http_repo: Repo, tmp_path: Path, credentials: str, request: pytest.FixtureRequest
) -> None:
    """Basic and token credentials let resolve_revision and checkout through."""
    creds: GitCredentials = request.getfixturevalue(credentials)
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})

    assert resolve_revision(url, "main", creds) == tip
    assert checkout(url, tmp_path / "work", branch="main", credentials=creds) == tip
    assert tree(tmp_path / "work") == {"a.txt": "1"}


def test_password_in_the_url_is_moved_out_of_it(
    http_repo: Repo, http_account: Account, tmp_path: Path
) -> None:
    """user:password@ in an http URL authenticates, and the clone's config has no password."""
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    with_password = url.replace("://", f"://{http_account.username}:{http_account.password}@")
    work = tmp_path / "work"

    assert resolve_revision(with_password, "main", None) == tip
    assert checkout(with_password, work, branch="main") == tip

    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert http_account.password not in (work / ".git" / "config").read_text()


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("password", id="wrong-password"),
        pytest.param("token", id="wrong-token"),
        pytest.param("none", id="no-credentials"),
    ],
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_wrong_credentials_are_refused_without_leaking(
    http_repo: Repo, http_account: Account, tmp_path: Path, kind: str, operation: str
) -> None:
    """Refused credentials are AuthenticationFailed, not transient, and never shown."""
    url, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    secret = f"wrong-{secrets.token_hex(8)}"
    credentials = {
        "password": GitCredentials(username=http_account.username, password=secret),
        "token": GitCredentials(token=secret),
        "none": None,
    }[kind]

    with capture_logs() as logs, pytest.raises(SourceError) as caught:
        fetch(operation, url, tmp_path / "work", credentials)

    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    )
    assert secret not in error_texts(caught.value)
    assert secret not in repr(logs)


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


def test_credentials_are_never_on_a_command_line(
    http_repo: Repo,
    http_account: Account,
    token_auth: GitCredentials,
    ssh_key: tuple[str, str],
    tmp_path: Path,
    git_argv: list[list[str]],
) -> None:
    """No argv of any process started carries a password, token, passphrase or key."""
    url, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    key, passphrase = ssh_key
    basic = GitCredentials(
        username=http_account.username,
        password=http_account.password,
        ssh_private_key=key,
        ssh_passphrase=passphrase,
    )
    in_url = url.replace("://", f"://{http_account.username}:{http_account.password}@")
    git_argv.clear()  # the upstream commit above ran git too

    resolve_revision(url, "main", basic)
    checkout(url, tmp_path / "a", branch="main", credentials=basic)
    checkout(url, tmp_path / "b", branch="main", credentials=token_auth)
    checkout(in_url, tmp_path / "c", branch="main")

    assert any(argv[:2] == ["git", "ls-remote"] for argv in git_argv)
    assert any(argv[:2] == ["git", "fetch"] for argv in git_argv)
    hidden = [http_account.password, token_auth.token, passphrase, *key.splitlines()[1:-1]]
    for argv in git_argv:
        assert not [s for s in hidden if s and any(s in arg for arg in argv)], argv


def test_git_credentials_repr_masks_every_value() -> None:
    """repr() says which fields are set and shows none of their values."""
    values = {
        "token": "t0ken",
        "username": "us3r",
        "password": "passw0rd",
        "ssh_private_key": "-----BEGIN KEY-----",
        "ssh_passphrase": "phr4se",
        "ssh_known_hosts": "host ssh-ed25519 AAAA",
    }
    text = repr(GitCredentials(**values))
    assert [v for v in values.values() if v in text] == []
    assert text.count("'***'") == len(values)
    assert repr(GitCredentials()).count("=None") == len(values)


# --- availability ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "server", [pytest.param("git", id="git-daemon"), pytest.param("http", id="http")]
)
def test_a_missing_repository_is_not_transient(
    server: str, request: pytest.FixtureRequest, basic_auth: GitCredentials, tmp_path: Path
) -> None:
    """A repository the server does not have is SourceUnavailable, not transient."""
    fixture = "git_server" if server == "git" else "git_http"
    url = request.getfixturevalue(fixture).url("no-such-repo")
    with pytest.raises(SourceError) as caught:
        checkout(url, tmp_path / "work", branch="main", credentials=basic_auth)
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
        fetch(operation, url, tmp_path / "work", credentials)
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
        fetch(operation, url, tmp_path / "work", timeout=1)
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
        fetch(operation, url.format(marker=marker), tmp_path / "work")
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    )
    assert not marker.exists()


def test_file_urls_are_refused(
    git_http: GitHttpServer, http_repo: Repo, repo_name: str, tmp_path: Path
) -> None:
    """file:// (another Stack's work directory, say) is not an allowed transport."""
    _, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    with pytest.raises(SourceError) as caught:
        checkout(git_http.push_url(repo_name), tmp_path / "work", branch="main")
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.SOURCE_UNAVAILABLE,
        False,
    )
    assert "not allowed" in str(caught.value)


def test_resolve_revision_defaults_to_the_ls_remote_limit(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a timeout, resolve_revision gives up after LS_REMOTE_TIMEOUT_SECONDS."""
    assert source.LS_REMOTE_TIMEOUT_SECONDS <= 30  # a silent remote must not hold a worker long
    monkeypatch.setattr(source, "LS_REMOTE_TIMEOUT_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"timed out \(limit 1s\)") as caught:
        resolve_revision(f"git://127.0.0.1:{silent_port}/repo.git", "main", None)
    assert caught.value.transient
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_stalled_http_remote_is_cut_off_before_the_limit(
    operation: str, silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP remote that sends nothing is dropped after STALL_TIMEOUT_SECONDS, transiently."""
    monkeypatch.setattr(source, "STALL_TIMEOUT_SECONDS", 1)
    started = time.monotonic()
    with pytest.raises(SourceError, match="too slow") as caught:
        fetch(operation, f"http://127.0.0.1:{silent_port}/repo.git", tmp_path / "work", None, 120)
    assert (caught.value.reason, caught.value.transient) == (SourceFailure.SOURCE_UNAVAILABLE, True)
    assert time.monotonic() - started < 30


def test_user_git_configuration_is_ignored(
    git_repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global gitconfig and inherited GIT_* variables do not reach git."""
    url, upstream = git_repo
    tip = upstream.commit({"a.txt": "1"})
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f'[url "git://127.0.0.1:9/"]\n\tinsteadOf = {url}\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))

    assert resolve_revision(url, "main", None) == tip
    assert checkout(url, tmp_path / "work", branch="main") == tip


# --- the environment handed to git ---------------------------------------------------------


def test_environment_is_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The environment has a private HOME, no system config, no prompts, none of our secrets."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.setenv("GIT_DIR", "/somewhere")
    with git_environment(None) as env:
        home = Path(env["HOME"])
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert env["GIT_CONFIG_NOSYSTEM"] == "1"
        assert env["GIT_TERMINAL_PROMPT"] == "0"
        assert "file" not in env["GIT_ALLOW_PROTOCOL"].split(":")
        assert not {"AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "GIT_DIR"} & env.keys()
        ssh = shlex.split(env["GIT_SSH_COMMAND"])
        assert "BatchMode=yes" in ssh
        assert f"ConnectTimeout={source.SSH_CONNECT_TIMEOUT_SECONDS}" in ssh
        assert f"ServerAliveInterval={source.SSH_CONNECT_TIMEOUT_SECONDS}" in ssh
        config = {
            env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))
        }
        assert config["http.lowSpeedTime"] == str(source.STALL_TIMEOUT_SECONDS)
        assert config["http.lowSpeedLimit"] == str(source.STALL_MIN_BYTES_PER_SECOND)
    assert not home.exists()


def test_http_askpass_answers_git_prompts(http_account: Account) -> None:
    """The GIT_ASKPASS script answers git's username and password prompts from the env."""
    credentials = GitCredentials(username=http_account.username, password=http_account.password)
    with git_environment(credentials) as env:
        askpass = env["GIT_ASKPASS"]
        assert http_account.password not in Path(askpass).read_text()

        def ask(prompt: str) -> str:
            return subprocess.run(
                [askpass, prompt], env=env, capture_output=True, text=True, check=True, timeout=10
            ).stdout

        assert ask("Username for 'http://127.0.0.1': ") == http_account.username + "\n"
        assert ask("Password for 'http://u@127.0.0.1': ") == http_account.password + "\n"
        assert "SSH_ASKPASS" not in env


def test_ssh_environment_writes_a_private_key_file_and_removes_it(ssh_key: tuple[str, str]) -> None:
    """The key is a 0600 file in a 0700 dir, used by GIT_SSH_COMMAND, deleted afterwards."""
    key, passphrase = ssh_key
    with git_environment(GitCredentials(ssh_private_key=key, ssh_passphrase=passphrase)) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        key_file = Path(command[command.index("-i") + 1])
        home = Path(env["HOME"])
        assert command[0] == "ssh"
        assert key_file.is_relative_to(home)
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert key_file.read_text() == key
        assert "IdentitiesOnly=yes" in command
        assert "StrictHostKeyChecking=accept-new" in command
        assert f"UserKnownHostsFile={home / '.ssh' / 'known_hosts'}" in command
        assert "BatchMode=no" in command  # the passphrase is read through SSH_ASKPASS
        assert passphrase not in env["GIT_SSH_COMMAND"]
        assert env["SSH_ASKPASS_REQUIRE"] == "force"
        assert passphrase not in Path(env["SSH_ASKPASS"]).read_text()
    assert not key_file.exists()
    assert not home.exists()


def test_ssh_environment_is_removed_when_the_body_raises() -> None:
    """The private HOME with the key goes away even when the git call fails."""
    homes: list[Path] = []

    def fail_inside() -> None:
        with git_environment(GitCredentials(ssh_private_key="KEY")) as env:
            homes.append(Path(env["HOME"]))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert len(homes) == 1
    assert not homes[0].exists()


def test_ssh_known_hosts_pin_the_host_key() -> None:
    """Given known_hosts, ssh checks host keys strictly against exactly those lines."""
    known = "[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA\n"
    credentials = GitCredentials(ssh_private_key="KEY", ssh_known_hosts=known)
    with git_environment(credentials) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        assert "StrictHostKeyChecking=yes" in command
        assert "BatchMode=yes" in command  # no passphrase: never prompt
        assert "SSH_ASKPASS" not in env
        assert (Path(env["HOME"]) / ".ssh" / "known_hosts").read_text() == known


@pytest.mark.parametrize(
    ("given", "accepted"),
    [pytest.param(None, True, id="right-passphrase"), pytest.param("wrong", False, id="wrong")],
)
def test_openssh_reads_the_passphrase_through_askpass(
    ssh_key: tuple[str, str], tmp_path: Path, given: str | None, *, accepted: bool
) -> None:
    """Real OpenSSH decrypts the key file with the passphrase SSH_ASKPASS hands it."""
    key, passphrase = ssh_key
    credentials = GitCredentials(ssh_private_key=key, ssh_passphrase=given or passphrase)
    assert SSH_KEYGEN is not None
    with git_environment(credentials) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        key_file = command[command.index("-i") + 1]
        derived = subprocess.run(
            [SSH_KEYGEN, "-y", "-f", key_file],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
            start_new_session=True,  # no controlling terminal: askpass is the only way
        )
    public = (tmp_path / "id_test.pub").read_text().split()[:2]
    assert (derived.stdout.split()[:2] == public) is accepted


# --- user information in URLs ------------------------------------------------------------------


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
    assert checkout(with_token, work, branch="main") == tip

    assert [argv for argv in git_argv if any(token in arg for arg in argv)] == []
    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert token not in (work / ".git" / "config").read_text()


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_refused_token_as_url_user_name_is_not_shown(
    http_repo: Repo, tmp_path: Path, operation: str
) -> None:
    """A token the server refuses appears in no exception text and no log line."""
    url, upstream = http_repo
    upstream.commit({"a.txt": "1"})
    token = f"ghp_{secrets.token_hex(16)}"
    with capture_logs() as logs, pytest.raises(SourceError) as caught:
        fetch(operation, url.replace("://", f"://{token}@"), tmp_path / "work")
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    )
    assert token not in error_texts(caught.value)
    assert token not in repr(logs)


# --- program_dir ---------------------------------------------------------------------------------


@pytest.fixture
def linked_checkout(git_repo: Repo, tmp_path: Path) -> Path:
    """A checkout whose commit holds symlinks into and out of the repository.

    ``infra/`` (with Pulumi.yaml), ``alias -> infra``, ``up -> ..``, ``etc -> /etc``,
    ``escape -> ../outside`` (a real directory next to the checkout), ``loop -> loop``,
    ``infra/out -> ../..`` and the file ``README``.
    """
    url, upstream = git_repo
    (tmp_path / "outside" / "sub").mkdir(parents=True)
    (tmp_path / "outside" / "Pulumi.yaml").write_text("name: not-this-one\n")
    links = {"alias": "infra", "up": "..", "etc": "/etc", "escape": "../outside", "loop": "loop"}
    for name, target in links.items():
        (upstream.path / name).symlink_to(target)
    (upstream.path / "infra").mkdir()
    (upstream.path / "infra" / "out").symlink_to("../..")
    upstream.commit({"infra/Pulumi.yaml": "name: p\n", "README": "hello\n"})
    work = tmp_path / "work"
    checkout(url, work, branch="main")
    assert (work / "escape").is_symlink()  # git checked the links out as links
    return work


@pytest.mark.parametrize(
    ("repo_dir", "expected"),
    [
        pytest.param(None, ".", id="unset"),
        pytest.param("", ".", id="empty"),
        pytest.param(".", ".", id="dot"),
        pytest.param("infra", "infra", id="directory"),
        pytest.param("alias", "infra", id="symlink-inside"),
        pytest.param("infra/out/work/infra", "infra", id="out-and-back-in"),
    ],
)
def test_program_dir_inside_the_checkout(
    linked_checkout: Path, repo_dir: str | None, expected: str
) -> None:
    """A repoDir resolves, through symlinks staying inside, to a real directory in the checkout."""
    assert program_dir(linked_checkout, repo_dir) == (linked_checkout / expected).resolve()


@pytest.mark.parametrize(
    ("repo_dir", "problem"),
    [
        pytest.param("escape", "leads outside the repository", id="symlink-to-sibling"),
        pytest.param("escape/sub", "leads outside the repository", id="through-a-symlink"),
        pytest.param("etc", "leads outside the repository", id="absolute-symlink"),
        pytest.param("up", "leads outside the repository", id="symlink-to-parent"),
        pytest.param("infra/out", "leads outside the repository", id="nested-symlink"),
        pytest.param("..", "leads outside the repository", id="dot-dot"),
        pytest.param("/etc", "leads outside the repository", id="absolute"),
        pytest.param("nope", "does not exist in the repository", id="missing"),
        pytest.param("README", "is not a directory", id="a-file"),
        pytest.param("loop", "symlink loop", id="symlink-loop"),
    ],
)
def test_program_dir_outside_or_missing_is_invalid_spec(
    linked_checkout: Path, repo_dir: str, problem: str
) -> None:
    """A repoDir that escapes (textually or via a symlink) or is missing: ProgramDirError.

    Not a SourceError (the fetch worked); the reconciler stalls the Stack with InvalidSpec.
    """
    with pytest.raises(ProgramDirError) as caught:
        program_dir(linked_checkout, repo_dir)
    assert not isinstance(caught.value, SourceError)
    assert str(caught.value).startswith(f"spec.repoDir {repo_dir!r} ")
    assert problem in str(caught.value)
    assert "point spec.repoDir at a directory inside the repository" in str(caught.value)
