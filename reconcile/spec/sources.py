"""The program source of a Stack and the PKO v2 fields around it.

Role: read the three program sources (``projectRepo`` with ``commit`` or ``branch``,
``fluxSource``, ``programRef``), which are exclusive, the directory inside a source
(``repoDir``, ``fluxSource.dir``), ``configRef`` and ``environment``, refusing bad values
with a ``SpecError`` that names the field and the fix.

Guarantees: exactly one source comes out (``Source``); a directory never leaves its source
(a leading ``/`` means the source's root, as PKO reads it; ``..`` is refused) and comes out
relative; a pinned commit is a full SHA; names are what the API server accepts for the
objects they name, so a reference can never reach another namespace or an invalid object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final

from reconcile.spec.config import config_key
from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    is_set,
    read_bool,
    read_map,
    read_object,
    read_string,
    read_strings,
    required_string,
)
from reconcile.spec.model import (
    FLUX_API_VERSIONS,
    FLUX_KINDS,
    ConfigMapKeyRef,
    FluxSourceRef,
    SpecError,
)
from reconcile.spec.names import is_data_key, subdomain
from reconcile.spec.repo_url import check_repo_url
from workspace.gitref import branch_name

FULL_SHA_DIGITS: Final = (40, 64)
"""The lengths of a full commit SHA: SHA-1, and SHA-256 repositories'."""

_HEX: Final = re.compile(r"[0-9a-fA-F]+")
_GIT_MIN_ABBREV: Final = 4  # git resolves no shorter abbreviation
_QUOTED_CHARS: Final = 72

_ESC_PART: Final = r"[A-Za-z0-9_][-A-Za-z0-9_.]*"
_ENVIRONMENT: Final = re.compile(rf"{_ESC_PART}(/{_ESC_PART}){{0,2}}(@[-A-Za-z0-9_.]+)?")


@dataclass(frozen=True, slots=True)
class Source:
    """The one program source a spec names (the others are None)."""

    repo: str | None = None
    commit: str | None = None
    branch: str | None = None
    flux: FluxSourceRef | None = None
    program: str | None = None


def read_source(root: Mapping[str, Any]) -> Source:
    """The spec's program source: exactly one of projectRepo, fluxSource, programRef.

    Raises:
        SpecError: none or several are set, or the one set is invalid.
    """
    given = [name for name in ("projectRepo", "fluxSource", "programRef") if is_set(root.get(name))]
    if not given:
        problem = (
            "a program source is required: set projectRepo with a commit or a branch, "
            "fluxSource, or programRef"
        )
        raise SpecError(SPEC / "projectRepo", problem)
    if len(given) > 1:
        problem = f"{' and '.join(given)} are exclusive: set exactly one program source"
        raise SpecError(SPEC / given[1], problem)
    if given[0] == "fluxSource":
        _refuse_git_fields(root, "fluxSource")
        return Source(flux=_flux_source(root["fluxSource"]))
    if given[0] == "programRef":
        _refuse_git_fields(root, "programRef")
        return Source(program=_program_ref(root["programRef"]))
    return _git(root)


def _refuse_git_fields(root: Mapping[str, Any], source: str) -> None:
    for name in ("commit", "branch", "repoDir", "gitAuth"):
        if is_set(root.get(name)):
            problem = f"applies to projectRepo only: remove it (the program comes from {source})"
            raise SpecError(SPEC / name, problem)


def _git(root: Mapping[str, Any]) -> Source:
    repo = str(read_string(root, SPEC, "projectRepo"))
    commit = read_string(root, SPEC, "commit")
    branch = read_string(root, SPEC, "branch")
    if commit is not None and branch is not None:
        problem = "commit and branch are mutually exclusive: set only one of them"
        raise SpecError(SPEC / "branch", problem)
    check_repo_url(repo)
    if commit is not None:
        return Source(repo=repo, commit=_commit(commit))
    if branch is not None:
        return Source(repo=repo, branch=_branch(branch))
    problem = "projectRepo requires a commit or a branch: set exactly one of them"
    raise SpecError(SPEC / "projectRepo", problem)


def _commit(commit: str) -> str:
    """``commit`` as a full SHA in lower case.

    Only a full SHA pins a commit: the checkout fetches a commit by its id alone (a shallow
    fetch cannot look an abbreviation up), an abbreviation can become ambiguous as the
    repository grows, and status records the SHA the run deployed. The CRD takes any string
    (as PKO's does), so that this message is the one a user sees.
    """
    digits = len(commit) if _HEX.fullmatch(commit) else 0
    if digits in FULL_SHA_DIGITS:
        return commit.lower()
    rev = commit if _GIT_MIN_ABBREV <= digits < min(FULL_SHA_DIGITS) else "<rev>"
    fix = (
        "write the full SHA, 40 hex digits (64 in a SHA-256 repository), as"
        f" git rev-parse {rev} prints it in a clone of the repository"
    )
    if not digits:
        what, fix = "is not a commit SHA", f"{fix}; to follow a branch, set spec.branch instead"
    elif digits < min(FULL_SHA_DIGITS):
        what = f"is an abbreviated SHA ({digits} hex digits)"
    else:
        what = f"is not a full SHA ({digits} hex digits)"
    raise SpecError(SPEC / "commit", f"{_quoted(commit)} {what}: {fix}")


def _quoted(value: str) -> str:
    """``value`` quoted for a message, its end cut past ``_QUOTED_CHARS`` characters."""
    if len(value) <= _QUOTED_CHARS:
        return repr(value)
    return f"{value[:_QUOTED_CHARS]!r}..."


def _branch(branch: str) -> str:
    if branch.removeprefix("refs/heads/").startswith("refs/"):
        problem = "only branches can be tracked (main or refs/heads/main): pin tags with commit"
        raise SpecError(SPEC / "branch", problem)
    name = branch_name(branch)
    if name is None:
        raise SpecError(SPEC / "branch", f"{branch!r} is not a valid git branch name")
    return name


def _flux_source(raw: object) -> FluxSourceRef:
    path = SPEC / "fluxSource"
    source = read_object(raw, path, frozenset({"sourceRef", "dir"}))
    ref_path = path / "sourceRef"
    if not is_set(source.get("sourceRef")):
        raise SpecError(ref_path, "is required: the apiVersion, kind and name of a Flux source")
    ref = read_object(source["sourceRef"], ref_path, frozenset({"apiVersion", "kind", "name"}))
    api_version = required_string(ref, ref_path, "apiVersion")
    if api_version not in FLUX_API_VERSIONS:
        problem = f"{api_version!r} is not a Flux source API: use {' or '.join(FLUX_API_VERSIONS)}"
        raise SpecError(ref_path / "apiVersion", problem)
    kind = required_string(ref, ref_path, "kind")
    if kind not in FLUX_KINDS:
        problem = f"{kind!r} is not a Flux source kind: use {', '.join(FLUX_KINDS)}"
        raise SpecError(ref_path / "kind", problem)
    name = subdomain(required_string(ref, ref_path, "name"), ref_path / "name", kind)
    directory = read_directory(source, path, "dir", "the artifact")
    return FluxSourceRef(api_version, kind, name, directory)


def _program_ref(raw: object) -> str:
    path = SPEC / "programRef"
    ref = read_object(raw, path, frozenset({"name"}))
    return subdomain(required_string(ref, path, "name"), path / "name", "Program")


def read_directory(obj: Mapping[str, Any], path: FieldPath, key: str, inside: str) -> str | None:
    """``obj[key]``, a directory inside ``inside``, relative to its top (None: the top).

    A leading ``/`` means the top of ``inside``, as PKO reads it (it joins the directory to
    the source's root): ``/app`` and ``app`` are the same directory.

    Raises:
        SpecError: a path with ``..`` components or a NUL.
    """
    raw = read_string(obj, path, key)
    if raw is None:
        return None
    parts = PurePosixPath(raw.lstrip("/") or ".")
    if ".." in parts.parts or "\x00" in raw:
        problem = f"must stay inside {inside}: remove the .. components"
        raise SpecError(path / key, problem)
    return None if str(parts) == "." else str(parts)


def read_config_ref(root: Mapping[str, Any]) -> dict[str, ConfigMapKeyRef]:
    """``spec.configRef``: config key → ConfigMap key, every key and name checked."""
    path = SPEC / "configRef"
    result = {}
    for key, raw in read_map(root, SPEC, "configRef").items():
        entry = path.entry(key)
        config_key(str(key), path)
        ref = read_object(raw, entry, frozenset({"name", "key", "json"}))
        name = subdomain(required_string(ref, entry, "name"), entry / "name", "ConfigMap")
        data_key = required_string(ref, entry, "key")
        if not is_data_key(data_key):
            problem = f"{data_key!r} is not a ConfigMap key: use letters, digits, -, _ and ."
            raise SpecError(entry / "key", problem)
        result[str(key)] = ConfigMapKeyRef(name, data_key, read_bool(ref, entry, "json"))
    return result


def read_environments(root: Mapping[str, Any]) -> tuple[str, ...]:
    """``spec.environment``: Pulumi ESC environment names (``[project/]env[@version]``)."""
    names = read_strings(root, SPEC, "environment")
    for i, name in enumerate(names):
        if not _ENVIRONMENT.fullmatch(name):
            problem = f"{name!r} is not an ESC environment name: use project/environment"
            raise SpecError((SPEC / "environment").entry(i), problem)
        if name in names[:i]:
            problem = f"{name!r} is listed twice: remove one"
            raise SpecError((SPEC / "environment").entry(i), problem)
    return names
