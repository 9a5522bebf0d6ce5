"""The run's job document: what a run that lays its own source out is asked to do, typed.

Role: the one contract across the runner seam. The reconciler builds a ``JobDocument``
from a Stack; ``encode`` makes it the JSON a run pod (or the agent runner's child) gets in
``PSO_JOB``; the agent decodes it back, equal to what was built. Every field is named
once, here; nothing on either side reads the JSON by key.

The program's source is one of three (``ProgramSource``): a git commit to check out
(``GitCheckout``), a Flux artifact to verify and unpack (``FluxArtifact``), or a Program
rendered to a project file (``RenderedProject``); each carries what laying it out needs
and the program's directory in it. Values that may be secret travel as ``ValueRef``: the
name of a variable the kubelet fills from a Secret key (``env``), or the value itself when
the Stack's spec holds it literally (``value``). So the document never holds a secret
value, and is safe to put in a pod spec.

Guarantees: ``JobDocument.decode(doc.encode()) == doc`` for every document; ``decode``
raises ``JobDocumentError`` (a ``ValueError``) for anything else: a missing or mistyped
field, two sources, an unknown source kind, a reference with both or neither of ``env``
and ``value``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from workspace.runner.job import RunJob
from workspace.runner.types import UpdateRequest

_T = TypeVar("_T")


class JobDocumentError(ValueError):
    """A job document that ``JobDocument.encode`` did not write (the message says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValueRef:
    """A value the run needs: a variable filled from a Secret key (``env``) or a literal."""

    env: str | None = None
    value: str | None = None

    def __post_init__(self) -> None:
        """Exactly one of ``env`` and ``value``."""
        if (self.env is None) == (self.value is None):
            msg = "a reference has exactly one of env and value"
            raise JobDocumentError(msg)

    def encode(self) -> dict[str, str]:
        """``{"env": name}`` or ``{"value": value}``."""
        return {"env": self.env} if self.env is not None else {"value": str(self.value)}

    @classmethod
    def decode(cls, raw: object) -> ValueRef:
        """The reference ``encode`` wrote (``JobDocumentError`` otherwise)."""
        if not isinstance(raw, dict) or set(raw) not in ({"env"}, {"value"}):
            msg = f"a reference is {{'env': name}} or {{'value': value}}, not {raw!r:.80}"
            raise JobDocumentError(msg)
        env, value = _optional(raw.get("env"), "env"), _optional(raw.get("value"), "value")
        return cls(env=env, value=value)


@dataclass(frozen=True, slots=True)
class GitCheckout:
    """A git commit of ``repo`` to check out (a shallow clone with ``shallow``).

    ``dir`` is the program's directory in it (``spec.repoDir``; None: the root).
    """

    repo: str
    commit: str
    dir: str | None = None
    shallow: bool = False

    FIELD: ClassVar[str] = "spec.repoDir"  # the field naming ``dir``


@dataclass(frozen=True, slots=True)
class FluxArtifact:
    """A Flux source's artifact: downloaded from ``url``, verified against ``digest``.

    ``revision`` is Flux's name for it; ``dir`` the program's directory in it
    (``spec.fluxSource.dir``; None: the root).
    """

    url: str
    digest: str
    revision: str
    dir: str | None = None

    FIELD: ClassVar[str] = "spec.fluxSource.dir"


@dataclass(frozen=True, slots=True)
class RenderedProject:
    """A Program rendered to a project file (``Pulumi.yaml``); ``revision`` names it."""

    project: str
    revision: str

    FIELD: ClassVar[str] = "spec.programRef"

    @property
    def dir(self) -> None:
        """The program is the project file's directory."""
        return None


ProgramSource = GitCheckout | FluxArtifact | RenderedProject
"""Where the run's program comes from; laying it out is ``workspace.runner.layout.lay_out``."""


@dataclass(frozen=True, slots=True)
class JobDocument:
    """One operation's job, with no secret value in it (see the module docstring).

    ``git_auth`` holds the gitAuth's values by their ``GitCredentials`` names (only the
    checkout gets their variables); ``env`` the plain variables the operator sets
    (``PULUMI_BACKEND_URL``); the rest are the Stack's spec as the run uses it.
    """

    source: ProgramSource
    stack: str
    git_auth: Mapping[str, ValueRef] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    env_refs: Mapping[str, ValueRef] = field(default_factory=dict)
    config: Mapping[str, str] = field(default_factory=dict)
    secret_config: Mapping[str, ValueRef] = field(default_factory=dict)
    secrets_provider: str | None = None
    refresh: bool = False
    expect_no_refresh_changes: bool = False
    targets: tuple[str, ...] = ()
    target_dependents: bool = False
    run_program: bool = False
    environments: tuple[str, ...] = ()
    use_local_stack_only: bool = False
    message: str = ""

    def request(  # noqa: PLR0913 - what the document does not hold, keyword-only
        self,
        work_dir: Path,
        *,
        env: Mapping[str, str],
        secret_config: Mapping[str, str],
        preview: bool,
        pulumi_home: Path | None = None,
        secret_env: frozenset[str] | None = None,
        job: RunJob | None = None,
    ) -> UpdateRequest:
        """The runner's request for this document: every field of the spec taken once.

        ``env`` and ``secret_config`` are the values (resolved where the run happens, or
        empty for a request that carries ``job`` instead); the rest is ``UpdateRequest``'s.
        """
        return UpdateRequest(
            work_dir=work_dir,
            stack=self.stack,
            env=env,
            config=self.config,
            secret_config=secret_config,
            secrets_provider=self.secrets_provider,
            refresh=self.refresh,
            expect_no_refresh_changes=self.expect_no_refresh_changes,
            preview=preview,
            targets=self.targets,
            use_local_stack_only=self.use_local_stack_only,
            message=self.message,
            pulumi_home=pulumi_home,
            job=job,
            target_dependents=self.target_dependents,
            run_program=self.run_program,
            environments=self.environments,
            secret_env=secret_env,
        )

    def encode(self) -> str:
        """The document as compact JSON with sorted keys (the same text for equal ones)."""
        body: dict[str, Any] = {
            "source": _encode_source(self.source),
            "stack": self.stack,
            "gitAuth": _refs(self.git_auth),
            "env": dict(self.env),
            "envRefs": _refs(self.env_refs),
            "config": dict(self.config),
            "secretConfig": _refs(self.secret_config),
            "secretsProvider": self.secrets_provider,
            "refresh": self.refresh,
            "expectNoRefreshChanges": self.expect_no_refresh_changes,
            "targets": list(self.targets),
            "targetDependents": self.target_dependents,
            "runProgram": self.run_program,
            "environments": list(self.environments),
            "useLocalStackOnly": self.use_local_stack_only,
            "message": self.message,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> JobDocument:
        """The document ``encode`` wrote (``JobDocumentError`` for anything else)."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            msg = f"the job document is not JSON: {err}"
            raise JobDocumentError(msg) from None
        if not isinstance(raw, dict):
            msg = "the job document is a JSON object"
            raise JobDocumentError(msg)
        return cls(
            source=_decode_source(raw.get("source")),
            stack=_text(raw.get("stack"), "stack"),
            git_auth=_decode_refs(raw.get("gitAuth"), "gitAuth"),
            env=_strings(raw.get("env"), "env"),
            env_refs=_decode_refs(raw.get("envRefs"), "envRefs"),
            config=_strings(raw.get("config"), "config"),
            secret_config=_decode_refs(raw.get("secretConfig"), "secretConfig"),
            secrets_provider=_optional(raw.get("secretsProvider"), "secretsProvider"),
            refresh=_flag(raw, "refresh"),
            expect_no_refresh_changes=_flag(raw, "expectNoRefreshChanges"),
            targets=_texts(raw.get("targets"), "targets"),
            target_dependents=_flag(raw, "targetDependents"),
            run_program=_flag(raw, "runProgram"),
            environments=_texts(raw.get("environments"), "environments"),
            use_local_stack_only=_flag(raw, "useLocalStackOnly"),
            message=_text(raw.get("message"), "message"),
        )


def _encode_source(source: ProgramSource) -> dict[str, Any]:
    if isinstance(source, GitCheckout):
        git = {"repo": source.repo, "commit": source.commit, "dir": source.dir}
        return {"git": {**git, "shallow": source.shallow}}
    if isinstance(source, FluxArtifact):
        artifact = {"url": source.url, "digest": source.digest, "revision": source.revision}
        return {"artifact": {**artifact, "dir": source.dir}}
    return {"project": {"project": source.project, "revision": source.revision}}


def _decode_source(raw: object) -> ProgramSource:
    if not isinstance(raw, dict) or len(raw) != 1:
        msg = "the job's source is one of git, artifact and project"
        raise JobDocumentError(msg)
    [(kind, body)] = raw.items()
    if not isinstance(body, dict):
        msg = f"the job's {kind} source is an object"
        raise JobDocumentError(msg)
    if kind == "git":
        return GitCheckout(
            repo=_text(body.get("repo"), "source.git.repo"),
            commit=_text(body.get("commit"), "source.git.commit"),
            dir=_optional(body.get("dir"), "source.git.dir"),
            shallow=_flag(body, "shallow"),
        )
    if kind == "artifact":
        return FluxArtifact(
            url=_text(body.get("url"), "source.artifact.url"),
            digest=_text(body.get("digest"), "source.artifact.digest"),
            revision=_text(body.get("revision"), "source.artifact.revision"),
            dir=_optional(body.get("dir"), "source.artifact.dir"),
        )
    if kind == "project":
        return RenderedProject(
            project=_text(body.get("project"), "source.project.project"),
            revision=_text(body.get("revision"), "source.project.revision"),
        )
    msg = f"the job's source is one of git, artifact and project, not {kind!r}"
    raise JobDocumentError(msg)


def _refs(refs: Mapping[str, ValueRef]) -> dict[str, dict[str, str]]:
    return {name: ref.encode() for name, ref in refs.items()}


def _decode_refs(raw: object, name: str) -> dict[str, ValueRef]:
    return _mapping(raw, name, ValueRef.decode)


def _strings(raw: object, name: str) -> dict[str, str]:
    return _mapping(raw, name, lambda value: _text(value, name))


def _mapping(raw: object, name: str, each: Callable[[object], _T]) -> dict[str, _T]:
    if not isinstance(raw, dict):
        msg = f"the job's {name} is an object"
        raise JobDocumentError(msg)
    return {str(key): each(value) for key, value in raw.items()}


def _texts(raw: object, name: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        msg = f"the job's {name} is a list"
        raise JobDocumentError(msg)
    return tuple(_text(value, name) for value in raw)


def _flag(raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name)
    if not isinstance(value, bool):
        msg = f"the job's {name} is true or false"
        raise JobDocumentError(msg)
    return value


def _optional(value: object, name: str) -> str | None:
    return None if value is None else _text(value, name)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        msg = f"the job's {name} is a string"
        raise JobDocumentError(msg)
    return value
