"""Stacks a ``PULUMI_HOME`` has selected before, so later runs skip ``pulumi stack select``.

Every command the runner sends takes ``--stack``; a ``select`` before it only proves the
stack exists (or, failing that, leads to ``stack init``), at the cost of one more CLI
start (~0.3 s). After a select or init succeeded, ``KnownStack.remember`` writes an empty
marker in the runner's shared home (the one holding the plugin store: a run pod's is on
the namespace's cache volume, so it outlives the pod), named by a hash of what identifies
the stack: backend URL, project, stack name and secrets provider (a different backend or
provider is a different marker; the file holds no value of any of them). While the marker
exists the select is skipped. Two Stacks naming the same stack on the same backend share
a marker, as they share the stack.

A stack can still vanish behind the runner's back (``pulumi stack rm`` by hand, a wiped
backend): a later command then reports it missing, and the attempt forgets the marker
and selects (or creates) it again, once (see ``OperationRun``). ``destroy`` forgets it after
``stack rm``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

KNOWN_DIR = "known-stacks"


class KnownStack:
    """The marker of one stack in one home."""

    def __init__(
        self, home: Path, backend: str, project: str, stack: str, provider: str | None
    ) -> None:
        """The marker for ``stack`` of ``project`` on ``backend`` (with ``provider``)."""
        key = json.dumps([backend, project, stack, provider or ""])
        self.path = home / KNOWN_DIR / hashlib.sha256(key.encode()).hexdigest()

    def known(self) -> bool:
        """True when a select or init of this stack succeeded with this home before."""
        return self.path.exists()

    def remember(self) -> None:
        """Record that the stack exists (best effort: a failure only costs a select)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError:
            return

    def forget(self) -> None:
        """Drop the marker: the next open selects the stack again."""
        self.path.unlink(missing_ok=True)
