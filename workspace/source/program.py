"""Where the program is: ``spec.repoDir`` inside a checkout, never outside it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class ProgramDirError(ValueError):
    """``spec.repoDir`` does not name a directory inside the checkout (see ``program_dir``).

    Terminal, like an invalid spec (the Stack's reason is ``InvalidSpec``): only a new
    ``spec.repoDir`` or a new commit fixes it. The message starts with ``spec.repoDir``.
    Not a ``SourceError``: fetching the source succeeded.
    """


def program_dir(checkout: Path, repo_dir: str | None) -> Path:
    """The directory ``spec.repoDir`` names inside ``checkout``, symlinks resolved.

    ``repo_dir`` is relative to the top of the checkout (None or "" or "." is the top). The
    result is the real path, so the program runs where the check was made.

    Raises:
        ProgramDirError: the path leaves the checkout (through ``..`` or a symlink, which
            is a property of the commit), does not exist, is not a directory, or is a
            symlink loop. The message names ``spec.repoDir`` and the fix.
    """
    root = checkout.resolve()
    relative = PurePosixPath(repo_dir or ".")
    try:
        target = (root / relative).resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise _invalid_repo_dir(relative, "is a symlink loop") from None
    if relative.is_absolute() or not target.is_relative_to(root):
        raise _invalid_repo_dir(relative, "leads outside the repository (through .. or a symlink)")
    if not target.is_dir():
        problem = "does not exist in the repository at this commit, or is not a directory"
        raise _invalid_repo_dir(relative, problem)
    return target


def _invalid_repo_dir(relative: PurePosixPath, problem: str) -> ProgramDirError:
    return ProgramDirError(
        f"spec.repoDir {str(relative)!r} {problem}: point spec.repoDir at a directory inside"
        " the repository that holds Pulumi.yaml (or commit that directory)"
    )
