"""The warm run pods this operator keeps idle, counted, and deleted once their window ends.

A warm run pod (``--run-pod-keep-warm``) whose outcome was taken stays running while its
agent waits for its Stack's next run (``pulumi_stack_operator.warm``). ``IdlePods`` is
the operator's account of such pods:

* ``kept`` registers one and follows it by a watch of its own (``PodChanges``) until the
  runner takes it for a run or deletes it (``forget``), it is gone or replaced, or it has
  ended (its agent's window passed: the pod ``Succeeded``), when it is deleted: no
  finished pod is left behind.
* ``close`` (the operator stopping) deletes every pod still registered: an idle pod waits
  for runs only this process would hand it, so none is left waiting, and none left
  ``Succeeded``, once the operator is gone.
* The count (``count``, and the ``idle`` callback on every change: the
  ``pulumi_stack_run_pods_idle`` gauge) is of the pods registered and not yet taken,
  gone or ended. Pods a previous operator process kept are not counted: a restarted
  operator deletes them when their Stack next runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from controller.clock import Clock
from workspace.runner.job import RunJob
from workspace.runner.pod import state as podstate
from workspace.runner.pod.api import PodApi, PodChanges
from workspace.runner.pod.state import Pod

log = structlog.get_logger(__name__)

LOOK = 0.5  # seconds between looks at whether a followed idle pod was taken meanwhile
WINDOW_PASSED = "Deleting the warm run pod whose window passed"


class IdlePods:
    """Idle warm run pods by Stack (see the module docstring); thread-safe."""

    def __init__(self, api: PodApi, clock: Clock, idle: Callable[[int], None]) -> None:
        """Follow pods through ``api`` on ``clock``; ``idle(count)`` on each change."""
        self._api, self._clock, self._on_change = api, clock, idle
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str], str] = {}  # (namespace, Stack uid) -> pod uid
        self._jobs: dict[tuple[str, str], RunJob] = {}  # the run each idle pod last ran

    def count(self) -> int:
        """How many idle pods are registered."""
        with self._lock:
            return len(self._idle)

    def kept(self, job: RunJob, pod: Pod) -> None:
        """Register ``pod`` (``job``'s Stack's) as idle and follow it until it is not."""
        with self._lock:
            self._idle[_key(job)] = podstate.uid(pod)
            self._jobs[_key(job)] = job
            count = len(self._idle)
        self._on_change(count)
        threading.Thread(
            target=self._follow, args=(job, pod), name="idle-run-pod", daemon=True
        ).start()

    def forget(self, job: RunJob, uid: str) -> bool:
        """Whether the idle pod ``uid`` of ``job``'s Stack was registered; it no longer is.

        For a pod taken by a run, or about to be deleted by the runner.
        """
        return self._discard(job, uid)

    def close(self, timeout: float) -> None:
        """Delete every idle pod still registered, for at most ``timeout`` seconds."""
        give_up = self._clock.now() + timeout
        with self._lock:
            idle = [(self._jobs[key], uid) for key, uid in self._idle.items()]
        for job, uid in idle:
            if self._clock.now() >= give_up:
                log.warning("Left warm run pods undeleted at shutdown", left=self.count())
                return
            self._end(job, uid, why="Deleting the warm run pod: the operator is stopping")

    def _discard(self, job: RunJob, uid: str) -> bool:
        with self._lock:
            if self._idle.get(_key(job)) != uid:
                return False
            del self._idle[_key(job)]
            del self._jobs[_key(job)]
            count = len(self._idle)
        self._on_change(count)
        return True

    def _is_idle(self, job: RunJob, uid: str) -> bool:
        with self._lock:
            return self._idle.get(_key(job)) == uid

    def _follow(self, job: RunJob, pod: Pod) -> None:
        """Watch ``pod`` while it is idle; delete it once it has ended."""
        uid = podstate.uid(pod)
        try:
            with PodChanges(self._api, job, pod, self._clock) as changes:
                seen = changes.version
                while self._is_idle(job, uid):
                    now = changes.pod
                    if now is None or podstate.uid(now) != uid:
                        self._discard(job, uid)
                        return
                    if podstate.finished(now) or podstate.container_terminated(now):
                        self._end(job, uid)
                        return
                    seen = changes.wait(seen, self._clock.now() + LOOK)
        except Exception:
            log.exception("Following an idle run pod failed", pod=podstate.name(pod))
            self._discard(job, uid)

    def _end(self, job: RunJob, uid: str, why: str = WINDOW_PASSED) -> None:
        """The idle pod ``uid`` is done (``why``): no longer idle, and deleted."""
        if not self._discard(job, uid):
            return  # taken meanwhile: its run follows it
        log.info(why, namespace=job.namespace, name=job.owner.name)
        try:
            self._api.delete(job, uid)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("Cannot delete the ended warm run pod", error=str(err))


def _key(job: RunJob) -> tuple[str, str]:
    return job.namespace, job.owner.uid
