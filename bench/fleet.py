"""Stacks for the benchmarks: real manifests, and fleets of idle, Ready Stacks seeded cheaply.

A Stack here runs the ``files`` test program pinned to the test bed's one commit (a pinned
commit is never polled with ``git ls-remote``), keeps its state in the test bed's
``file://`` backend and reads its passphrase from the namespace's Secret.

``Fleet`` grows a namespace of N Stacks without N real ``pulumi up``s. Each Stack is
created with the operator's finalizer already present, and its status is then written
through the status subresource exactly as the operator writes it after a successful ``up``
(``status.conditions.succeeded`` for the conditions; ``lastUpdate`` with ``state:
succeeded``, ``generation`` = the Stack's generation, ``lastAttemptedCommit`` =
``lastSuccessfulCommit`` = the pinned commit, ``failures: 0``; outputs; one history entry).
``reconcile.decide`` then finds no run due (no ``currentUpdate``, generation applied, no
reconcile request, commit unchanged, last run succeeded, no ``continueResyncOnCommitMatch``)
and the reconciler writes nothing; the start-up and idle benchmarks check that it does not.
Objects are created by ``SEED_THREADS`` threads, two requests each (create, status).
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client

from bench.testbed import PASSPHRASE_SECRET, TestBed
from status import conditions as cond

GROUP, VERSION, PLURAL = "pulumi.com", "v1", "stacks"
FINALIZER = "finalizer.stack.pulumi.com"
SEED_THREADS = 8
PROGRAM_DIR = "app"  # where the program sits in the test bed's repository

Progress = Callable[[str], None]


def stack_spec(bed: TestBed, name: str, **config: str) -> dict[str, Any]:
    """The spec of a Stack running the files program into ``<state>/<name>.txt``."""
    return {
        "stack": name,
        "backend": f"file://{bed.backend}",
        "projectRepo": bed.repo_url,
        "commit": bed.commit,
        "repoDir": PROGRAM_DIR,
        "config": {"path": str(bed.backend.parent / f"{name}.txt"), "content": name, **config},
        "envRefs": {
            "PULUMI_CONFIG_PASSPHRASE": {
                "type": "Secret",
                "secret": {"name": PASSPHRASE_SECRET, "key": "passphrase"},
            }
        },
    }


def manifest(
    name: str, spec: Mapping[str, Any], *, finalizers: Iterable[str] = ()
) -> dict[str, Any]:
    """A Stack object for ``create``."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Stack",
        "metadata": {"name": name, "finalizers": list(finalizers)},
        "spec": dict(spec),
    }


def ready_status(spec: Mapping[str, Any], generation: int) -> dict[str, Any]:
    """The status the operator writes after a successful ``up`` of ``generation``."""
    now = datetime.datetime.now(datetime.UTC)
    stamp = cond.now_rfc3339(now)
    commit = str(spec["commit"])
    summary = "pulumi up succeeded (create 1)"
    status: dict[str, Any] = {
        "lastUpdate": {
            "state": "succeeded",
            "type": "up",
            "generation": generation,
            "lastAttemptedCommit": commit,
            "shortCommit": commit[:7],
            "lastResyncTime": stamp,
            "message": summary,
            "failures": 0,
            "lastSuccessfulCommit": commit,
        },
        "history": [
            {
                "type": "up",
                "result": "succeeded",
                "generation": generation,
                "commit": commit,
                "startTime": stamp,
                "durationSeconds": 4.0,
                "resourceChanges": {"create": 1},
            }
        ],
        "outputs": {
            "path": spec["config"]["path"],
            "content": spec["config"]["content"],
            "secretContent": "[secret]",
        },
    }
    return cond.succeeded(status, generation, f"{summary} at commit {commit[:7]}", now)


class Fleet:
    """Idle, Ready Stacks in one namespace, grown on demand; see the module docstring."""

    def __init__(self, bed: TestBed, progress: Progress) -> None:
        """Prepare an empty fleet; its namespace is made on first use."""
        self._bed = bed
        self._progress = progress
        self._api = client.CustomObjectsApi(bed.api)
        self._namespace = ""
        self.names: list[str] = []
        self.seed_seconds = 0.0
        self.object_bytes = 0

    @property
    def namespace(self) -> str:
        """The fleet's namespace."""
        if not self._namespace:
            self._namespace = self._bed.namespace("fleet")
        return self._namespace

    def ensure(self, count: int) -> None:
        """Grow the fleet to at least ``count`` Stacks."""
        missing = [f"stack-{i:05d}" for i in range(len(self.names), count)]
        if not missing:
            return
        self._progress(f"seeding {len(missing)} Ready Stacks (fleet of {count})")
        namespace = self.namespace  # made here, not by the threads
        started = time.monotonic()
        with ThreadPoolExecutor(SEED_THREADS) as pool:
            sizes = list(pool.map(lambda name: self._seed(namespace, name), missing))
        took = time.monotonic() - started
        self.seed_seconds += took
        self.names += missing
        self.object_bytes = round(sum(sizes) / len(sizes))
        self._progress(f"seeded {len(missing)} in {took:.1f}s ({len(missing) / took:.0f}/s)")

    def _seed(self, ns: str, name: str) -> int:
        spec = stack_spec(self._bed, name)
        body = manifest(name, spec, finalizers=[FINALIZER])
        self._api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        status = {"status": ready_status(spec, 1)}
        obj = self._api.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, status
        )
        return len(json.dumps(obj))

    def restore(self, names: Iterable[str]) -> None:
        """Put Stacks back to their seeded spec and a Ready status for their generation."""
        for name in names:
            spec = stack_spec(self._bed, name)
            self._api.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
            )
            obj = cast(
                "dict[str, Any]",
                self._api.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name
                ),
            )
            obj["status"] = ready_status(spec, int(obj["metadata"]["generation"]))
            self._api.replace_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, name, obj
            )
