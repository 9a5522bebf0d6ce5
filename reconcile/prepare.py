"""Everything a run needs before the runner gets it: credentials, commit, Secrets, checkout.

``Preparer`` resolves, in the order the reconciler needs them: the git credentials and the
commit (before deciding whether a run is due), the Secrets of the run's environment and
config (before it is reported started: a missing Secret stalls the Stack once instead of
flapping with each write), then checks the commit out and builds the ``UpdateRequest``.
Secret values go only into the request; they are never logged.
"""

from __future__ import annotations

from controller.cache import ObjectKey
from reconcile import backend as backends
from reconcile.collaborators import SecretSource, Source
from reconcile.context import Inputs, Plan, Settings
from reconcile.runner import UpdateRequest
from reconcile.source import GitCredentials
from reconcile.spec import ResourceRef, StackSpec


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

    def request(self, key: ObjectKey, plan: Plan) -> UpdateRequest:
        """Check the source out and build the runner's request.

        Raises:
            SourceError: the checkout failed.
            ProgramDirError: ``spec.repoDir`` is missing or leaves the checkout.
        """
        spec, observed = plan.spec, plan.observed
        stack_dir = self._settings.stack_dir(key)
        source = stack_dir / "source"
        source.parent.mkdir(parents=True, exist_ok=True)
        self._source.checkout(str(spec.project_repo), source, observed.commit, plan.credentials)
        local = backends.local_directory(plan.inputs.backend or "")
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
        message = (
            f"pulumi-stack-operator: {key} generation {observed.generation} "
            f"commit {observed.commit[:12]}"
        )
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
