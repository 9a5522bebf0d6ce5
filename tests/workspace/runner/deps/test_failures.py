"""Whether an install failure is retried or stalls, from what the real tools print."""

from __future__ import annotations

import pytest

from workspace.runner.deps.failures import message, permanence, tail
from workspace.runner.deps.types import Permanence

NPM_OUT_OF_SYNC = """npm error code EUSAGE
npm error
npm error `npm ci` can only install packages when your package.json and package-lock.json \
or npm-shrinkwrap.json are in sync. Please update your lock file with `npm install` before \
continuing.
npm error Missing: left-pad@1.3.0 from lock file"""
NPM_NO_VERSION = """npm error code ETARGET
npm error notarget No matching version found for @pulumi/pulumi@99.0.0."""
NPM_BAD_JSON = "npm error code EJSONPARSE\nnpm error JSON.parse Invalid package.json"
NPM_REFUSED = """npm error code ECONNREFUSED
npm error syscall connect
npm error errno ECONNREFUSED
npm error FetchError: request to http://127.0.0.1:9/left-pad failed, reason: connect \
ECONNREFUSED 127.0.0.1:9"""
NPM_DNS = "npm error code EAI_AGAIN\nnpm error request to https://registry.npmjs.org failed"
PIP_MISSING = """ERROR: Could not find a version that satisfies the requirement nope==9 (from \
versions: none)
ERROR: No matching distribution found for nope==9"""
PIP_OFFLINE = """WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, \
status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.\
HTTPSConnection object>: Failed to establish a new connection: [Errno 111] Connection \
refused')': /simple/nope/
ERROR: Could not find a version that satisfies the requirement nope==9 (from versions: none)
ERROR: No matching distribution found for nope==9"""
PIP_BAD_LINE = "ERROR: Invalid requirement: 'pulumi>>=3' (from line 1 of requirements.txt)"
UV_UNSOLVABLE = "  x No solution found when resolving dependencies:\n  Because nope was not found"
GO_SUM = "go: github.com/x/y@v1.0.0: missing go.sum entry for go.mod file"
PLUGIN_404 = (
    "error: [resource plugin kubernetes-4.99.0] downloading from http://127.0.0.1:1/: "
    "404 HTTP error fetching plugin from http://127.0.0.1:1/pulumi-resource-kubernetes-"
    "v4.99.0-linux-amd64.tar.gz"
)


@pytest.mark.parametrize(
    "output",
    [
        NPM_OUT_OF_SYNC,
        NPM_NO_VERSION,
        NPM_BAD_JSON,
        PIP_MISSING,
        PIP_BAD_LINE,
        UV_UNSOLVABLE,
        GO_SUM,
        PLUGIN_404,
    ],
)
def test_what_can_never_install_as_written_is_permanent(output: str) -> None:
    """A lockfile out of step, a missing version or package, a bad file: wait for a change."""
    assert permanence(output) is Permanence.PERMANENT


@pytest.mark.parametrize("output", [NPM_REFUSED, NPM_DNS, PIP_OFFLINE, "something else broke"])
def test_unreachable_registries_and_unknown_failures_are_retried(output: str) -> None:
    """A registry that did not answer is retried, even if the tool then says 'not found'."""
    assert permanence(output) is Permanence.TRANSIENT


def test_the_tail_keeps_the_last_lines_and_masks_url_credentials() -> None:
    """The message ends with the tool's own last lines, without a token in a URL."""
    output = "\n".join(f"line {n}" for n in range(30)) + "\n\nfrom https://me:s3cret@host/x\n"
    text = tail(output, lines=3)
    assert text.splitlines() == ["line 28", "line 29", "from https://***@host/x"]
    assert "s3cret" not in text


def test_the_message_leads_with_the_tools_own_error_line() -> None:
    """The CLI's last ``error:`` line comes first (Events cut messages at 1024 characters)."""
    output = (
        "Will retry in 80ms [1/5]error downloading provider: dial tcp: no such host\n"
        "Will retry in 1.28s [5/5]error: installing packages: failed to download plugin: "
        "kubernetes-4.25.0: failed all 5 attempts\n"
    )
    text = message("installing plugins (pulumi install)", output)
    first, *rest = text.splitlines()
    assert first == (
        "installing plugins (pulumi install) failed: error: installing packages: failed to "
        "download plugin: kubernetes-4.25.0: failed all 5 attempts"
    )
    assert rest == [line for line in output.splitlines() if line]
    assert message("npm ci", "no marker here") == "npm ci failed:\nno marker here"


def test_a_long_npm_error_keeps_its_start_not_only_its_usage_text() -> None:
    """The npm CLI prints its whole usage after the error: the excerpt starts at the error."""
    usage = "\n".join(f"npm error   --option-{n}\nnpm error" for n in range(40))
    output = f'{NPM_OUT_OF_SYNC}\nnpm error\n{usage}\nnpm error Run "npm help ci" for more info'
    text = message("installing dependencies (npm ci)", output)
    lines = text.splitlines()
    assert lines[0] == (
        "installing dependencies (npm ci) failed: npm EUSAGE: `npm ci` can only install "
        "packages when your package.json and package-lock.json or npm-shrinkwrap.json are in "
        "sync. Please update your lock file with `npm install` before continuing."
    )
    assert "npm error Missing: left-pad@1.3.0 from lock file" in lines
    assert "…" in lines
    assert lines[-1] == 'npm error Run "npm help ci" for more info'
    assert len(lines) == 1 + 15 + 1 + 5
