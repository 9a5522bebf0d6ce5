"""The run pod's API calls: read, create, delete, its log, and a watch of its changes.

``PodApi`` is the only code that calls the API server for the pod runner. Every call has
a timeout (``API_TIMEOUT``); the pod is always addressed by its name (``podspec.pod_name``),
never listed, and a delete or patch applies only to the pod of a given uid. Its create and
patch are recorded under ``field_manager`` in the pod's ``managedFields``.
``PodChanges`` follows one run pod by a watch with a ``metadata.name`` field selector, in
a thread of its own, so a run is followed as the kubelet reports it instead of by
re-reading the pod on a timer.

Guarantees of ``PodChanges``:

* ``pod`` is the newest state seen (None once the pod is deleted); ``version`` grows by one
  for each state published, so a caller waits for "anything newer than what I saw".
  ``final`` is the newest state the pod had, kept after it is deleted (the ``DELETED``
  event's), so that why it ended can still be read.
* A watch that ends (the server's timeout, a dropped connection, ``410 Gone``) is started
  again from the pod read afresh by name; the state read is published. The thread outlives
  any error (the API server away, a line that does not decode, a bug): it backs off on the
  clock, from ``RETRY_DELAY`` seconds doubling to ``MAX_RETRY_DELAY``, and tries again for
  as long as the watch is open; a streak of errors is logged once
  (``controller.failures.FailureStreak``).
* ``wait`` never waits past its deadline on the injected ``Clock`` and returns early on any
  new state; ``close`` ends the thread's stream at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any, Self

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from urllib3.response import BaseHTTPResponse

from controller.clock import Clock
from controller.coreapi import CoreApi
from controller.failures import Backoff, FailureStreak
from workspace.runner.channel import MAX_LINE
from workspace.runner.job import RunJob
from workspace.runner.pod import spec as podspec
from workspace.runner.pod.execs import Exec, run_in
from workspace.runner.pod.state import Pod, resource_version

log = structlog.get_logger(__name__)

TAKE_COMMAND = ("pulumi-stack-operator", "agent", "take")  # a warm pod's handover
TAKE_TIMEOUT = 20.0  # seconds the handover may take

API_TIMEOUT = 30  # seconds: connect and read of one API call
LOG_READ_TIMEOUT = 120  # seconds of a silent log stream before the pod is looked at again
WATCH_SECONDS = 240  # the server ends each watch after this long; it is started again
RETRY_DELAY = 1.0  # seconds before the first attempt to watch again after an error
MAX_RETRY_DELAY = 8.0  # seconds: the longest backoff between two such attempts


class PodApi:
    """The pod runner's calls to the API server (see the module docstring); thread-safe."""

    def __init__(self, api_client: client.ApiClient, field_manager: str | None = None) -> None:
        """Call the API server through ``api_client``; write as ``field_manager``."""
        self.core = CoreApi(api_client)
        self.field_manager = field_manager
        """Who the pod's ``managedFields`` say created and patched it (``fieldManager``);
        None: the API server's default (the client's user agent)."""

    def read(self, job: RunJob) -> Pod | None:
        """The Stack's run pod, or None when there is none."""
        try:
            return self.core.read_namespaced_pod(
                podspec.pod_name(job.owner.name), job.namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create(self, job: RunJob, manifest: Pod) -> Pod:
        """Create the run pod ``manifest``; raises ``ApiException`` as the server refuses."""
        return self.core.create_namespaced_pod(
            job.namespace,
            manifest,
            field_manager=self.field_manager,
            _request_timeout=API_TIMEOUT,
        )

    def delete(self, job: RunJob, uid: str, *, grace: float | None = None) -> None:
        """Delete the Stack's run pod if it is still the one with ``uid``."""
        body: dict[str, Any] = {"preconditions": {"uid": uid}}
        if grace is not None:
            body["gracePeriodSeconds"] = int(grace) + 5
        try:
            self.core.delete_namespaced_pod(
                podspec.pod_name(job.owner.name),
                job.namespace,
                body=body,
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as err:
            if err.status not in (404, 409):  # gone, or already another pod
                raise

    def mark_concluded(self, job: RunJob, uid: str, at: str) -> None:
        """Annotate the Stack's run pod as concluded at ``at``, if it is still ``uid``.

        A JSON patch that tests the uid first: a pod gone or replaced meanwhile is left
        alone (404, or 422 for the failed test). Raises ``ApiException`` for any other
        refusal (403 without the ``patch`` permission on pods).
        """
        self._annotate(job, uid, {podspec.ANNOTATION_CONCLUDED: at})

    def mark_taken(self, job: RunJob, uid: str, annotations: dict[str, str]) -> None:
        """Annotate the warm run pod ``uid`` with the run it took; no longer concluded.

        As ``mark_concluded``: tests the uid first, leaves a pod gone or replaced alone,
        raises ``ApiException`` for any other refusal.
        """
        self._annotate(job, uid, annotations, removed=podspec.ANNOTATION_CONCLUDED)

    def _annotate(
        self, job: RunJob, uid: str, annotations: dict[str, str], removed: str | None = None
    ) -> None:
        """Add ``annotations`` (and remove ``removed``) if the run pod is still ``uid``."""
        patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
        patch += [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v}
            for k, v in annotations.items()
        ]
        if removed is not None:
            patch.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(removed)}"})
        try:
            self.core.patch_namespaced_pod(
                podspec.pod_name(job.owner.name),
                job.namespace,
                patch,
                field_manager=self.field_manager,
                _content_type="application/json-patch+json",
                _request_timeout=API_TIMEOUT,
            )
        except ApiException as err:
            if err.status not in (404, 422):  # gone, or already another pod
                raise

    def versions(self, namespace: str, references: list[str]) -> dict[str, str] | None:
        """The resourceVersion of each ``secret/<name>`` or ``configmap/<name>``.

        None when one cannot be read (missing, forbidden, the API server away).
        """
        found = {}
        for reference in references:
            kind, name = reference.split("/", 1)
            read = (
                self.core.read_namespaced_secret
                if kind == "secret"
                else self.core.read_namespaced_config_map
            )
            try:
                obj = read(name, namespace, _request_timeout=API_TIMEOUT)
            except (ApiException, HTTPError, OSError):
                return None
            found[reference] = str(obj.get("metadata", {}).get("resourceVersion", ""))
        return found

    def take(self, job: RunJob, line: str, timeout: float = TAKE_TIMEOUT) -> tuple[int | None, str]:
        """Run ``agent take`` in the Stack's run pod with ``line`` on its stdin.

        ``execs.run_in``: its exit status (None: not ended within ``timeout`` seconds) and
        its stdout; ``ApiException`` when the exec cannot start.
        """
        where = Exec(job.namespace, podspec.pod_name(job.owner.name), podspec.CONTAINER)
        return run_in(self.core.api_client, where, TAKE_COMMAND, line + "\n", timeout)

    def has_claim(self, namespace: str, claim: str) -> bool:
        """Whether ``namespace`` has the PersistentVolumeClaim ``claim``.

        False when it cannot be read (logged unless it is simply absent).
        """
        try:
            self.core.read_namespaced_persistent_volume_claim(
                claim, namespace, _request_timeout=API_TIMEOUT
            )
        except ApiException as err:
            if err.status != 404:
                log.warning(
                    "Cannot read the cache claim; running without it",
                    claim=claim,
                    status=err.status,
                )
            return False
        return True

    def logs(self, job: RunJob) -> BaseHTTPResponse:
        """The run pod's log, followed (a streaming urllib3 response).

        A read times out after ``LOG_READ_TIMEOUT`` seconds of silence: a connection a
        load balancer dropped is noticed, and the pod is looked at again.
        """
        return self.core.read_namespaced_pod_log(
            podspec.pod_name(job.owner.name),
            job.namespace,
            container=podspec.CONTAINER,
            follow=True,
            _preload_content=False,
            _request_timeout=(API_TIMEOUT, LOG_READ_TIMEOUT),
        )

    def watch(self, job: RunJob, since: str) -> BaseHTTPResponse:
        """A watch of the Stack's run pod from resourceVersion ``since`` (streamed lines).

        An empty ``since`` starts with the pod's current state (an ``ADDED`` event).
        """
        return self.core.list_namespaced_pod(
            job.namespace,
            field_selector=f"metadata.name={podspec.pod_name(job.owner.name)}",
            watch=True,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            resource_version=since or None,
            _request_timeout=(API_TIMEOUT, WATCH_SECONDS + API_TIMEOUT),
        )


class PodChanges:
    """The states of one Stack's run pod as a watch reports them (module docstring)."""

    def __init__(self, api: PodApi, job: RunJob, pod: Pod | None, clock: Clock) -> None:
        """Start watching ``job``'s run pod, whose state now is ``pod`` (None: none)."""
        self._api, self._job, self._clock = api, job, clock
        self._changed = threading.Condition()
        self._pod, self._version = pod, 0
        self._final = pod
        self._closed = False
        self._response: BaseHTTPResponse | None = None
        backoff = Backoff(initial=RETRY_DELAY, cap=MAX_RETRY_DELAY)
        self._streak = FailureStreak("run pod watch", clock, backoff=backoff)
        since = resource_version(pod) if pod is not None else ""
        self._thread = threading.Thread(
            target=self._watch, args=(since,), name="run-pod-watch", daemon=True
        )
        self._thread.start()

    @property
    def pod(self) -> Pod | None:
        """The newest state seen; None once the pod is gone."""
        with self._changed:
            return self._pod

    @property
    def final(self) -> Pod | None:
        """The newest state the pod had, even once it is deleted (None: never seen)."""
        with self._changed:
            return self._final

    @property
    def version(self) -> int:
        """How many states have been published since the watch started."""
        with self._changed:
            return self._version

    def wait(self, seen: int, deadline: float) -> int:
        """Wait until a state newer than version ``seen`` or ``deadline`` (clock time)."""
        with self._changed:
            while self._version == seen and not self._closed and self._clock.now() < deadline:
                self._clock.wait_until(self._changed, deadline)
            return self._version

    def close(self) -> None:
        """Stop watching; the thread's stream ends at once."""
        with self._changed:
            self._closed = True
            response = self._response
            self._changed.notify_all()
        if response is not None:
            unblock(response)

    def __enter__(self) -> Self:
        """The changes, closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the watch."""
        self.close()

    # the watch thread -----------------------------------------------------------------------

    def _publish(self, pod: Pod | None, final: Pod | None = None) -> None:
        with self._changed:
            self._pod = pod
            self._final = pod or final or self._final
            self._version += 1
            self._changed.notify_all()

    def _watch(self, since: str) -> None:
        while not self._is_closed():
            try:
                since = self._stream(since)
            except Exception as err:  # noqa: BLE001 - retried: the API server may be away
                if self._is_closed():
                    return  # close() shut the socket under the read: no failure
                self._failed(err)
                since = ""
            if not since and not self._is_closed():
                since = self._read_again()

    def _stream(self, since: str) -> str:
        """Publish the watch's events; the resourceVersion to go on from ("" to re-read)."""
        response = self._api.watch(self._job, since)
        self._streak.succeeded(pod=podspec.pod_name(self._job.owner.name))
        with self._changed:
            self._response = response
            closed = self._closed
        if closed:
            unblock(response)
        try:
            for line in lines(response):
                since = self._event(json.loads(line), since)
                if not since:
                    break
        finally:
            close_stream(response)
        return since

    def _event(self, event: dict[str, object], since: str) -> str:
        kind, pod = event.get("type"), event.get("object")
        if not isinstance(pod, dict):
            return since
        if kind == "ERROR":  # 410 Gone: too old a resourceVersion; read the pod again
            return ""
        version = resource_version(pod) or since
        if kind == "BOOKMARK":
            return version
        self._publish(None if kind == "DELETED" else pod, final=pod)
        return version

    def _read_again(self) -> str:
        """Publish the pod as read now; the resourceVersion to watch from."""
        try:
            pod = self._api.read(self._job)
        except Exception as err:  # noqa: BLE001 - the next watch tries again
            self._failed(err)
            return ""
        self._streak.succeeded(pod=podspec.pod_name(self._job.owner.name))
        if pod is None:
            self._publish(None)
            return ""  # watching from "now" reports it if it comes back
        self._publish(pod)
        return resource_version(pod)

    def _failed(self, err: Exception) -> None:
        """Log ``err`` (once per streak) and back off on the clock, or until closed."""
        delay = self._streak.failed(err, pod=podspec.pod_name(self._job.owner.name))
        with self._changed:
            deadline = self._clock.now() + delay
            while not self._closed and self._clock.now() < deadline:
                self._clock.wait_until(self._changed, deadline)

    def _is_closed(self) -> bool:
        with self._changed:
            return self._closed


def lines(response: BaseHTTPResponse) -> Iterator[str]:
    """The lines of a streamed response; a line longer than ``MAX_LINE`` is dropped."""
    buffer = b""
    overlong = False
    for chunk in response.stream(65536, decode_content=True):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if not overlong:
                yield line.decode("utf-8", "replace")
            overlong = False
        if len(buffer) > MAX_LINE:
            buffer, overlong = b"", True
    if buffer and not overlong:
        yield buffer.decode("utf-8", "replace")


def unblock(response: BaseHTTPResponse) -> None:
    """Make a read blocked on ``response`` return at once (shutdown wakes it; close does not)."""
    shutdown = getattr(response, "shutdown", None)
    if callable(shutdown):
        with contextlib.suppress(Exception):
            shutdown()


def close_stream(response: BaseHTTPResponse) -> None:
    """Release and close ``response``, ignoring a connection already gone."""
    with contextlib.suppress(Exception):
        response.release_conn()
        response.close()


def _pointer(key: str) -> str:
    """``key`` escaped as one JSON pointer token."""
    return key.replace("~", "~0").replace("/", "~1")
