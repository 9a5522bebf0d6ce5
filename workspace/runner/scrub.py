"""Keeping secrets out of messages, logs and outputs: the ``Scrubber``."""

from __future__ import annotations

import json
import re

from workspace.runner.types import MASK, UpdateRequest

# Env names whose values are locations, not secrets; scrubbing them would garble messages.
_PLAIN_ENV = frozenset({"PATH", "HOME", "PULUMI_HOME", "PULUMI_PYTHON_CMD"})


class Scrubber:
    """Replaces values of one request that may be secret with ``"[secret]"``.

    Scrubbed: every non-empty ``secret_config`` value, and every ``env`` value longer
    than 3 characters except booleans, numbers, the locations in ``_PLAIN_ENV`` and a
    backend URL without userinfo (the request cannot say which env values came from
    Secrets, so all others are suspect).
    Also scrubbed: each value's JSON-escaped form (how multi-line values appear in JSON
    output). Longest values first, so a secret containing another is replaced whole.
    """

    def __init__(self, request: UpdateRequest) -> None:
        """Collect the request's values that may be secret."""
        values = {v for v in request.secret_config.values() if v}
        values |= {v for k, v in request.env.items() if _may_be_secret(k, v)}
        variants = values | {json.dumps(v)[1:-1] for v in values}
        alternatives = sorted(variants, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, alternatives))) if variants else None

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced."""
        return self._pattern.sub(MASK, text) if self._pattern else text

    def finds(self, value: object) -> bool:
        """Whether a JSON value contains a secret anywhere."""
        if self._pattern is None:
            return False
        return bool(self._pattern.search(json.dumps(value, default=str, ensure_ascii=False)))

    def output(self, value: object, *, secret: bool) -> object:
        """An output value to report: ``MASK`` if it is secret or holds a secret value.

        Pulumi does not always carry secretness through: a dynamic provider's outputs
        derived from secret config are stored (and reported in events) as plain values.
        So any output containing a secret value of the request is masked.
        """
        return MASK if secret or self.finds(value) else value


def _may_be_secret(name: str, value: str) -> bool:
    if name in _PLAIN_ENV or len(value) <= 3:
        return False
    if name == "PULUMI_BACKEND_URL" and "@" not in value:  # a location, unless it has userinfo
        return False
    return value.lower() not in ("true", "false") and not value.isdigit()
