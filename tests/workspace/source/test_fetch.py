"""workspace.source.fetch: resolve_revision and checkout against real git servers.

git daemon (anonymous) and smart HTTP (basic auth) serve the repositories; see
``tests/workspace/source/conftest.py``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.git_http import GitHttpServer
from testbed.git_server import Checkout, git
from tests.workspace.source.helpers import SOME_COMMIT, Repo, head, leftovers, tree
from workspace.source import (
    GitCredentials,
    SourceError,
    SourceFailure,
    checkout,
    resolve_revision,
)
from workspace.source import fetch as source_fetch

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


@pytest.mark.git
def test_resolve_revision_defaults_to_the_ls_remote_limit(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a timeout, resolve_revision gives up after LS_REMOTE_TIMEOUT_SECONDS."""
    assert source_fetch.LS_REMOTE_TIMEOUT_SECONDS <= 30  # a silent remote must not hold a worker
    monkeypatch.setattr(source_fetch, "LS_REMOTE_TIMEOUT_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"timed out \(limit 1s\)") as caught:
        resolve_revision(f"git://127.0.0.1:{silent_port}/repo.git", "main", None)
    assert caught.value.transient
    assert time.monotonic() - started < 15


# --- checkout --------------------------------------------------------------------------------


def test_checkout_of_the_tip(git_repo: Repo, tmp_path: Path) -> None:
    """Checking out a branch's tip gives it, detached, with exactly the committed files."""
    url, upstream = git_repo
    tip = upstream.commit({"Pulumi.yaml": "name: p\n", "src/main.py": "print()\n"})
    work = tmp_path / "work"

    assert checkout(url, work, commit=tip.upper()) == tip

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


def test_a_checkout_without_shallow_has_the_commits_history(git_repo: Repo, tmp_path: Path) -> None:
    """shallow=False: the commit and its ancestors; a shallow clone is deepened in place."""
    url, upstream = git_repo
    first = upstream.commit({"a.txt": "1"})
    second = upstream.commit({"a.txt": "2"})
    work = tmp_path / "work"
    assert checkout(url, work, commit=second) == second
    assert git("rev-parse", "--is-shallow-repository", cwd=work).strip() == "true"

    assert checkout(url, work, commit=second, shallow=False) == second

    assert git("rev-parse", "--is-shallow-repository", cwd=work).strip() == "false"
    assert git("rev-list", "HEAD", cwd=work).split() == [second, first]
    assert tree(work) == {"a.txt": "2"}
    fresh = tmp_path / "fresh"
    assert checkout(url, fresh, commit=first, shallow=False) == first
    assert git("rev-list", "HEAD", cwd=fresh).split() == [first]
    assert git("rev-parse", "--is-shallow-repository", cwd=fresh).strip() == "false"


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


def test_switching_between_commits_in_one_clone(git_repo: Repo, tmp_path: Path) -> None:
    """One clone moves from the tip to an older commit and back, files added and removed."""
    url, upstream = git_repo
    old = upstream.commit({"a.txt": "1", "gone-later.txt": "x"})
    (upstream.path / "gone-later.txt").unlink()
    new = upstream.commit({"a.txt": "2"})
    work = tmp_path / "work"

    assert checkout(url, work, commit=new) == new
    marker = work / ".git" / "test-marker"
    marker.write_text("same clone")
    assert tree(work) == {"a.txt": "2"}

    assert checkout(url, work, commit=old) == old
    assert tree(work) == {"a.txt": "1", "gone-later.txt": "x"}

    assert checkout(url, work, commit=new) == new
    assert tree(work) == {"a.txt": "2"}
    assert marker.exists()


def test_second_checkout_fetches_into_the_existing_clone(git_repo: Repo, tmp_path: Path) -> None:
    """A new commit is fetched into the clone already there, shallowly."""
    url, upstream = git_repo
    first = upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    checkout(url, work, commit=first)
    marker = work / ".git" / "test-marker"
    marker.write_text("same clone")

    tip = upstream.commit({"a.txt": "2"})
    assert checkout(url, work, commit=tip) == tip

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
    first = upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    checkout(url, work, commit=first)
    damage(work)
    tip = upstream.commit({"a.txt": "2"})

    assert checkout(url, work, commit=tip) == tip

    assert head(work) == tip
    assert tree(work) == {"a.txt": "2"}
    assert git("config", "--get", "remote.origin.url", cwd=work).strip() == url
    assert leftovers(work) == []


def test_untracked_and_modified_files_are_reset(git_repo: Repo, tmp_path: Path) -> None:
    """Untracked, ignored and modified files are reset: the tree is exactly the commit."""
    url, upstream = git_repo
    tip = upstream.commit({"main.py": "print()\n", ".gitignore": "build/\n"})
    work = tmp_path / "work"
    checkout(url, work, commit=tip)
    for relative in [".venv/bin/python", "cache/pip/wheel", "stray.txt", "build/o"]:
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        (work / relative).write_text("made by the program")
    (work / "main.py").write_text("edited\n")

    checkout(url, work, commit=tip)

    assert tree(work) == {".gitignore": "build/\n", "main.py": "print()\n"}


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda w: checkout("git://h/r", w, commit="not-hex"), id="bad-commit"),
        pytest.param(lambda w: checkout("git://h/r", w, commit="abc"), id="short-commit"),
        pytest.param(lambda w: checkout("--upload-pack=x", w, commit=SOME_COMMIT), id="option-url"),
        pytest.param(lambda _: resolve_revision("--upload-pack=x", "m", None), id="option-url-ls"),
        pytest.param(lambda _: resolve_revision("git://h/r", "-f", None), id="option-branch"),
        pytest.param(lambda _: resolve_revision("git://h/r", "a..b", None), id="dotdot-branch"),
        pytest.param(lambda _: resolve_revision("git://h/r", "a b", None), id="space-branch"),
        pytest.param(lambda _: resolve_revision("git://h/r", "refs/tags/v1", None), id="tag-ref"),
    ],
)
def test_malformed_arguments_are_refused(call: Callable[[Path], object], tmp_path: Path) -> None:
    """Malformed URLs, commits and branches raise ValueError before git runs."""
    with pytest.raises(ValueError, match=r"."):
        call(tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_checkout_of_an_unknown_commit(git_repo: Repo, tmp_path: Path) -> None:
    """An unknown commit is RevisionNotFound and leaves no work_dir behind."""
    url, upstream = git_repo
    upstream.commit({"a.txt": "1"})
    work = tmp_path / "work"
    with pytest.raises(SourceError) as caught:
        checkout(url, work, commit=SOME_COMMIT)
    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.REVISION_NOT_FOUND,
        False,
    )
    assert not work.exists()
    assert leftovers(work) == []
