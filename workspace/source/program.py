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

    ``repo_dir`` is relative to the top of the checkout (None or "" or "." is the top); a
    leading ``/`` means the top too, as PKO reads it (``/app`` is ``app``). The result is
    the real path, so the program runs where the check was made. ``field`` is the spec
    field the messages name (``spec.fluxSource.dir`` for an unpacked Flux artifact).

    Raises:
        ProgramDirError: the path has a ``..`` component (refused as the spec's parser
            refuses it, wherever it leads), leaves the checkout through a symlink (a
            property of the commit), does not exist, is not a directory, or is a symlink
            loop. The message names ``field``, quotes ``repo_dir`` as given, and the fix.
    """
    root = checkout.resolve()
    given = repo_dir or "."
    relative = PurePosixPath(given.lstrip("/") or ".")
    if ".." in relative.parts:
        raise _invalid_repo_dir(field, given, "has a .. component, which is refused")
    try:
        target = (root / relative).resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise _invalid_repo_dir(field, given, "is a symlink loop") from None
    if not target.is_relative_to(root):
        raise _invalid_repo_dir(field, given, "leads outside the source (through a symlink)")
    if not target.is_dir():
        problem = "does not exist in the source at this revision, or is not a directory"
        raise _invalid_repo_dir(field, given, problem)
    return target


def _invalid_repo_dir(field: str, given: str, problem: str) -> ProgramDirError:
    return ProgramDirError(
        f"{field} {given!r} {problem}: point {field} at a directory inside"
        " the source that holds Pulumi.yaml (or add that directory to the source)"
    )
