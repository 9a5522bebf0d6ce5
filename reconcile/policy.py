"""The operator-wide retry policy and the periods derived from it and a Stack's spec: pure.

``decide`` (is a run due?) and ``verdict`` (what to do about what happened) both time
their answers with these, so a failure's backoff and a Stack's poll period are defined once.
"""

from __future__ import annotations

import dataclasses

from reconcile.spec import StackSpec
from status.conditions import Reason


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """Operator-wide retry settings."""

    retry_base_delay: float = 10.0  # seconds after the first failure, doubling per failure
    max_update_failures: int = 5  # consecutive failures before RetriesExhausted
    wait_poll: float = 30.0  # seconds between checks for a Secret, prerequisite or lock


def backoff(failures: int, spec: StackSpec, policy: Policy) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure.

    ``retry_base_delay · 2^(failures-1)``, capped by ``spec.retryMaxBackoffDurationSeconds``.
    """
    exponent = min(max(failures - 1, 0), 40)
    return float(
        min(policy.retry_base_delay * 2.0**exponent, spec.retry_max_backoff_duration_seconds)
    )


def poll_period(spec: StackSpec) -> float | None:
    """When to look for a new commit again: tracked branches are polled, pinned commits never."""
    return float(spec.resync_frequency_seconds) if spec.tracks_branch else None


def resync_period(spec: StackSpec) -> float | None:
    """When to look again after a success: the poll, or the resync a resyncing Stack asks for."""
    if spec.continue_resync_on_commit_match or spec.tracks_branch:
        return float(spec.resync_frequency_seconds)
    return None


NEEDS_A_CHANGE = frozenset(
    {
        Reason.PROGRAM_INVALID,
        Reason.STACK_NOT_FOUND,
        Reason.INVALID_SPEC,
        Reason.ARTIFACT_DIGEST_MISMATCH,
        Reason.ARTIFACT_UNSAFE,
    }
)
"""Failures no retry can mend: the program, the stack or the spec must change first.

(``InvalidSpec`` from a run: ``spec.repoDir`` names no directory inside the commit.)
"""

STALLED_BY_A_RUN = NEEDS_A_CHANGE | {Reason.DEPENDENCY_INSTALL_FAILED}
"""Reasons of a Stalled condition a run's failure wrote, which only a change can mend.

``DependencyInstallFailed`` stalls only when the install can never work as written (a
lockfile out of step, a version that does not exist, a toolchain the image lacks); a
registry that did not answer is retried, and then Stalled is not written.
"""
