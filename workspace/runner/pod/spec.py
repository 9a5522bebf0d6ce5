"""The run pod's manifest: one pod per run, named after its Stack, hardened by default.

Guarantees of ``run_pod``:

* The name is a function of the Stack's name only (``pod_name``): the API server refuses a
  second run pod of one Stack while the first exists.
* The pod runs as the Stack's ServiceAccount, ``restartPolicy: Never`` (a failed run is
  concluded by the operator, never re-run behind its back), with ``activeDeadlineSeconds``
  as a backstop past the run's own deadline, and no service links.
* ``restricted`` (the default profile) meets the restricted Pod Security Standard:
  non-root (uid 65532), no privilege escalation, every capability dropped, seccomp
  ``RuntimeDefault``, a read-only root filesystem; ``/workspace`` (checkout, homes) and
  ``/tmp`` are emptyDir volumes. ``baseline`` drops the non-root user and the read-only
  root (images that need root), and keeps the rest: no privilege escalation, every
  capability dropped (root without capabilities: no NET_RAW, no CHOWN, no SETUID...),
  seccomp ``RuntimeDefault``.
* Secret values never appear: a Secret-backed value is a ``secretKeyRef`` variable, and
  ``PSO_ENV_SOURCES`` tells the agent which template variables came from Secrets (the
  values it masks in messages; ``job.EnvSources``). The
  git credentials are variables of the ``checkout`` init container only, which checks the
  source out into ``/workspace``; the program's container never has them. A run that needs
  no such container (``RunJob.checkout_apart``: no git credentials, no init containers of
  the Stack's, the operator's image) has none: its run container checks the source out
  itself (``agent checkout run``), which saves a container start, an agent start and the
  kubelet's hand-over between the two.
* The Stack's ``workspaceTemplate`` (validated by the spec parser) adds image, pull
  policy, resources, env, envFrom, labels, annotations, scheduling and volumes; it cannot
  change the command, the security context or the ServiceAccount.
* ``requests`` (``DEFAULT_REQUESTS`` unless the operator is told otherwise) are the run
  and checkout containers' resource requests for each resource the template neither
  requests nor limits (a limit alone makes Kubernetes request as much), so that the
  scheduler reserves what a run uses and a namespace quota on requests admits the pod.
* The Stack's own init containers (``podTemplate.spec.initContainers``) run after the
  checkout, with the run container's security context forced on them; every container
  has ``PULUMI_ENV`` naming a file on the pod's ``share`` volume (``envfile``), which they
  may append ``NAME=value`` lines to for the run's environment, as with the Pulumi
  Kubernetes Operator.
* ``RunCaching``: when the namespace has the cache claim, the run container (not the
  checkout) mounts it at ``CACHE_MOUNT`` and the agent keeps the program's installed
  dependencies, download caches and plugins there (``PSO_CACHE_DIR``), bounded by
  ``PSO_CACHE_LIMIT`` bytes; ``PSO_PLUGIN_MIRROR`` is where plugins are downloaded from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from workspace.handover import KEEP_WARM_ENV
from workspace.runner.envfile import ENV_FILE, ENV_VARIABLE, SHARE_PATH, SHARE_VOLUME
from workspace.runner.job import (
    ENV_SOURCES,
    TRACE_VARIABLES,
    WORKSPACE,
    EnvSources,
    RunJob,
    SecretEnv,
    trace_env,
)

CONTAINER = "pulumi"
CHECKOUT = "checkout"  # the init container: the source checked out into /workspace
UID = 65532
GRACE_MARGIN = 5  # seconds a pod's grace exceeds the CLI's interrupt grace (the agent's exit)
MANAGED_BY = "pulumi-stack-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT = "pulumi-run"
LABEL_STACK_UID = "pulumi-stack-operator.dev/stack-uid"
ANNOTATION_STACK = "pulumi-stack-operator.dev/stack"
ANNOTATION_GENERATION = "pulumi-stack-operator.dev/generation"
ANNOTATION_COMMIT = "pulumi-stack-operator.dev/commit"
ANNOTATION_OPERATION = "pulumi-stack-operator.dev/operation"
# Set (to the time) on a finished run pod kept for ``Retain`` once its outcome was taken:
# such a pod is never followed again, only deleted by the Stack's next run.
ANNOTATION_CONCLUDED = "pulumi-stack-operator.dev/concluded"
RETAIN = "Retain"  # RunJob.reclaim: keep the finished run pod
# A warm run pod (``--run-pod-keep-warm``): what it must match to take a later run
# (``fit_key``), and the mark of the run it was handed last (``pulumi_stack_operator.warm``).
ANNOTATION_WARM = "pulumi-stack-operator.dev/warm"
ANNOTATION_MARK = "pulumi-stack-operator.dev/job-mark"
WARM_LIFE = 3600  # seconds a warm pod may live past its first run's own deadline
JOB_VARIABLES = frozenset({"PSO_JOB", "PSO_OPERATION", *TRACE_VARIABLES})  # a run's own
RUN_ANNOTATIONS = frozenset(
    {
        ANNOTATION_GENERATION,
        ANNOTATION_COMMIT,
        ANNOTATION_OPERATION,
        ANNOTATION_CONCLUDED,
        ANNOTATION_WARM,
        ANNOTATION_MARK,
    }
)
AGENT_COMMAND = ("/usr/bin/tini", "--", "pulumi-stack-operator", "agent")
CHECKOUT_ARGS = ("checkout",)  # the init container's: the checkout only
CHECKOUT_AND_RUN_ARGS = ("checkout", "run")  # a run container that checks out itself
CACHE_VOLUME = "pulumi-cache"
CACHE_MOUNT = "/pulumi-cache"  # reserved in workspaceTemplate (reconcile.spec.volumes)
ENV_FILE_VARIABLE = {"name": ENV_VARIABLE, "value": ENV_FILE}  # in every container
DEFAULT_REQUESTS: Final[Mapping[str, str]] = {"cpu": "100m", "memory": "256Mi"}
"""A run's resource requests unless the Stack sets its own: a tenth of a core (a run is
short and mostly waits; the CPU it takes beyond is lent while free) and the memory one
holds at its peak (the CLI, the language host and a small program: some 250 MiB)."""
_NAME_LIMIT = 63  # a pod's hostname is its name cut to 63 characters: keep them equal


@dataclass(frozen=True)
class RunCaching:
    """How run pods cache what they install.

    ``claim``: the PersistentVolumeClaim of a Stack's namespace mounted as the cache when it
    exists ("": never); ``limit``: bytes the cache may hold before eviction; ``mirror``: the
    URL plugins are downloaded from (None: their own).
    """

    claim: str = "pulumi-cache"
    limit: int = 10 * 1024**3
    mirror: str | None = None


def pod_name(owner: str) -> str:
    """The run pod's name for the object named ``owner`` (at most 63 characters)."""
    name = f"{owner}-pulumi"
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(owner.encode()).hexdigest()[:10]
    return f"{owner[:44].rstrip('-.')}-pulumi-{digest}"


def run_pod(  # noqa: PLR0913 - the pod's inputs, all but two keyword-only
    job: RunJob,
    operation: str,
    *,
    image: str,
    grace: float,
    caching: RunCaching | None = None,
    cached: bool = False,
    requests: Mapping[str, str] = DEFAULT_REQUESTS,
    keep_warm: float = 0.0,
) -> dict[str, Any]:
    """The manifest of the pod that runs ``operation`` for ``job`` (see the module doc).

    ``image`` is used unless the Stack names its own; ``grace`` is the seconds the pod has
    between SIGTERM (the operator interrupting the run) and SIGKILL. ``cached``: the
    namespace has ``caching.claim``, which the run container mounts. ``requests``: the
    resource requests of a run whose Stack neither requests nor limits that resource.
    ``keep_warm``: seconds the agent of a ``warm_eligible`` run waits for the Stack's next
    run once it has reported (its ``activeDeadlineSeconds`` then allows ``WARM_LIFE`` more).
    """
    template = job.template()
    resources = _resources(template.get("resources"), requests)
    template = {**template, "resources": resources} if resources else template
    spec = _pod_spec(job, operation, template, image, grace)
    _add_caching(spec, caching or RunCaching(claim=""), cached=cached)
    if keep_warm > 0 and warm_eligible(job):
        spec["activeDeadlineSeconds"] += WARM_LIFE
        container = spec["containers"][0]
        container["env"] = [{"name": KEEP_WARM_ENV, "value": f"{keep_warm:g}"}, *container["env"]]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(job, operation, template),
        "spec": spec,
    }


def warm_eligible(job: RunJob) -> bool:
    """Whether ``job``'s run pod may be kept warm for the Stack's next run.

    Only a pod whose run container checks the source out itself (no git credentials,
    which only a checkout container may hold; no init containers of the Stack's, which
    would not run again; the operator's image, whose agent takes jobs), and not one kept
    for its log (``Retain``).
    """
    return not job.checkout_apart() and job.reclaim != RETAIN


def is_warm(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod``'s agent waits for another run once it has reported (``KEEP_WARM_ENV``)."""
    containers = pod.get("spec", {}).get("containers") or [{}]
    return any(e.get("name") == KEEP_WARM_ENV for e in containers[0].get("env") or ())


def fit_key(manifest: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """What a warm pod must match to take a run whose pod would be ``manifest``.

    A digest of the manifest without what differs from one run to the next (the run's
    annotations, its deadline, ``JOB_VARIABLES``) and of ``versions``: the
    resourceVersions of the Secrets and ConfigMaps it reads (``references``), whose values
    a running pod keeps as they were when it started.
    """
    spec = dict(manifest["spec"])
    spec.pop("activeDeadlineSeconds", None)
    container = dict(spec["containers"][0])
    container["env"] = [e for e in container.get("env", []) if e["name"] not in JOB_VARIABLES]
    spec["containers"] = [container, *spec["containers"][1:]]
    metadata = manifest["metadata"]
    annotations = metadata.get("annotations") or {}
    kept = {
        "annotations": {k: v for k, v in annotations.items() if k not in RUN_ANNOTATIONS},
        "labels": metadata.get("labels"),
        "name": metadata.get("name"),
        "owner": metadata.get("ownerReferences"),
        "spec": spec,
        "versions": dict(sorted(versions.items())),
    }
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def references(manifest: Mapping[str, Any]) -> list[str]:
    """The Secrets and ConfigMaps the pod reads, as ``secret/<name>`` and ``configmap/<name>``."""
    spec = manifest["spec"]
    found: set[str] = set()
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for env in container.get("env") or ():
            source = env.get("valueFrom") or {}
            if "secretKeyRef" in source:
                found.add(f"secret/{source['secretKeyRef']['name']}")
            if "configMapKeyRef" in source:
                found.add(f"configmap/{source['configMapKeyRef']['name']}")
        for env_from in container.get("envFrom") or ():
            if "secretRef" in env_from:
                found.add(f"secret/{env_from['secretRef']['name']}")
            if "configMapRef" in env_from:
                found.add(f"configmap/{env_from['configMapRef']['name']}")
    for volume in spec.get("volumes") or ():
        found |= _volume_references(volume)
    return sorted(found)


def _volume_references(volume: Mapping[str, Any]) -> set[str]:
    sources = [volume, *(volume.get("projected") or {}).get("sources", [])]
    found = set()
    for source in sources:
        if "secret" in source:
            found.add(
                f"secret/{source['secret'].get('secretName') or source['secret'].get('name')}"
            )
        if "configMap" in source:
            found.add(f"configmap/{source['configMap']['name']}")
    return found


def _resources(given: Mapping[str, Any] | None, defaults: Mapping[str, str]) -> dict[str, Any]:
    """``given`` (a container's resources), requesting ``defaults`` where it sets nothing.

    A default applies to a resource that ``given`` neither requests nor limits; the result
    is empty when both are.
    """
    resources = dict(given or {})
    requests = dict(resources.get("requests") or {})
    limits = resources.get("limits") or {}
    for name, quantity in defaults.items():
        if name not in requests and name not in limits:
            requests[name] = quantity
    if requests:
        resources["requests"] = requests
    return resources


def _add_caching(spec: dict[str, Any], caching: RunCaching, *, cached: bool) -> None:
    """Mount the cache claim into the run container and tell the agent about it."""
    container = spec["containers"][0]
    env = [{"name": "PSO_CACHE_LIMIT", "value": str(caching.limit)}]
    if caching.mirror:
        env.append({"name": "PSO_PLUGIN_MIRROR", "value": caching.mirror})
    if cached and caching.claim:
        env.append({"name": "PSO_CACHE_DIR", "value": CACHE_MOUNT})
        claim = {"claimName": caching.claim}
        spec["volumes"].append({"name": CACHE_VOLUME, "persistentVolumeClaim": claim})
        container["volumeMounts"].append({"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT})
    container["env"] = [*env, *container["env"]]


def _metadata(job: RunJob, operation: str, template: dict[str, Any]) -> dict[str, Any]:
    labels = {
        **template.get("labels", {}),
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: COMPONENT,
        LABEL_STACK_UID: job.owner.uid,
    }
    annotations = {
        **template.get("annotations", {}),
        ANNOTATION_STACK: job.owner.name,
        ANNOTATION_GENERATION: str(job.generation),
        ANNOTATION_COMMIT: job.commit,
        ANNOTATION_OPERATION: operation,
    }
    owner = {
        "apiVersion": job.owner.api_version,
        "kind": job.owner.kind,
        "name": job.owner.name,
        "uid": job.owner.uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }
    return {
        "name": pod_name(job.owner.name),
        "namespace": job.namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [owner],
    }


def _pod_spec(
    job: RunJob, operation: str, template: dict[str, Any], image: str, grace: float
) -> dict[str, Any]:
    restricted = job.security_profile != "baseline"
    spec: dict[str, Any] = {
        "serviceAccountName": job.service_account,
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": int(grace) + GRACE_MARGIN,
        # The operator interrupts the run at its deadline; this only catches a run whose
        # operator is gone and a pod that ignores SIGTERM.
        "activeDeadlineSeconds": int(job.timeout + grace) + 60,
        "securityContext": _pod_security(restricted=restricted),
        "initContainers": [
            *_checkout(job, operation, template, image, restricted=restricted),
            *_tenant_init_containers(template, restricted=restricted),
        ],
        "containers": [_run_container(job, operation, template, image, restricted=restricted)],
        "volumes": [
            {"name": "workspace", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            *_share_volume(template),
            *template.get("volumes", []),
        ],
    }
    if not spec["initContainers"]:
        del spec["initContainers"]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        if key in template:
            spec[key] = template[key]
    return spec


def _pod_security(*, restricted: bool) -> dict[str, Any]:
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if restricted:
        context |= {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID}
    return context


def _container(
    job: RunJob, operation: str, template: dict[str, Any], image: str, *, restricted: bool
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": job.image or image,
        "command": list(AGENT_COMMAND),
        "env": [
            *_agent_env(job, operation),
            _env_sources(template),
            ENV_FILE_VARIABLE,
            *template.get("env", []),
        ],
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - the pod's own emptyDir
            *_share_mount(template.get("volumeMounts", [])),
            *template.get("volumeMounts", []),
        ],
        "securityContext": _container_security(restricted=restricted),
        # A crash's last log lines become the container's termination message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if job.image_pull_policy:
        container["imagePullPolicy"] = job.image_pull_policy
    for key in ("envFrom", "resources"):
        if key in template:
            container[key] = template[key]
    return container


def _run_container(
    job: RunJob, operation: str, template: dict[str, Any], image: str, *, restricted: bool
) -> dict[str, Any]:
    """The run container; it checks the source out first when no init container does."""
    container = _container(job, operation, template, image, restricted=restricted)
    if not job.checkout_apart():
        container["command"] = [*AGENT_COMMAND, *CHECKOUT_AND_RUN_ARGS]
    return container


def _checkout(
    job: RunJob, operation: str, template: dict[str, Any], image: str, *, restricted: bool
) -> list[dict[str, Any]]:
    """The init container that checks the source out, when the run needs one apart.

    It is the only container with the git credentials (``RunJob.checkout_apart``).
    """
    if not job.checkout_apart():
        return []
    container = _container(job, operation, template, image, restricted=restricted)
    container["name"] = CHECKOUT
    container["command"] = [*AGENT_COMMAND, *CHECKOUT_ARGS]
    plain = [e for e in container["env"] if not e["name"].startswith("PSO_SECRET_")]
    container["env"] = [*plain, *_secret_env(job.git_env)]
    return [container]


def _tenant_init_containers(template: dict[str, Any], *, restricted: bool) -> list[Any]:
    """The Stack's own init containers, after the checkout, hardened as the run container.

    Their image, command, env and mounts are the Stack's; the security context is the
    runner's (the parser refuses one of theirs), and each has ``$PULUMI_ENV`` and the
    ``share`` volume it names, to hand the run variables made at run time (``envfile``).
    """
    made = []
    for given in template.get("initContainers", []):
        container = dict(given)
        mounts = list(container.get("volumeMounts", []))
        container["volumeMounts"] = [*_share_mount(mounts), *mounts]
        container["env"] = [*container.get("env", []), ENV_FILE_VARIABLE]
        container["securityContext"] = _container_security(restricted=restricted)
        made.append(container)
    return made


def _share_volume(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``share`` emptyDir, unless the Stack brings a volume of that name itself."""
    if any(v.get("name") == SHARE_VOLUME for v in template.get("volumes", [])):
        return []
    return [{"name": SHARE_VOLUME, "emptyDir": {}}]


def _share_mount(mounts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The mount of ``share`` at ``SHARE_PATH``, unless ``mounts`` has one already."""
    if any(m.get("name") == SHARE_VOLUME or m.get("mountPath") == SHARE_PATH for m in mounts):
        return []
    return [{"name": SHARE_VOLUME, "mountPath": SHARE_PATH}]


def _agent_env(job: RunJob, operation: str) -> list[dict[str, Any]]:
    plain = {
        "PSO_JOB": job.document,
        "PSO_OPERATION": operation,
        "HOME": f"{WORKSPACE}/home",
        "TMPDIR": "/tmp",  # noqa: S108 - the pod's own emptyDir
        **trace_env(job.trace),
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    return [*env, *_secret_env(job.secret_env)]


def _env_sources(template: dict[str, Any]) -> dict[str, Any]:
    """The variable telling the agent which template variables came from Secrets."""
    sources = EnvSources.of(template.get("env", []), template.get("envFrom", []))
    return {"name": ENV_SOURCES, "value": sources.encode()}


def _secret_env(variables: tuple[SecretEnv, ...]) -> list[dict[str, Any]]:
    return [
        {"name": s.env, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for s in variables
    ]


def _container_security(*, restricted: bool) -> dict[str, Any]:
    """No escalation and no capabilities in both profiles; restricted adds the rest."""
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    if restricted:
        context |= {"readOnlyRootFilesystem": True, "runAsNonRoot": True}
    return context
