"""workspace.source.program: spec.repoDir inside a real checkout with symlinks in and out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workspace.source.helpers import Repo
from workspace.source import ProgramDirError, SourceError, checkout, program_dir


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
    tip = upstream.commit({"infra/Pulumi.yaml": "name: p\n", "README": "hello\n"})
    work = tmp_path / "clone"
    checkout(url, work, commit=tip)
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
        pytest.param("infra/out/clone/infra", "infra", id="out-and-back-in"),
        pytest.param("/infra", "infra", id="from-the-root"),
        pytest.param("/", ".", id="the-root"),
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
        pytest.param("escape", "leads outside the source", id="symlink-to-sibling"),
        pytest.param("escape/sub", "leads outside the source", id="through-a-symlink"),
        pytest.param("etc", "leads outside the source", id="absolute-symlink"),
        pytest.param("up", "leads outside the source", id="symlink-to-parent"),
        pytest.param("infra/out", "leads outside the source", id="nested-symlink"),
        pytest.param("..", "has a .. component", id="dot-dot"),
        pytest.param("infra/../infra", "has a .. component", id="dot-dot-inside"),
        pytest.param("/etc", "leads outside the source", id="from-the-root-to-a-symlink-out"),
        pytest.param("nope", "does not exist in the source", id="missing"),
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
    assert "point spec.repoDir at a directory inside the source" in str(caught.value)


# -- without git: the path's form alone ---------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A source without git: ``infra/app/`` and nothing else, beside an ``outside/`` dir."""
    (tmp_path / "source" / "infra" / "app").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return tmp_path / "source"


@pytest.mark.parametrize(
    ("repo_dir", "expected"),
    [
        pytest.param("/infra/app", "infra/app", id="leading-slash"),
        pytest.param("//infra//app/", "infra/app", id="slashes"),
        pytest.param("/", ".", id="root"),
        pytest.param("./infra", "infra", id="dot-slash"),
    ],
)
def test_a_leading_slash_means_the_root_of_the_source(
    tree: Path, repo_dir: str, expected: str
) -> None:
    """As PKO reads it: ``/x`` is ``x`` at the top of the source, not ``/x`` on the host."""
    assert program_dir(tree, repo_dir) == (tree / expected).resolve()


@pytest.mark.parametrize("repo_dir", ["..", "../outside", "/../outside", "infra/../infra"])
def test_dot_dot_is_refused_wherever_it_leads(tree: Path, repo_dir: str) -> None:
    """A ``..`` component is refused as the parser refuses it, even one that stays inside.

    The message quotes the value as written and names the field it came from.
    """
    with pytest.raises(ProgramDirError) as caught:
        program_dir(tree, repo_dir, "spec.fluxSource.dir")
    message = str(caught.value)
    assert message.startswith(f"spec.fluxSource.dir {repo_dir!r} has a .. component")
    assert "point spec.fluxSource.dir at a directory inside the source" in message
