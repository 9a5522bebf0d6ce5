"""Everything a run needs before the runner gets it: credentials, commit, Secrets, checkout.

``Preparer`` resolves, in the order the reconciler needs them: the git credentials and the
commit (before deciding whether a run is due), the Secrets of the run's environment and
config (before it is reported started: a missing Secret stalls the Stack once instead of
flapping with each write), then checks the commit out and builds the ``UpdateRequest``.
Secret values go only into the request; they are never logged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from controller.cache import ObjectKey
from controller.clock import parse_time
from reconcile import backend as backends
from reconcile import tenancy
from reconcile.collaborators import SecretSource, Source
from reconcile.context import Inputs, Pass, Plan, Settings
from reconcile.decide import NEW_GENERATION
from reconcile.spec import GitAuth, ResourceRef, StackSpec
from workspace.runner import RunJob, SecretEnvNames, UpdateRequest
from workspace.runner.job import GIT_ENV_PREFIX
from workspace.source import GitCredentials


class Preparer:
    """Prepares runs of Stacks from ``source`` under ``settings.work_root``."""

    def __init__(self, source: Source, settings: Settings) -> None:
        """Fetch programs from ``source``; lay out each Stack's directory per ``settings``."""
        self._source, self._settings = source, settings

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

    def commit(self, spec: StackSpec, credentials: GitCredentials | None) -> str:
        """The commit to deploy: the pinned one, else the branch's (``SourceError``)."""
        if spec.commit:
            return spec.commit
        return self._source.resolve(str(spec.project_repo), str(spec.branch), credentials)

    def inputs(self, key: ObjectKey, spec: StackSpec, secrets: SecretSource) -> Inputs:
        """Resolve the Secrets a run needs (``MissingSecretError`` when one is missing)."""
        env = secrets.resolve_all(spec.env_refs)
        backend = self._settings.backend(key, spec)
        if backend:
            env["PULUMI_BACKEND_URL"] = backend
        return Inputs(env, secrets.resolve_all(spec.secrets_ref), backend)

    def request(self, at: Pass, plan: Plan) -> UpdateRequest:
        """Check the source out and build the runner's request.

        With ``settings.remote_runs`` nothing is checked out: the request carries a
        ``RunJob`` (see ``job``) and no secret value.

        Raises:
            SourceError: the checkout failed.
            ProgramDirError: ``spec.repoDir`` is missing or leaves the checkout.
        """
        key = at.key
        if self._settings.remote_runs:
            return self._remote_request(at, plan)
        spec, observed = plan.spec, plan.observed
        stack_dir = self._settings.stack_dir(key)
        source = stack_dir / "source"
        source.parent.mkdir(parents=True, exist_ok=True)
        self._source.checkout(str(spec.project_repo), source, observed.commit, plan.credentials)
        local = backends.local_directory(plan.inputs.backend or "")
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        message = _message(key, plan)
        return UpdateRequest(
            work_dir=self._source.program_dir(source, spec.repo_dir),
            stack=spec.stack,
            env=plan.inputs.env,
            config=dict(spec.config),
            secret_config=plan.inputs.secret_config,
            secrets_provider=spec.secrets_provider,
            refresh=spec.refresh,
            expect_no_refresh_changes=spec.expect_no_refresh_changes,
            preview=spec.preview,
            targets=spec.targets,
            use_local_stack_only=spec.use_local_stack_only,
            message=message,
            pulumi_home=stack_dir / "home",
        )

    def _remote_request(self, at: Pass, plan: Plan) -> UpdateRequest:
        """The request of a run elsewhere: the job, and no checkout or secret value.

        Raises:
            RemoteSpecError: a ``file://`` backend that would live and die with the pod, or
                a pod the operator's tenancy rules refuse.
        """
        spec = plan.spec
        _check_backend_volume(plan.inputs.backend, spec)
        refused = tenancy.refusal(spec, self._settings.tenancy)
        if refused is not None:  # checked before; a run pod must never be built without it
            raise RemoteSpecError(refused)
        return UpdateRequest(
            work_dir=Path(WORKSPACE_SOURCE),
            stack=spec.stack,
            env={},
            config=dict(spec.config),
            secrets_provider=spec.secrets_provider,
            refresh=spec.refresh,
            expect_no_refresh_changes=spec.expect_no_refresh_changes,
            preview=spec.preview,
            targets=spec.targets,
            use_local_stack_only=spec.use_local_stack_only,
            message=_message(at.key, plan),
            job=self.job(at, plan),
        )

    def job(self, at: Pass, plan: Plan) -> RunJob:
        """The run pod's job for ``plan``: every Secret value as a variable the kubelet fills.

        Literal refs go into the job as values (they are in the Stack's spec already). The
        git credentials get variables of their own, which only the checkout container has.
        """
        spec, names, git_names = plan.spec, SecretEnvNames(), SecretEnvNames(GIT_ENV_PREFIX)

        def ref(value: ResourceRef, pool: SecretEnvNames = names) -> dict[str, str]:
            if value.secret is not None:
                return {"env": pool.name(value.secret.name, value.secret.key)}
            return {"value": str(value.literal)}

        def git_ref(value: ResourceRef) -> dict[str, str]:
            return ref(value, git_names)

        env = {"PULUMI_BACKEND_URL": plan.inputs.backend} if plan.inputs.backend else {}
        document = {
            "repo": str(spec.project_repo),
            "commit": plan.observed.commit,
            "repoDir": spec.repo_dir,
            "gitAuth": _git_auth(spec.git_auth, git_ref),
            "stack": spec.stack,
            "env": env,
            "envRefs": {name: ref(value) for name, value in spec.env_refs.items()},
            "config": dict(spec.config),
            "secretConfig": {name: ref(value) for name, value in spec.secrets_ref.items()},
            "secretsProvider": spec.secrets_provider,
            "refresh": spec.refresh,
            "expectNoRefreshChanges": spec.expect_no_refresh_changes,
            "targets": list(spec.targets),
            "useLocalStackOnly": spec.use_local_stack_only,
            "message": _message(at.key, plan),
        }
        workspace = spec.workspace
        return RunJob(
            namespace=at.key.namespace,
            stack_name=at.key.name,
            stack_uid=str(at.obj["metadata"].get("uid") or ""),
            generation=at.generation,
            commit=plan.observed.commit,
            service_account=spec.service_account_name,
            document=json.dumps(document, sort_keys=True, separators=(",", ":")),
            secret_env=names.variables(),
            git_env=git_names.variables(),
            security_profile=workspace.security_profile,
            image=workspace.image,
            image_pull_policy=workspace.image_pull_policy,
            overrides=workspace.pod_json,
            timeout=self._settings.timeout(spec),
            changed_at=spec_written(at.obj) if plan.decision.why == NEW_GENERATION else None,
        )


WORKSPACE_SOURCE = "/workspace/source"


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
    return (
        f"pulumi-stack-operator: {key} generation {observed.generation} "
        f"commit {observed.commit[:12]}"
    )


def _git_auth(
    auth: GitAuth | None, ref: Callable[[ResourceRef], dict[str, str]]
) -> dict[str, dict[str, str]]:
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
