"""The run pod's report channel: progress and the outcome as lines of the pod's log.

The agent in the pod prints one line per report: ``PREFIX`` then compact JSON
(``{"progress": …}`` or ``{"outcome": …}``). ``PodRunner`` reads the pod's log and keeps
only such lines; everything else there (the agent's own log) is ignored.

What the channel cannot be used for: a line names neither a Stack nor a generation. The
operator applies what it reads to the one Stack and generation it created the pod for,
so a program that prints a report line can at most lie about its own run, which it
could anyway. A malformed line is dropped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, get_args

from workspace.runner.types import (
    ErrorKind,
    InstallRecord,
    Operation,
    Outcome,
    Progress,
    ProjectInfo,
    SourceFault,
    Step,
)
from workspace.source import SourceFailure

PREFIX = "@pulumi-stack-operator "
MAX_LINE = 4 * 1024 * 1024  # bytes: longer lines are not reports (and are not kept)


@dataclasses.dataclass(frozen=True)
class JobMark:
    """Where a warm run pod's agent starts a job handed to it: the reports after are its."""

    token: str


def job_line(token: str) -> str:
    """The report line that starts the job ``token`` in a warm run pod's log."""
    return PREFIX + json.dumps({"job": token}, separators=(",", ":"))


def progress_line(progress: Progress) -> str:
    """The report line of ``progress``."""
    body = {
        "step": progress.step,
        "done": progress.resources_done,
        "total": progress.resources_total,
        "failed": progress.resources_failed,
        "current": progress.current,
    }
    if progress.started is not None:
        body["started"] = progress.started.isoformat()
    return PREFIX + json.dumps({"progress": body}, separators=(",", ":"))


def outcome_line(outcome: Outcome) -> str:
    """The report line of ``outcome``."""
    body = {
        "operation": outcome.operation,
        "succeeded": outcome.succeeded,
        "error": outcome.error.value,
        "message": outcome.message,
        "outputs": dict(outcome.outputs),
        "changes": dict(outcome.resource_changes),
        "permalink": outcome.permalink,
        "started": outcome.started.isoformat(),
        "ended": outcome.ended.isoformat(),
        "installs": [_install(record) for record in outcome.installs],
        "cacheBytes": dict(outcome.cache_bytes),
    }
    if outcome.seconds:
        body["seconds"] = {k: round(v, 3) for k, v in outcome.seconds.items()}
    if outcome.project is not None:
        body["project"] = {"name": outcome.project.name, "runtime": outcome.project.runtime}
    if outcome.source is not None:
        failure = outcome.source.failure
        body["source"] = {
            "failure": failure and failure.value,
            "transient": outcome.source.transient,
        }
    return PREFIX + json.dumps({"outcome": body}, separators=(",", ":"), default=str)


def fitted(outcome: Outcome, limit: int = MAX_LINE // 2) -> Outcome:
    """``outcome`` with outputs cut until its line fits in ``limit`` characters.

    The largest outputs first become ``"[truncated: N bytes]"`` (as the status shows
    outputs too large to keep); the operator never drops the line as too long.
    """
    outputs = dict(outcome.outputs)
    sizes = {k: len(json.dumps(v, default=str)) for k, v in outputs.items()}
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if len(outcome_line(dataclasses.replace(outcome, outputs=outputs))) <= limit:
            break
        outputs[key] = f"[truncated: {sizes[key]} bytes]"
    return dataclasses.replace(outcome, outputs=outputs)


def parse_line(line: str) -> Progress | Outcome | JobMark | None:
    """The report a log line carries; None for any other line or a malformed report."""
    if not line.startswith(PREFIX) or len(line) > MAX_LINE:
        return None
    try:
        decoded = json.loads(line[len(PREFIX) :])
        if not isinstance(decoded, dict) or len(decoded) != 1:
            return None
        [(kind, body)] = decoded.items()
        return _REPORTS[kind](body) if kind in _REPORTS else None
    except (ValueError, TypeError, KeyError):
        return None


def _job_mark(body: object) -> JobMark:
    if not isinstance(body, str):
        raise TypeError("a job mark is a token")
    return JobMark(body)


def _progress(body: dict[str, Any]) -> Progress:
    step = body["step"]
    if step not in get_args(Step):
        raise ValueError(step)
    current, started = body.get("current"), body.get("started")
    return Progress(
        step=step,
        resources_done=_count(body["done"]),
        resources_total=_count(body["total"]),
        resources_failed=_count(body["failed"]),
        current=current if isinstance(current, str) else None,
        started=_time(started) if started is not None else None,
    )


def _install(record: InstallRecord) -> dict[str, Any]:
    return {
        "kind": record.kind,
        "tool": record.tool,
        "hit": record.hit,
        "seconds": round(record.seconds, 3),
        "succeeded": record.succeeded,
    }


def _installs(value: object) -> tuple[InstallRecord, ...]:
    if not isinstance(value, list):
        raise TypeError("installs is a list")
    return tuple(
        InstallRecord(
            kind=str(item["kind"]),
            tool=str(item["tool"]),
            hit=bool(item["hit"]),
            seconds=max(0.0, float(item["seconds"])),
            succeeded=bool(item.get("succeeded", True)),
        )
        for item in value
    )


def _project(value: object) -> ProjectInfo | None:
    """The outcome's project (absent in lines of agents older than the field: None)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError("project is an object")
    name, runtime = value["name"], value["runtime"]
    if not isinstance(name, str) or not isinstance(runtime, str):
        raise TypeError("a project's name and runtime are strings")
    return ProjectInfo(name=name, runtime=runtime)


def _outcome(body: dict[str, Any]) -> Outcome:
    operation = body["operation"]
    if operation not in get_args(Operation):
        raise ValueError(operation)
    error = ErrorKind(body["error"])
    outputs, changes = body.get("outputs") or {}, body.get("changes") or {}
    if not isinstance(outputs, dict) or not isinstance(changes, dict):
        raise TypeError("outputs and changes are objects")
    permalink = body.get("permalink")
    cache_bytes = body.get("cacheBytes") or {}
    if not isinstance(cache_bytes, dict):
        raise TypeError("cacheBytes is an object")
    return Outcome(
        operation=operation,
        succeeded=bool(body["succeeded"]) and error is ErrorKind.NONE,
        error=error,
        message=str(body.get("message") or ""),
        outputs=outputs,
        resource_changes={str(k): _count(v) for k, v in changes.items()},
        permalink=permalink if isinstance(permalink, str) else None,
        started=_time(body["started"]),
        ended=_time(body["ended"]),
        installs=_installs(body.get("installs") or []),
        cache_bytes={str(k): _count(v) for k, v in cache_bytes.items()},
        project=_project(body.get("project")),
        seconds=_seconds(body.get("seconds") or {}),
        source=_source(body.get("source")),
    )


def _source(value: object) -> SourceFault | None:
    """The outcome's source fault (absent unless the source failed: None)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("transient"), bool):
        raise TypeError("source is an object with a boolean transient")
    failure = value.get("failure")
    return SourceFault(None if failure is None else SourceFailure(failure), value["transient"])


def _seconds(value: object) -> dict[str, float]:
    """The outcome's phase times (absent in lines of older agents: empty)."""
    if not isinstance(value, dict):
        raise TypeError("seconds is an object")
    return {str(k): max(0.0, float(v)) for k, v in value.items()}


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(value)
    return value


def _time(value: object) -> datetime:
    parsed = datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError(value)
    return parsed


_REPORTS: dict[str, Callable[[Any], Progress | Outcome | JobMark]] = {
    "progress": _progress,
    "outcome": _outcome,
    "job": _job_mark,
}
