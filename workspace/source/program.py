"""Where the program is: ``spec.repoDir`` (or ``fluxSource.dir``) inside a source, not outside."""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class ProgramDirError(ValueError):
    """``spec.repoDir`` does not name a directory inside the checkout (see ``program_dir``).

    Terminal, like an invalid spec (the Stack's reason is ``InvalidSpec``): only a new
    ``spec.repoDir`` or a new commit fixes it. The message starts with ``spec.repoDir``.
    Not a ``SourceError``: fetching the source succeeded.
    """


def program_dir(checkout: Path, repo_dir: str | None, field: str = "spec.repoDir") -> Path:
    """The directory ``field`` (``spec.repoDir``) names inside ``checkout``, symlinks resolved.

    ``repo_dir`` is relative to the top of the checkout (None or "" or "." is the top). The
    result is the real path, so the program runs where the check was made. ``field`` is the
    spec field the messages name (``spec.fluxSource.dir`` for an unpacked Flux artifact).

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
        raise _invalid_repo_dir(field, relative, "is a symlink loop") from None
    if relative.is_absolute() or not target.is_relative_to(root):
        problem = "leads outside the source (through .. or a symlink)"
        raise _invalid_repo_dir(field, relative, problem)
    if not target.is_dir():
        problem = "does not exist in the source at this revision, or is not a directory"
        raise _invalid_repo_dir(field, relative, problem)
    return target


def _invalid_repo_dir(field: str, relative: PurePosixPath, problem: str) -> ProgramDirError:
    return ProgramDirError(
        f"{field} {str(relative)!r} {problem}: point {field} at a directory inside"
        " the source that holds Pulumi.yaml (or add that directory to the source)"
    )
