"""Whether a failed install can succeed by itself later, from what the tool printed.

Permanent: the manifest or lockfile can never install as written (a lockfile out of step
with its manifest, a version or package that does not exist, a file that does not
parse, an unsolvable set of requirements). Transient: a registry did not answer (refused,
reset, timed out, name not resolved, a 5xx). Anything else is transient too: a retry with
backoff costs little, and the failure cap stalls the Stack if it never works.
A network failure wins over a permanent-looking line, since a registry that did not answer
makes tools report packages as missing.
"""

from __future__ import annotations

import re

from workspace.runner.deps.types import Permanence
from workspace.source.url import redact_url

TAIL_LINES = 20  # of the tool's output in a failure's message

_NETWORK = re.compile(
    r"ECONNREFUSED|ECONNRESET|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|EHOSTUNREACH"
    r"|socket hang up|network timeout|\bE5\d\d\b|\b50[0234] (?:Internal|Bad|Service|Gateway)"
    r"|NewConnectionError|Max retries exceeded|ConnectTimeoutError|ReadTimeoutError"
    r"|Temporary failure in name resolution|Connection refused|Connection reset"
    r"|Network is unreachable|ProxyError|dial tcp|i/o timeout|TLS handshake timeout"
    r"|error sending request|connection closed before message completed",
    re.IGNORECASE,
)
_PERMANENT = re.compile(
    # npm
    r"\bEUSAGE\b|\bEJSONPARSE\b|\bETARGET\b|\bE404\b|\bERESOLVE\b|\bEINVALIDPACKAGENAME\b"
    r"|can only install packages when your package\.json and package-lock\.json"
    r"|Invalid Version|No matching version found"
    # yarn, pnpm
    r"|Your lockfile needs to be updated|The lockfile would have been modified"
    r"|Couldn't find any versions for|ERR_PNPM_OUTDATED_LOCKFILE|ERR_PNPM_NO_MATCHING_VERSION"
    r"|ERR_PNPM_FETCH_404|ERR_PNPM_LOCKFILE_BREAKING_CHANGE"
    # pip, uv, poetry
    r"|No matching distribution found|ResolutionImpossible|Invalid requirement"
    r"|Could not open requirements file|InvalidRequirement|No solution found when resolving"
    r"|needs to be updated, but `--frozen`|needs to be updated, but `--locked`"
    r"|Failed to parse|pyproject\.toml changed significantly|SolverProblemError"
    r"|is not compatible with the current lock file|TOML parse error|Invalid TOML"
    # go
    r"|missing go\.sum entry|updates to go\.mod needed|checksum mismatch|invalid version"
    r"|unknown revision|go\.mod:\d+: |malformed module path|no matching versions for query"
    # plugins from a mirror or the default servers
    r"|404 HTTP error fetching plugin|plugin asset '[^']+' not found"
    r"|\[404\]|404 Not Found",
    re.IGNORECASE,
)


def permanence(output: str) -> Permanence:
    """Whether the failure that printed ``output`` is permanent or transient."""
    if _NETWORK.search(output):
        return Permanence.TRANSIENT
    return Permanence.PERMANENT if _PERMANENT.search(output) else Permanence.TRANSIENT


# Where a tool's own error text starts on a line (the CLI prefixes retries to it).
_HEADLINE = re.compile(r"(?:\berror: |\bERROR: |^go: |^\s*[x\u00d7] )(.*)")
_NPM_CODE = re.compile(r"^npm (?:error|ERR!) code (\S+)")
_NPM_LINE = re.compile(r"^npm (?:error|ERR!) ?")
EXCERPT_HEAD, EXCERPT_TAIL = 15, 5  # lines of a long error kept from its start and its end


def message(what: str, output: str) -> str:
    """``<what> failed: <the tool's error line>``, then an excerpt of its output.

    The error line comes first so that it survives where messages are cut (Events keep
    1024 characters). A long output's excerpt starts where the tool's error does (npm
    prints its usage after it) and keeps its first and last lines; URL credentials are
    masked.
    """
    lines = _lines(output)
    headline, body = _headline(lines), lines
    if len(body) > EXCERPT_HEAD + EXCERPT_TAIL:
        first = next((i for i, line in enumerate(lines) if _is_error(line)), 0)
        body = lines[first:]
    if len(body) > EXCERPT_HEAD + EXCERPT_TAIL:
        body = [*body[:EXCERPT_HEAD], "…", *body[-EXCERPT_TAIL:]]
    title = f"{what} failed: {headline}" if headline else f"{what} failed:"
    return redact_url("\n".join([title, *body]))


def _lines(output: str) -> list[str]:
    """Non-blank lines, without npm's empty ``npm error`` separators."""
    kept = [line.rstrip() for line in output.splitlines() if line.strip()]
    return [line for line in kept if _NPM_LINE.sub("", line).strip()]


def _is_error(line: str) -> bool:
    return bool(_NPM_CODE.match(line) or _HEADLINE.search(line.strip()))


def _headline(lines: list[str]) -> str:
    """The npm error code with its first explanation, else the last ``error:``-like line."""
    for index, line in enumerate(lines):
        code = _NPM_CODE.match(line)
        if code:
            after = [_NPM_LINE.sub("", rest).strip() for rest in lines[index + 1 : index + 2]]
            return f"npm {code.group(1)}: {after[0]}" if after else f"npm {code.group(1)}"
    found = [m.group(0) for line in lines if (m := _HEADLINE.search(line.strip()))]
    return found[-1] if found else ""


def tail(output: str, lines: int = TAIL_LINES) -> str:
    """The last non-blank ``lines`` of ``output``, with URL credentials masked."""
    kept = [line.rstrip() for line in output.splitlines() if line.strip()]
    return redact_url("\n".join(kept[-lines:]))
