"""A run pod's environment file: ``NAME=value`` lines its init containers wrote.

Role: the Pulumi Kubernetes Operator's way to hand a run values made at run time (a
passphrase fetched from a vault, a short-lived token): every container of a run pod has
``PULUMI_ENV`` naming a file on the pod's ``share`` volume (``ENV_FILE``); the Stack's
init containers append lines to it, and the agent reads it into the run's environment
(``read``). ``parse`` is the pure part.

The format is the one dotenv tools write, as far as a shell's ``echo`` and ``printf``
produce it: ``NAME=value`` per line, an optional ``export`` before the name, blank lines
and ``#`` comments skipped, a value in single quotes taken as written, one in double
quotes with the escapes backslash-n, backslash-quote and a doubled backslash undone;
unquoted values end at `` #``. A later line for a name wins.

Guarantees: a value never appears in an error (errors name the line and the name);
names the runner sets itself (``RESERVED``, and any ``PSO_`` one) are refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

SHARE_VOLUME: Final = "share"
"""The name of the run pod's volume the file is on (the Pulumi Kubernetes Operator's)."""
SHARE_PATH: Final = "/share"
"""Where every container of a run pod mounts ``SHARE_VOLUME``."""
ENV_FILE: Final = f"{SHARE_PATH}/.env"
"""The file ``PULUMI_ENV`` names."""
ENV_VARIABLE: Final = "PULUMI_ENV"
RESERVED: Final = frozenset({"HOME", "TMPDIR", "PULUMI_HOME", ENV_VARIABLE})
"""Names the runner sets for the run itself (and every name starting with ``PSO_``)."""
MAX_BYTES: Final = 256 * 1024
"""The largest file read: a run's environment, not a data channel."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", '"': '"', "\\": "\\"}


class EnvFileError(ValueError):
    """The file cannot be used; the message names the line and the name, never a value."""


def read(path: Path) -> dict[str, str]:
    """The variables of the file at ``path``; empty when there is none.

    Raises:
        EnvFileError: it is too large, not UTF-8, or a line is not ``NAME=value`` or sets
            a reserved name.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as err:
        msg = f"{path}: cannot be read ({type(err).__name__})"
        raise EnvFileError(msg) from None
    if len(data) > MAX_BYTES:
        msg = f"{path}: {len(data)} bytes, more than the {MAX_BYTES} a run's environment may take"
        raise EnvFileError(msg)
    try:
        return parse(data.decode(), str(path))
    except UnicodeDecodeError:
        msg = f"{path}: not UTF-8 text"
        raise EnvFileError(msg) from None


def parse(text: str, where: str = ENV_FILE) -> dict[str, str]:
    """The variables ``text`` sets (see the module docstring).

    Raises:
        EnvFileError: a line that is not ``NAME=value`` or sets a reserved name.
    """
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, value = _assignment(line, f"{where}, line {number}")
        found[name] = value
    return found


def _assignment(line: str, where: str) -> tuple[str, str]:
    line = line.removeprefix("export ").lstrip()
    name, equals, rest = line.partition("=")
    name = name.strip()
    if not equals or _NAME.fullmatch(name) is None:
        msg = f"{where}: not NAME=value (a name is letters, digits and _)"
        raise EnvFileError(msg)
    if name in RESERVED or name.startswith("PSO_"):
        msg = f"{where}: {name} is set by the runner itself: write another name"
        raise EnvFileError(msg)
    return name, _value(rest.strip(), where, name)


def _value(raw: str, where: str, name: str) -> str:
    if raw[:1] == "'":
        return _quoted(raw, "'", where, name)
    if raw[:1] == '"':
        return _unescaped(_quoted(raw, '"', where, name))
    return raw.split(" #", 1)[0].rstrip()


def _quoted(raw: str, quote: str, where: str, name: str) -> str:
    end = raw.find(quote, 1)
    while quote == '"' and end > 0 and _escaped(raw, end):
        end = raw.find(quote, end + 1)
    if end < 0:
        msg = f"{where}: the value of {name} has no closing {quote}"
        raise EnvFileError(msg)
    after = raw[end + 1 :].strip()
    if after and not after.startswith("#"):
        msg = f"{where}: text after the quoted value of {name}"
        raise EnvFileError(msg)
    return raw[1:end]


def _escaped(raw: str, index: int) -> bool:
    """Whether the character at ``index`` follows an odd number of backslashes."""
    slashes = len(raw[:index]) - len(raw[:index].rstrip("\\"))
    return slashes % 2 == 1


def _unescaped(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), value)
