"""Everything a run needs before the runner gets it: credentials, revision, Secrets, source.

``Preparer`` resolves, in the order the reconciler needs them: the git credentials and the
revision (before deciding whether a run is due: a git commit, a Flux artifact, a rendered
Program), the Secrets and ConfigMap keys of the run's environment and config (before it is
reported started: a missing one stalls the Stack once instead of flapping with each write),
then lays the program out (a git checkout, a verified and unpacked Flux artifact, a written
``Pulumi.yaml``) and builds the ``UpdateRequest``. With runs in pods nothing is laid out
here: the run pod fetches its source itself, from references in its job. Secret values go
only into the request; they are never logged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from controller.cache import ObjectKey
from controller.clock import parse_time
from reconcile import backend as backends
from reconcile import sources, tenancy
from reconcile.collaborators import SecretSource, Source
from reconcile.context import Inputs, Pass, Plan, Settings
from reconcile.decide import NEW_GENERATION
from reconcile.resource import GROUP, KIND, VERSION
from reconcile.sources import Revision, SourceObjects
from reconcile.spec import GitAuth, ResourceRef, StackSpec
from workspace.runner import RunJob, SecretEnvNames, UpdateRequest
from workspace.runner.document import (
    FluxArtifact,
    GitCheckout,
    JobDocument,
    ProgramSource,
    RenderedProject,
    ValueRef,
)
from workspace.runner.job import GIT_ENV_PREFIX, SOURCE_DIR, WORKSPACE, Owner
from workspace.runner.layout import lay_out, program_in
from workspace.source import GitCredentials


class Preparer:
    """Prepares runs of Stacks from ``source`` under ``settings.work_root``."""

    def __init__(
        self, source: Source, settings: Settings, objects: SourceObjects | None = None
    ) -> None:
        """Fetch programs from ``source``; lay out each Stack's directory per ``settings``.

        ``objects`` are the caches of Flux sources and Programs (None: neither is watched).
        """
        self._source, self._settings = source, settings
        self._source_objects = objects

    @staticmethod
    def credentials(spec: StackSpec, secrets: SecretSource) -> GitCredentials | None:
        """The git credentials ``spec.gitAuth`` names (``MissingSecretError`` if missing)."""
        auth = spec.git_auth
        if auth is None:
            return None

        def value(ref: ResourceRef | None) -> str | None:
            return secrets.resolve(ref) if ref is not None else None

        return GitCredentials(
            token=value(auth.access_token),
            username=value(auth.username),
            password=value(auth.password),
            ssh_private_key=value(auth.ssh_private_key),
            ssh_passphrase=value(auth.ssh_password),
        )

    def revision(
        self, key: ObjectKey, spec: StackSpec, credentials: GitCredentials | None
    ) -> Revision:
        """What a run would deploy now.

        git: the pinned commit, else the branch's (``SourceError``); a Flux source: its
        artifact; a Program: its rendered project (``SourceNotReadyError`` while there is
        none, ``ProgramInvalidError`` for a Program that cannot render).
        """
        if spec.flux_source is not None:
            return sources.flux_revision(self._objects(), key.namespace, spec.flux_source)
        if spec.program_ref is not None:
            return sources.program_source(self._objects(), key.namespace, spec.program_ref)
        if spec.commit:
            return Revision(spec.commit)
        url = str(spec.project_repo)
        return Revision(self._source.resolve(url, str(spec.branch), credentials))

    def _objects(self) -> SourceObjects:
        if self._source_objects is None:
            msg = "this operator watches no Flux sources or Programs"
            raise sources.SourceNotReadyError(msg)
        return self._source_objects

    def inputs(self, key: ObjectKey, spec: StackSpec, secrets: SecretSource) -> Inputs:
        """Resolve the Secrets and ConfigMap keys a run needs.

        Raises ``MissingSecretError`` (``MissingConfigMapError`` for a ConfigMap) when one
        is missing.
        """
        env = secrets.resolve_all(spec.env_refs)
        backend = self._settings.backend(key, spec)
        if backend:
            env["PULUMI_BACKEND_URL"] = backend
        mapped = {name: secrets.config_value(ref) for name, ref in spec.config_ref.items()}
        return Inputs(env, secrets.resolve_all(spec.secrets_ref), backend, mapped)

    def request(self, at: Pass, plan: Plan) -> UpdateRequest:
        """Check the source out and build the runner's request.

        When the runner ``takes_job`` nothing is checked out: the request carries a
        ``RunJob`` (see ``job``) and no secret value.

        Raises:
            SourceError: the checkout failed.
            ProgramDirError: ``spec.repoDir`` is missing or leaves the checkout.
        """
        key = at.key
        if self._settings.runner_traits.takes_job:
            return self._remote_request(at, plan)
        spec = plan.spec
        stack_dir = self._settings.stack_dir(key)
        work_dir = self._lay_out(plan, stack_dir / SOURCE_DIR)
        local = backends.local_directory(plan.inputs.backend or "")
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        return self.document(at, plan).request(
            work_dir,
            env=plan.inputs.env,
            secret_config=plan.inputs.secret_config,
            preview=spec.preview,
            pulumi_home=stack_dir / "home",
            secret_env=frozenset(n for n, ref in spec.env_refs.items() if ref.secret is not None),
        )

    def _lay_out(self, plan: Plan, source: Path) -> Path:
        """Put the program's source at ``source``; the program's directory in it."""
        program = program_source(plan)
        lay_out(program, source, plan.credentials, self._source)
        return program_in(program, source, self._source)

    def _remote_request(self, at: Pass, plan: Plan) -> UpdateRequest:
        """The request of a run elsewhere: the job, and no checkout or secret value.

        Raises:
            RemoteSpecError: runs in pods only: a ``file://`` backend that would live and
                die with the pod, or a pod the operator's tenancy rules refuse.
        """
        spec = plan.spec
        if self._settings.runner_traits.in_pods:  # the pod's filesystem and its rights
            _check_backend_volume(plan.inputs.backend, spec)
            refused = tenancy.refusal(spec, self._settings.tenancy)
            if refused is not None:  # checked before; a run pod must never be built without it
                raise RemoteSpecError(refused)
        return self.document(at, plan).request(
            Path(WORKSPACE_SOURCE),
            env={},
            secret_config={},
            preview=spec.preview,
            job=self.job(at, plan),
        )

    def document(
        self,
        at: Pass,
        plan: Plan,
        names: SecretEnvNames | None = None,
        git_names: SecretEnvNames | None = None,
    ) -> JobDocument:
        """The run's job document: every Secret value a variable handed out by ``names``.

        Literal refs go in as values (they are in the Stack's spec already); the git
        credentials get variables of their own (``git_names``), which only the checkout
        container has.
        """
        spec = plan.spec
        names = names or SecretEnvNames()
        git_names = git_names or SecretEnvNames(GIT_ENV_PREFIX)

        def ref(value: ResourceRef, pool: SecretEnvNames = names) -> ValueRef:
            if value.secret is not None:
                return ValueRef(env=pool.name(value.secret.name, value.secret.key))
            return ValueRef(value=str(value.literal))

        def git_ref(value: ResourceRef) -> ValueRef:
            return ref(value, git_names)

        return JobDocument(
            source=program_source(plan),
            stack=spec.stack,
            git_auth=_git_auth(spec.git_auth, git_ref),
            env={"PULUMI_BACKEND_URL": plan.inputs.backend} if plan.inputs.backend else {},
            env_refs={name: ref(value) for name, value in spec.env_refs.items()},
            config=plan.inputs.config(spec),
            secret_config={name: ref(value) for name, value in spec.secrets_ref.items()},
            secrets_provider=spec.secrets_provider,
            refresh=spec.refresh,
            expect_no_refresh_changes=spec.expect_no_refresh_changes,
            targets=spec.targets,
            target_dependents=spec.target_dependents,
            run_program=spec.run_program,
            environments=spec.environments,
            use_local_stack_only=spec.use_local_stack_only,
            message=_message(at.key, plan),
        )

    def job(self, at: Pass, plan: Plan) -> RunJob:
        """The run pod's job for ``plan``: its document and the variables the kubelet fills.

        Raises:
            RemoteSpecError: a rendered Program too large to travel in the job.
        """
        names, git_names = SecretEnvNames(), SecretEnvNames(GIT_ENV_PREFIX)
        document = self.document(at, plan, names, git_names)
        spec = plan.spec
        _carried(document.source, spec)
        workspace = spec.workspace
        return RunJob(
            namespace=at.key.namespace,
            owner=Owner(
                f"{GROUP}/{VERSION}", KIND, at.key.name, str(at.obj["metadata"].get("uid") or "")
            ),
            generation=at.generation,
            commit=plan.observed.commit,
            service_account=spec.service_account_name,
            document=document.encode(),
            secret_env=names.variables(),
            git_env=git_names.variables(),
            security_profile=workspace.security_profile,
            image=workspace.image,
            image_pull_policy=workspace.image_pull_policy,
            overrides=workspace.pod_json,
            # A destroy at deletion keeps no pod: nothing would replace it.
            reclaim="Delete" if plan.decision.why == "delete" else spec.workspace_reclaim_policy,
            timeout=self._settings.timeout(spec),
            changed_at=spec_written(at.obj) if plan.decision.why == NEW_GENERATION else None,
        )


WORKSPACE_SOURCE = PurePosixPath(WORKSPACE) / SOURCE_DIR  # the run's source, in its pod

MAX_JOB_PROJECT_BYTES = 64 * 1024
"""Largest rendered Program a run pod's job carries (UTF-8 bytes).

The job travels in one environment variable of the run pod, which Linux caps at 128 KiB
with everything else the job holds (config included).
"""


def program_source(plan: Plan) -> ProgramSource:
    """Where the run's program comes from: a rendered Program, a Flux artifact or git."""
    spec, revision = plan.spec, plan.revision
    if revision is not None and revision.project is not None:
        return RenderedProject(revision.project, revision.commit)
    if revision is not None and revision.artifact is not None:
        artifact, flux = revision.artifact, spec.flux_source
        dir_ = flux.dir if flux else None
        return FluxArtifact(artifact.url, artifact.digest, revision.commit, dir_)
    repo = str(spec.project_repo)
    return GitCheckout(repo, plan.observed.commit, spec.repo_dir, shallow=spec.shallow)


def _carried(source: ProgramSource, spec: StackSpec) -> None:
    """Refuse a ``source`` that does not fit in a run pod's job.

    Raises:
        RemoteSpecError: a rendered Program too large to travel in the job.
    """
    if isinstance(source, RenderedProject):
        size = len(source.project.encode())
        if size > MAX_JOB_PROJECT_BYTES:
            msg = (
                f'spec.programRef: Program "{spec.program_ref}" renders to {size} bytes, more '
                f"than the {MAX_JOB_PROJECT_BYTES} a run pod's job carries: split the Program, or "
                "keep the program in git (projectRepo) or a Flux source (fluxSource)"
            )
            raise RemoteSpecError(msg)


class RemoteSpecError(ValueError):
    """A spec that cannot work with runs in pods (``str``: the field and the fix)."""


def _check_backend_volume(backend: str | None, spec: StackSpec) -> None:
    """Refuse a ``file://`` backend outside every volume the Stack mounts in its run pods."""
    if not backend or not backend.startswith("file://"):
        return
    path = PurePosixPath(backend.removeprefix("file://").split("?", 1)[0] or "/")
    mounts = [
        PurePosixPath(str(mount.get("mountPath")))
        for mount in spec.workspace.overrides().get("volumeMounts", [])
    ]
    if any(path == mount or mount in path.parents for mount in mounts):
        return
    field = "spec.backend" if spec.backend else "the operator's --default-backend"
    msg = (
        f"{field}: {backend} would be in the run pod's own filesystem (--runner=pod) and "
        "the stack's state would go with the pod; mount a volume at it (or a parent) "
        "through spec.workspaceTemplate.spec.podTemplate (a persistentVolumeClaim) or use "
        "a backend outside the pod"
    )
    raise RemoteSpecError(msg)


def spec_written(obj: Mapping[str, Any]) -> datetime | None:
    """When the Stack's spec was last written: its newest managedFields entry touching it.

    Seconds precision (the API server's); None when no entry says.
    """
    times = [
        parse_time(entry.get("time"))
        for entry in obj.get("metadata", {}).get("managedFields") or ()
        if not entry.get("subresource") and "f:spec" in (entry.get("fieldsV1") or {})
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _message(key: ObjectKey, plan: Plan) -> str:
    observed = plan.observed
    if plan.spec.source_kind == "git":
        what = f"commit {observed.commit[:12]}"
    else:
        what = f"revision {sources.short_revision(observed.commit)}"
    return f"pulumi-stack-operator: {key} generation {observed.generation} {what}"


def _git_auth(auth: GitAuth | None, ref: Callable[[ResourceRef], ValueRef]) -> dict[str, ValueRef]:
    """``GitCredentials`` field → ref of the winning gitAuth method."""
    if auth is None:
        return {}
    fields = {
        "token": auth.access_token,
        "username": auth.username,
        "password": auth.password,
        "ssh_private_key": auth.ssh_private_key,
        "ssh_passphrase": auth.ssh_password,
    }
    return {name: ref(value) for name, value in fields.items() if value is not None}
