"""Which warm run pod may take a run, and the handover itself.

A warm run pod (``--run-pod-keep-warm``) that has reported its run and waits
(``pulumi_stack_operator.warm``) takes its Stack's next run instead of a new pod when it
``fits``: the pod the run would get differs from it only in what differs between runs
(``podspec.fit_key``, annotated on the pod at its creation with the resourceVersions of the
Secrets and ConfigMaps it reads, read again for the run), it still runs, and what is left
of its ``activeDeadlineSeconds`` holds the run's deadline with its margins.

``hand_over`` runs ``agent take`` in it (``PodApi.take``), then annotates it with the run
(generation, commit, operation, the run's mark; no longer concluded) so that a restarted
operator re-attaches to it as to any run pod. A handover refused (the agent's window
closing), failed (the exec refused: no ``pods/exec`` permission, the pod gone) or not
answered is None: the caller deletes the pod and creates a new one, as without a window.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from controller.clock import parse_time
from workspace.handover import ACCEPTED_LINE, Delivery
from workspace.runner.job import RunJob, trace_env
from workspace.runner.pod import spec as podspec
from workspace.runner.pod import state as podstate
from workspace.runner.pod.api import PodApi
from workspace.runner.pod.state import Pod

log = structlog.get_logger(__name__)

DEADLINE_MARGIN = 60  # seconds of a pod's deadline beyond a run's own (as podspec gives)


def annotate(manifest: Pod, api: PodApi, namespace: str) -> bool:
    """Annotate ``manifest`` with its fit key; False when what it reads cannot be read."""
    versions = api.versions(namespace, podspec.references(manifest))
    if versions is None:
        return False
    key = podspec.fit_key(manifest, versions)
    manifest["metadata"]["annotations"][podspec.ANNOTATION_WARM] = key
    return True


def fits(pod: Pod, manifest: Pod, job: RunJob, now: datetime) -> bool:
    """Whether the idle warm ``pod`` may take the run whose own pod would be ``manifest``."""
    key = podstate.annotation(manifest, podspec.ANNOTATION_WARM)
    return (
        key is not None
        and podstate.is_stacks(pod, job)
        and podstate.concluded(pod)
        and podspec.is_warm(pod)
        and podstate.annotation(pod, podspec.ANNOTATION_WARM) == key
        and not pod["metadata"].get("deletionTimestamp")
        and podstate.status(pod).get("phase") == "Running"
        and not podstate.container_terminated(pod)
        and _time_left(pod, now) > job.timeout + DEADLINE_MARGIN
    )


def _time_left(pod: Pod, now: datetime) -> float:
    """Seconds until the pod's ``activeDeadlineSeconds`` ends it (0 if not known)."""
    started = parse_time(podstate.status(pod).get("startTime"))
    deadline = pod.get("spec", {}).get("activeDeadlineSeconds")
    if started is None or not isinstance(deadline, int):
        return 0.0
    return (started + timedelta(seconds=deadline) - now).total_seconds()


def hand_over(api: PodApi, job: RunJob, pod: Pod, operation: str) -> str | None:
    """Hand ``operation`` of ``job`` to the warm ``pod``; the run's mark, or None if not taken."""
    mark = secrets.token_hex(8)
    delivery = Delivery(mark, operation, job.document, trace_env(job.trace))
    name = podstate.name(pod)
    try:
        status, said = api.take(job, delivery.encode())
    except (ApiException, HTTPError, OSError) as err:
        log.warning("Cannot hand the run to the warm run pod", pod=name, error=str(err))
        return None
    if said.split("\n", 1)[0].strip() != ACCEPTED_LINE:  # its exit status may be a kill's
        why = said.strip()[:200] or f"exit status {status}"
        log.info("The warm run pod did not take the run", pod=name, said=why)
        return None
    annotations = {
        podspec.ANNOTATION_GENERATION: str(job.generation),
        podspec.ANNOTATION_COMMIT: job.commit,
        podspec.ANNOTATION_OPERATION: operation,
        podspec.ANNOTATION_MARK: mark,
    }
    try:
        api.mark_taken(job, podstate.uid(pod), annotations)
    except ApiException as err:  # the run goes on; a restart would not re-attach to it
        log.warning("Cannot annotate the warm run pod with its run", pod=name, status=err.status)
    return mark
