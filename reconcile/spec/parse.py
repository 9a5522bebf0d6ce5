"""``parse_spec``: a raw Stack ``spec`` in, a validated ``StackSpec`` out.

Role: the assembly. It knows which fields exist (``SPEC_FIELDS``), refuses PKO's deprecated
fields, reads prerequisites, periods and flags itself, and delegates the program source
(``sources``), config, refs, the stack/backend pair and the run pod's settings to their
modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from reconcile.spec.backend_rules import read_secrets_provider, read_stack_and_backend
from reconcile.spec.config import check_no_overlap, config_key, read_config
from reconcile.spec.durations import parse_go_duration
from reconcile.spec.fields import (
    SPEC,
    FieldPath,
    is_set,
    read_bool,
    read_int,
    read_list,
    read_object,
    read_string,
    read_strings,
    required_string,
)
from reconcile.spec.model import (
    DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
    MIN_RESYNC_SECONDS,
    RECLAIM_POLICIES,
    Prerequisite,
    ReclaimPolicy,
    SpecError,
    StackSpec,
)
from reconcile.spec.resource_refs import env_name, read_git_auth, read_refs
from reconcile.spec.sources import (
    read_config_ref,
    read_directory,
    read_environments,
    read_source,
)
from reconcile.spec.workspace import read_service_account, read_workspace

_SUPPORTED: Final = frozenset(
    {
        "stack",
        "backend",
        "projectRepo",
        "commit",
        "branch",
        "repoDir",
        "gitAuth",
        "config",
        "secretsRef",
        "envRefs",
        "secretsProvider",
        "refresh",
        "expectNoRefreshChanges",
        "preview",
        "targets",
        "useLocalStackOnly",
        "destroyOnFinalize",
        "prerequisites",
        "resyncFrequencySeconds",
        "continueResyncOnCommitMatch",
        "retryOnUpdateConflict",
        "retryMaxBackoffDurationSeconds",
        "suspend",
        "timeoutSeconds",
        "serviceAccountName",
        "workspaceTemplate",
        "fluxSource",
        "programRef",
        "shallow",
        "configRef",
        "targetDependents",
        "runProgram",
        "environment",
        "updateTemplate",
        "workspaceReclaimPolicy",
    }
)

DEPRECATED_FIELDS: Final = MappingProxyType(
    {
        "accessTokenSecret": "envRefs.PULUMI_ACCESS_TOKEN with type: Secret",
        "envs": "envRefs (one entry per variable)",
        "envSecrets": "envRefs with type: Secret (one entry per variable)",
        "secrets": "secretsRef with type: Secret (plaintext secrets in a Stack are refused)",
        "gitAuthSecret": "gitAuth",
    }
)
"""PKO's deprecated spec fields, refused here, and what to use instead."""

SPEC_FIELDS: Final = _SUPPORTED | DEPRECATED_FIELDS.keys()
"""Every spec field the parser knows (supported and deprecated).

The CRD declares exactly these, so that none is pruned silently.
"""

_FLAGS: Final = MappingProxyType(
    {
        "refresh": "refresh",
        "expect_no_refresh_changes": "expectNoRefreshChanges",
        "preview": "preview",
        "use_local_stack_only": "useLocalStackOnly",
        "destroy_on_finalize": "destroyOnFinalize",
        "continue_resync_on_commit_match": "continueResyncOnCommitMatch",
        "retry_on_update_conflict": "retryOnUpdateConflict",
        "suspend": "suspend",
        "shallow": "shallow",
        "target_dependents": "targetDependents",
        "run_program": "runProgram",
    }
)


def parse_spec(spec: Mapping[str, Any], namespace: str) -> StackSpec:
    """Validate ``spec`` of a Stack in ``namespace`` and return its typed form.

    Raises:
        SpecError: the spec is invalid or asks for something this operator refuses.
    """
    root = read_object(spec, SPEC, SPEC_FIELDS)
    _refuse_unsupported(root)
    source = read_source(root)
    config = read_config(root)
    secrets_ref = read_refs(root, "secretsRef", namespace, config_key)
    check_no_overlap(config, secrets_ref)
    stack, backend = read_stack_and_backend(root)
    _check_update_template(root)
    account, account_field = read_service_account(root)
    return StackSpec(
        stack=stack,
        backend=backend,
        project_repo=source.repo,
        commit=source.commit,
        branch=source.branch,
        repo_dir=read_directory(root, SPEC, "repoDir", "the repository"),
        git_auth=read_git_auth(root.get("gitAuth"), SPEC / "gitAuth", namespace),
        flux_source=source.flux,
        program_ref=source.program,
        config=config,
        config_ref=read_config_ref(root),
        environments=read_environments(root),
        workspace_reclaim_policy=_reclaim_policy(root),
        secrets_ref=secrets_ref,
        env_refs=read_refs(root, "envRefs", namespace, env_name),
        secrets_provider=read_secrets_provider(root),
        targets=read_strings(root, SPEC, "targets"),
        prerequisites=_prerequisites(root),
        resync_frequency_seconds=_resync_frequency(root),
        retry_max_backoff_duration_seconds=_retry_max_backoff(root),
        timeout_seconds=_timeout(root),
        service_account_name=account,
        service_account_field=account_field,
        workspace=read_workspace(root),
        **{attr: read_bool(root, SPEC, key) for attr, key in _FLAGS.items()},
    )


def _refuse_unsupported(root: Mapping[str, Any]) -> None:
    for name, replacement in DEPRECATED_FIELDS.items():
        if is_set(root.get(name)):
            problem = f"deprecated Pulumi Kubernetes Operator field, refused: use {replacement}"
            raise SpecError(SPEC / name, problem)


# -- PKO v2 fields --------------------------------------------------------------------------


def _reclaim_policy(root: Mapping[str, Any]) -> ReclaimPolicy:
    value = read_string(root, SPEC, "workspaceReclaimPolicy") or "Delete"
    for policy in RECLAIM_POLICIES:
        if value == policy:
            return policy
    problem = f"{value!r} is not a reclaim policy: use Delete (the default) or Retain"
    raise SpecError(SPEC / "workspaceReclaimPolicy", problem)


def _check_update_template(root: Mapping[str, Any]) -> None:
    # PKO v2 patches its Update objects with it; there are none here, so any object is
    # accepted and has no effect (the CRD's description says so).
    value = root.get("updateTemplate")
    if value is not None and not isinstance(value, Mapping):
        raise SpecError(SPEC / "updateTemplate", "must be an object")


# -- prerequisites --------------------------------------------------------------------------


def _prerequisites(root: Mapping[str, Any]) -> tuple[Prerequisite, ...]:
    path = SPEC / "prerequisites"
    items = read_list(root, SPEC, "prerequisites")
    result = tuple(_prerequisite(item, path.entry(i)) for i, item in enumerate(items))
    names = [p.name for p in result]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise SpecError(path.entry(i) / "name", f"{name!r} is listed twice: remove one")
    return result


def _prerequisite(raw: object, path: FieldPath) -> Prerequisite:
    item = read_object(raw, path, frozenset({"name", "requirement"}))
    name = required_string(item, path, "name")
    if not is_set(item.get("requirement")):
        return Prerequisite(name)
    req_path = path / "requirement"
    req = read_object(item["requirement"], req_path, frozenset({"succeededWithinDuration"}))
    text = read_string(req, req_path, "succeededWithinDuration")
    if text is None:
        return Prerequisite(name)
    return Prerequisite(name, _positive_duration(text, req_path / "succeededWithinDuration"))


def _positive_duration(text: str, path: FieldPath) -> float:
    try:
        seconds = parse_go_duration(text)
    except ValueError as err:
        problem = f'{err}: use a Go duration such as "90s", "30m" or "1h30m"'
        raise SpecError(path, problem) from None
    if seconds <= 0:
        raise SpecError(path, f'{text!r} is not a positive duration: use e.g. "30m"')
    return seconds


# -- periods ----------------------------------------------------------------------------------


def _resync_frequency(root: Mapping[str, Any]) -> int:
    seconds = read_int(root, SPEC, "resyncFrequencySeconds")
    if seconds is not None and seconds < 0:
        problem = "must not be negative (0 or unset means 60 seconds)"
        raise SpecError(SPEC / "resyncFrequencySeconds", problem)
    # As PKO: values below 60, including 0 and unset, mean 60.
    return max(seconds or 0, MIN_RESYNC_SECONDS)


def _retry_max_backoff(root: Mapping[str, Any]) -> int:
    seconds = read_int(root, SPEC, "retryMaxBackoffDurationSeconds")
    if seconds is None:
        return DEFAULT_RETRY_MAX_BACKOFF_SECONDS
    if seconds < 1:
        raise SpecError(SPEC / "retryMaxBackoffDurationSeconds", "must be at least 1 (seconds)")
    return seconds


def _timeout(root: Mapping[str, Any]) -> int | None:
    seconds = read_int(root, SPEC, "timeoutSeconds")
    if seconds is not None and seconds < 1:
        problem = "must be at least 1 (seconds): unset it to use the operator's default"
        raise SpecError(SPEC / "timeoutSeconds", problem)
    return seconds
