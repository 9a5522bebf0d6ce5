"""Resolve a branch to a commit (``git ls-remote``) and check one commit out.

``checkout`` never leaves a half-written ``work_dir`` that a later call could take for a
good clone: a first clone is built in a sibling staging directory and renamed into place;
an existing clone is updated with git's own atomic fetch, and a clone that git cannot use
is replaced. Serialising calls for one ``work_dir`` is the caller's job (one worker per
Stack key does it); Git LFS and submodules are not fetched.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Final

import structlog

from workspace.gitref import branch_name, is_commit
from workspace.source.credentials import GitCredentials, git_environment
from workspace.source.errors import (
    BrokenRepositoryError,
    SourceError,
    SourceFailure,
    UnclassifiedError,
)
from workspace.source.git import Git
from workspace.source.url import checked_url, redact_url, split_userinfo

log = structlog.get_logger(__name__)

LS_REMOTE_TIMEOUT_SECONDS: Final = 20.0
"""Default limit of ``resolve_revision`` (one ``git ls-remote``, run on every resync).

It sends one ref pattern and reads one line; a remote that has not answered in 20 s is
treated as unavailable (transient), so a silent remote holds a worker 20 s, not 60.
"""

CHECKOUT_TIMEOUT_SECONDS: Final = 300.0
"""Default limit of ``checkout``: every git command of it together (a first clone included)."""


def resolve_revision(
    url: str, branch: str, credentials: GitCredentials | None, *, timeout: float | None = None
) -> str:
    """Return the commit SHA that ``branch`` (``main`` or ``refs/heads/main``) points at.

    ``timeout`` bounds the call (default ``LS_REMOTE_TIMEOUT_SECONDS``).

    Raises:
        SourceError: ``RevisionNotFound`` if the remote has no such branch, otherwise as
            classified from git (see ``SourceError``); not transient for a URL that cannot
            be parsed.
        ValueError: ``branch`` is malformed (``workspace.gitref.branch_name``), or ``url``
            is empty, starts with ``-`` or holds control characters.
    """
    name = branch_name(branch)
    if name is None:
        msg = f"not a branch name: {branch!r}"
        raise ValueError(msg)
    ref = f"refs/heads/{name}"
    url, login = split_userinfo(checked_url(url), credentials)
    limit = LS_REMOTE_TIMEOUT_SECONDS if timeout is None else timeout
    with git_environment(login.credentials) as env:
        git = Git(env, url, login, limit)
        listing = git.remote(["ls-remote", "--", url, ref], Path(env["HOME"]))
    for line in listing.splitlines():
        sha, _, listed = line.partition("\t")
        if listed == ref:
            return sha
    msg = f"branch {name!r} not found in {redact_url(url)}"
    raise SourceError(msg, reason=SourceFailure.REVISION_NOT_FOUND, transient=False)


def checkout(  # noqa: PLR0913 - the source, then keyword-only options
    url: str,
    work_dir: Path,
    *,
    commit: str,
    credentials: GitCredentials | None = None,
    timeout: float | None = None,
    shallow: bool = True,
) -> str:
    """Make ``work_dir`` a clean working tree of ``url`` at ``commit``; return its full SHA.

    ``commit`` is a full or abbreviated SHA. An existing clone of the same URL is reused and
    only missing objects are fetched: with ``shallow`` only the commit (``--depth 1``),
    without it the commit and its whole history (a shallow clone is deepened); a commit
    already present is not fetched again. If the server refuses to send a commit by id (or the id is
    abbreviated), every branch and tag is fetched and the commit looked up there. A
    directory that is not a usable clone of ``url`` is replaced. Afterwards HEAD is detached
    at the commit, tracked files are as committed, and everything git does not track is
    deleted. ``timeout`` bounds the call (default ``CHECKOUT_TIMEOUT_SECONDS``).

    Raises:
        SourceError: ``RevisionNotFound`` for an unknown commit, otherwise as classified
            from git (see ``SourceError``); not transient for a URL that cannot be parsed.
        ValueError: ``commit`` is not 4 to 64 hex digits (``workspace.gitref.is_commit``),
            or ``url`` is empty, starts with ``-`` or holds control characters.
        OSError: the local file system failed (disk full, permissions).
    """
    if not is_commit(commit):
        msg = f"not a commit id: {commit!r}"
        raise ValueError(msg)
    commit = commit.lower()
    url, login = split_userinfo(checked_url(url), credentials)
    work_dir = work_dir.resolve()
    limit = CHECKOUT_TIMEOUT_SECONDS if timeout is None else timeout
    with git_environment(login.credentials) as env:
        git = Git(env, url, login, limit)
        if _is_clone_of(git, work_dir, url):
            try:
                return _update(git, work_dir, commit, shallow=shallow)
            except (BrokenRepositoryError, UnclassifiedError) as err:
                log.warning(
                    "Clone is unusable; cloning again", work_dir=str(work_dir), error=str(err)
                )
        try:
            return _clone(git, work_dir, commit, shallow=shallow)
        except BrokenRepositoryError as err:
            msg = f"cannot prepare {work_dir}: {err}"
            raise SourceError(msg, reason=SourceFailure.SOURCE_UNAVAILABLE, transient=True) from err


def _is_clone_of(git: Git, work_dir: Path, url: str) -> bool:
    """True if ``work_dir`` is the top of a git repository whose origin is ``url``."""
    if work_dir.is_symlink() or not (work_dir / ".git").is_dir():
        return False
    top = git.run(["rev-parse", "--show-toplevel"], work_dir)
    if top.code != 0 or top.stdout.strip() != os.path.realpath(work_dir):
        return False
    origin = git.run(["config", "--get", "remote.origin.url"], work_dir)
    return origin.code == 0 and origin.stdout.strip() == url


def _update(git: Git, repo: Path, commit: str, *, shallow: bool) -> str:
    sha = _fetch_commit(git, repo, commit, shallow=shallow)
    _sync_tree(git, repo, sha)
    return sha


def _clone(git: Git, work_dir: Path, commit: str, *, shallow: bool) -> str:
    """Clone into a staging directory beside ``work_dir``, then swap it in."""
    work_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(work_dir)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(work_dir), dir=work_dir.parent))
    try:
        git.local(["init", "--quiet"], staging)
        git.local(["remote", "add", "origin", git.url], staging)
        sha = _fetch_commit(git, staging, commit, shallow=shallow)
        _sync_tree(git, staging, sha)
        _swap_in(staging, work_dir)
    except BaseException:
        _remove(staging)
        raise
    return sha


def _fetch_commit(git: Git, repo: Path, commit: str, *, shallow: bool) -> str:
    """Fetch one commit by id; fall back to all branches and tags if the server refuses.

    Without ``shallow`` the commit's history comes too (a shallow clone is deepened).
    """
    found = _local_commit(git, repo, commit)
    if found is not None and (shallow or not _is_shallow(git, repo)):
        return found  # a commit never changes: nothing to fetch
    depth = ["--depth=1"] if shallow else (["--unshallow"] if _is_shallow(git, repo) else [])
    if len(commit) in {40, 64}:
        try:
            git.remote(["fetch", "--quiet", "--no-tags", *depth, "origin", commit], repo)
        except SourceError as err:
            if err.reason is not SourceFailure.REVISION_NOT_FOUND and not isinstance(
                err, UnclassifiedError
            ):
                raise
            log.debug("Server refused a commit by id; fetching all refs", error=str(err))
            _fetch_all(git, repo)
    else:
        _fetch_all(git, repo)  # an abbreviated id can only be found among fetched commits
    found = _local_commit(git, repo, commit)
    if found is None:
        msg = f"commit {commit} not found in {git.scrub(git.url)}"
        raise SourceError(msg, reason=SourceFailure.REVISION_NOT_FOUND, transient=False)
    return found


def _is_shallow(git: Git, repo: Path) -> bool:
    return git.local(["rev-parse", "--is-shallow-repository"], repo).strip() == "true"


def _fetch_all(git: Git, repo: Path) -> None:
    shallow = _is_shallow(git, repo)
    args = ["fetch", "--quiet", "--no-tags", *(["--unshallow"] if shallow else []), "origin"]
    git.remote([*args, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"], repo)


def _local_commit(git: Git, repo: Path, commit: str) -> str | None:
    proc = git.run(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], repo)
    return proc.stdout.strip() if proc.code == 0 else None


def _sync_tree(git: Git, repo: Path, sha: str) -> None:
    """Detach HEAD at ``sha``, reset tracked files, delete everything untracked."""
    git.local(["checkout", "--quiet", "--force", "--detach", sha], repo)
    git.local(["reset", "--quiet", "--hard", sha], repo)
    git.local(["clean", "-ffdxq"], repo)


def _swap_in(staging: Path, work_dir: Path) -> None:
    """Replace ``work_dir`` by ``staging``; a crash in between leaves no ``work_dir``."""
    if os.path.lexists(work_dir):
        old = work_dir.with_name(f"{_staging_prefix(work_dir)}old-{secrets.token_hex(4)}")
        work_dir.rename(old)
        staging.rename(work_dir)
        _remove(old)
    else:
        staging.rename(work_dir)


def _staging_prefix(work_dir: Path) -> str:
    return f".{work_dir.name}.partial-"


def _remove_leftovers(work_dir: Path) -> None:
    """Delete staging directories an interrupted earlier clone left behind."""
    pattern = glob.escape(_staging_prefix(work_dir)) + "*"
    for leftover in work_dir.parent.glob(pattern):
        _remove(leftover)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
