"""Keeping secrets (and terminal codes) out of messages, logs and outputs: the ``Scrubber``.

What is masked (replaced with ``"[secret]"``):

* **Secret values, whole**: every non-empty ``secret_config`` value, and every ``env``
  value that came from a Secret (``UpdateRequest.secret_env``) or whose name says it is a
  credential (``*TOKEN*``, ``*PASSWORD*``, ``*PASSPHRASE*``, ``*SECRET*``, ``*_KEY``,
  ``AUTH`` as a word of the name, …), unless the env value cannot be a secret (a flag, a
  number, 3 characters or fewer: ``could_be_secret``).
  Each also in the forms it takes in other text: JSON-escaped (multi-line values in JSON
  output) and percent-encoded (in URLs). Longest first, so a secret holding another goes
  whole. A value shorter than ``SHORT`` characters is masked only where it stands alone
  (not inside a longer word or number), so ``"abc"`` does not garble ``"abcdef"``.
* **The secret lines of a multi-line secret value**: a kubeconfig or a key file as secret
  config may show up a line at a time. Masked on its own: a line's value under a key that
  names a secret (``client-key-data``, ``token``, ``password``, ``client-secret``: at least
  ``SHORT`` characters), and a bare line (a key file's body) of key material (at least
  ``FRAGMENT`` characters of a base64/hex/token alphabet, not a URL). The rest of the
  value (a server URL, user, cluster and context names, a YAML key) is not a secret by
  itself and stays readable wherever else it appears.
* **Known secret shapes, anywhere**: a URL's userinfo (``https://[secret]@host``) unless
  it is a plain user name alone (lower case, no password: ``ssh://git@host`` stays), PEM
  private key blocks,
  ``Bearer``/``Basic`` credentials (not an English word after them: "Basic
  authentication" stays), Pulumi and GitHub access tokens, AWS access key ids.

What is not masked: substrings that merely also occur inside a secret. A plain env value
(a registry or mirror URL from ``workspaceTemplate``, the pod's ``KUBERNETES_SERVICE_HOST``)
is not a secret, so a failure still names the registry, mirror and package it failed on.
When the request does not say where its env came from (``secret_env`` is None), every
env value may be secret (longer than 3 characters, not a boolean, number or a location in
``_PLAIN_ENV``, a backend URL only with userinfo), as before the provenance was known.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from controller.text import plain
from workspace.runner.job import could_be_secret
from workspace.runner.types import MASK, UpdateRequest

SHORT = 8  # a secret value shorter than this is masked only where it stands alone
FRAGMENT = 16  # the shortest line of a multi-line secret masked on its own

# Env names whose values are locations, not secrets; scrubbing them would garble messages.
_PLAIN_ENV = frozenset({"PATH", "HOME", "PULUMI_HOME", "PULUMI_PYTHON_CMD"})

_CREDENTIAL_NAME = re.compile(
    r"TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|PRIVATE|(^|_)(API_?|ACCESS_?)?KEY($|_)"
    r"|(^|_)AUTH($|_)",
    re.IGNORECASE,
)

_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----", re.DOTALL
        ),
        MASK,
    ),
    (
        re.compile(
            r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)"
            r"(?:[^/\s@:]*:[^/\s@]*|(?![a-z][a-z0-9._-]{0,31}@)[^/\s@:]+)@"
        ),
        rf"\g<scheme>{MASK}@",
    ),
    (
        re.compile(
            r"\b(?P<kind>Bearer|Basic) (?![A-Z]?[a-z]+(?![A-Za-z0-9._~+/=-]))[A-Za-z0-9._~+/=-]{8,}"
        ),
        rf"\g<kind> {MASK}",
    ),
    (re.compile(r"\bpul-[0-9a-f]{40}\b"), MASK),
    (re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"), MASK),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
)

_KEY_MATERIAL = re.compile(rf"[A-Za-z0-9+/=_.~-]{{{FRAGMENT},}}")
_LINE_VALUE = re.compile(
    r"^\s*(?:-\s+)?(?:(?P<key>[\w.-]+)\s*[:=]\s*)?[\"']?(?P<value>[^\"'\s]*)[\"']?\s*$"
)
# Keys of a multi-line secret whose values are secrets (kubeconfig, INI and env files).
_SECRET_KEY = re.compile(
    r"data$|token|passw|secret|credential|private|(^|[-_.])(api[-_]?)?key($|[-_.])", re.IGNORECASE
)


class Scrubber:
    """Masks one request's secret values and known secret shapes (see the module doc)."""

    def __init__(self, request: UpdateRequest) -> None:
        """Collect the request's secret values."""
        values = secret_values(request.secret_config, request.env, request.secret_env)
        self._pattern = _alternatives(values)

    def scrub(self, text: str) -> str:
        """``text`` as plain text (``controller.text.plain``), secret values and shapes replaced.

        Every text of a program that reaches a message or a log line passes here, so this
        is also where terminal codes leave it (before masking: a colour code inside a
        secret must not hide it).
        """
        return self._mask(plain(text))

    def finds(self, value: object) -> bool:
        """Whether a JSON value contains a secret value or shape anywhere."""
        text = json.dumps(value, default=str, ensure_ascii=False)
        return self._mask(text) != text

    def _mask(self, text: str) -> str:
        """``text`` with every secret value and known secret shape replaced."""
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        for shape, replacement in _SHAPES:
            text = shape.sub(replacement, text)
        return text

    def output(self, value: object, *, secret: bool) -> object:
        """An output value to report: ``MASK`` if it is secret or holds a secret.

        Pulumi does not always carry secretness through: a dynamic provider's outputs
        derived from secret config are stored (and reported in events) as plain values.
        So any output containing a secret value of the request is masked.
        """
        return MASK if secret or self.finds(value) else value


def secret_values(
    secret_config: Mapping[str, str],
    env: Mapping[str, str],
    secret_env: Iterable[str] | None,
) -> set[str]:
    """The values to mask whole: secret config, secret env, and their key-material lines."""
    values = {v for v in secret_config.values() if v}
    if secret_env is None:
        values |= {v for k, v in env.items() if _may_be_secret(k, v)}
    else:
        from_secrets = set(secret_env)
        values |= {
            v
            for k, v in env.items()
            if could_be_secret(v) and (k in from_secrets or is_credential(k))
        }
    return values | {line for v in values if "\n" in v for line in _key_lines(v)}


def is_credential(name: str) -> bool:
    """Whether an env name says its value is a credential (``GITHUB_TOKEN``, ``API_KEY``)."""
    return bool(_CREDENTIAL_NAME.search(name))


def _key_lines(value: str) -> Iterable[str]:
    """The secret part of each line of a multi-line value (see the module doc)."""
    for line in value.splitlines():
        found = _LINE_VALUE.match(line)
        if found is None or "://" in found["value"]:
            continue
        key, part = found["key"], found["value"]
        bare = key is None and _KEY_MATERIAL.fullmatch(part)
        if bare or (key is not None and _SECRET_KEY.search(key) and len(part) >= SHORT):
            yield part


def _alternatives(values: set[str]) -> re.Pattern[str] | None:
    """One pattern for every value and its escaped forms, longest first."""
    variants = set(values)
    variants |= {json.dumps(v)[1:-1] for v in values}
    variants |= {urllib.parse.quote(v, safe="") for v in values}
    if not variants:
        return None
    ordered = sorted(variants, key=len, reverse=True)
    return re.compile("|".join(_alternative(v) for v in ordered))


def _alternative(value: str) -> str:
    """``value`` as a regex; a short one only where no letter or digit touches it."""
    escaped = re.escape(value)
    return escaped if len(value) >= SHORT else rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])"


def _may_be_secret(name: str, value: str) -> bool:
    """The rule for env of unknown provenance: anything but flags, numbers and locations."""
    if name in _PLAIN_ENV:
        return False
    if name == "PULUMI_BACKEND_URL" and "@" not in value:  # a location, unless it has userinfo
        return False
    return could_be_secret(value)
