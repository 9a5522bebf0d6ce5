"""The handover of a run to a warm run pod: what the operator sends ``agent take``.

One line of JSON (``Delivery``): a mark (letters and digits: the ``job_line`` that starts
the run's reports in the pod's log), the operation, the job document (``PSO_JOB``) and
the trace context's variables. Never a secret value: the job document holds none, and the
Secret-backed variables are the pod's own (``pulumi_stack_operator.warm``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

OPERATIONS: Final = ("up", "preview", "destroy")
ACCEPTED_LINE: Final = "accepted"  # the first line ``agent take`` prints when it took the run
KEEP_WARM_ENV: Final = "PSO_KEEP_WARM"  # the run container's window, seconds: set, it waits


@dataclass(frozen=True)
class Delivery:
    """One job handed to a warm agent.

    Its ``mark`` (in ``job_line``), the operation, the job document (``PSO_JOB``) and the
    trace context's variables (may be empty).
    """

    mark: str
    operation: str
    job: str
    trace: Mapping[str, str]

    def encode(self) -> str:
        """One line of JSON."""
        body = {"mark": self.mark, "operation": self.operation, "job": self.job}
        return json.dumps({**body, "trace": dict(self.trace)}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Delivery:
        """The delivery of ``text``; ``ValueError`` when it is not one."""
        try:
            body = json.loads(text) if text.strip() else {}
            mark, operation, job, trace = (
                body["mark"],
                body["operation"],
                body["job"],
                body.get("trace") or {},
            )
        except (TypeError, KeyError, ValueError) as err:
            msg = f"not a delivery: {err}"
            raise ValueError(msg) from None
        if not isinstance(mark, str) or not mark.isalnum():
            msg = "a delivery's mark is letters and digits"
            raise ValueError(msg)
        if operation not in OPERATIONS or not isinstance(job, str):
            msg = f"a delivery's operation is one of {', '.join(OPERATIONS)}"
            raise ValueError(msg)
        if not isinstance(trace, dict) or not all(isinstance(v, str) for v in trace.values()):
            msg = "a delivery's trace is an object of strings"
            raise ValueError(msg)
        return cls(mark, operation, job, trace)

    def environment(
        self, environ: Mapping[str, str], trace_names: tuple[str, ...]
    ) -> dict[str, str]:
        """``environ`` with this job's variables in place of the pod's first job's."""
        kept = {k: v for k, v in environ.items() if k not in trace_names}
        return kept | {"PSO_JOB": self.job, "PSO_OPERATION": self.operation} | dict(self.trace)
