"""Running ``pulumi`` command lines for one operation, through ``workspace.process``.

Every command runs the runner's absolute ``pulumi`` with ``--non-interactive`` in the
request's work dir, in a process group of its own. Its environment is the request's
``env`` over an allow-list of the operator's own variables (``INHERITED_ENV``), with the
CLI's directory first on ``PATH`` (so it finds its language hosts and bundled plugins):
nothing else of the operator's (``KUBERNETES_*``, ``KUBECONFIG``, ``PSO_*``, tokens)
reaches the CLI or the programs it runs. ``stop`` interrupts a command the way Ctrl-C
does (SIGINT; after the grace, SIGKILL of the CLI and all its plugins), and a command
does not start once ``stop`` is set, unless it is short bookkeeping that must complete.
A command's output comes back as plain text, without terminal codes (``controller.text.plain``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from controller.clock import Clock, RealClock
from controller.text import plain
from workspace import process

log = structlog.get_logger(__name__)

# The operator's own environment variables the CLI (and so every program) inherits: how to
# find executables, locale and time zone, where temporary files go, CA bundles, proxies
# (both spellings), and the operator-wide Pulumi settings of ``pulumi_stack_operator.wiring``. All
# others stay in the operator: the Kubernetes service account's ``KUBERNETES_*``,
# ``KUBECONFIG``, ``PSO_*`` flags, and any credential it was started with. ``HOME`` and
# ``PULUMI_HOME`` are the Stack's own; the request's ``env`` comes on top of all this.
INHERITED_ENV = frozenset(
    {
        "PATH",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "PULUMI_PYTHON_CMD",
        "PULUMI_SKIP_UPDATE_CHECK",
        # Where installs find packages and which CAs they trust: an installation's registry
        # mirrors and proxy CAs, set once on the operator (a Stack's envRefs may override).
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "PIP_CERT",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_TRUSTED_HOST",
        "UV_DEFAULT_INDEX",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "NPM_CONFIG_REGISTRY",
        "npm_config_registry",
        "YARN_NPM_REGISTRY_SERVER",
        "GOPROXY",
        "GOPRIVATE",
        "GONOSUMDB",
        "GONOPROXY",
        "GOSUMDB",
    }
)
INHERITED_ENV_PREFIXES = ("LC_",)  # LC_CTYPE, LC_MESSAGES, ...
# Set for every command: the hidden ``--event-log`` flag needs the first; the second is
# what the CLI expects of a program driving it (no prompts, no update notices). The third
# has a stack settings file without ``encryptionsalt`` (a fresh checkout's) take the salt
# of the stack's state: otherwise the CLI mints a new one, derives the passphrase's key
# twice per command (about 0.17 s of CPU each) and re-encrypts the stack on every run.
FIXED_ENV = {
    "PULUMI_DEBUG_COMMANDS": "true",
    "PULUMI_AUTOMATION_API": "true",
    "PULUMI_FALLBACK_TO_STATE_SECRETS_MANAGER": "true",
}


def inherited_env() -> dict[str, str]:
    """The operator's variables every CLI gets: ``INHERITED_ENV`` and ``LC_*`` ones."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in INHERITED_ENV or name.startswith(INHERITED_ENV_PREFIXES)
    }


class CliError(Exception):
    """A command exited non-zero; ``result`` has its output."""

    def __init__(self, words: str, result: process.Completed) -> None:
        """``pulumi <words>`` ended with ``result``."""
        super().__init__(f"`pulumi {words}` exited with code {result.code}")
        self.result = result


class CliStoppedError(Exception):
    """``stop`` was set before a command could start; ``words`` is its subcommand."""

    def __init__(self, words: str) -> None:
        """``pulumi <words>`` did not start."""
        super().__init__(words)
        self.words = words


@dataclass(frozen=True)
class CliContext:
    """What every command of one operation shares.

    ``binary`` is the absolute path of ``pulumi``; ``env`` goes over ``inherited_env()``;
    ``on_line`` gets every output line (stdout and stderr) while a command runs.
    ``clock`` times each command (the debug line ``pulumi command``: its words, exit code
    and seconds), so that a run's time can be split between the CLI and the rest.
    """

    binary: str
    work_dir: Path
    env: Mapping[str, str] = field(repr=False)  # holds secrets
    stop: threading.Event
    grace: float
    on_line: Callable[[str], None] | None = None
    clock: Clock = field(default_factory=RealClock)


class Cli:
    """Runs the commands of one operation, one at a time; remembers the last one's result."""

    def __init__(self, context: CliContext) -> None:
        """Run commands as ``context`` says."""
        self._context = context
        self.interrupted = False  # a command of this operation was interrupted or not started
        self.last: process.Completed | None = None
        self.seconds = 0.0  # every command's time so far, on the context's clock

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: str | None = None,
        interruptible: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> process.Completed:
        """Run ``pulumi <args>``; its result, or ``CliError`` on a non-zero exit.

        The result's output is plain text (``controller.text.plain``): the CLI runs with
        ``--color never`` where it takes it, but prints what a language host or plugin
        wrote, colours included.

        ``interruptible=False`` is for short read-only or finishing bookkeeping: it starts
        and completes even after ``stop``. Raises ``CliStoppedError`` (nothing ran) when
        ``stop`` is set before an interruptible command starts. ``env`` is added to this
        command's environment only.
        """
        self.last = None
        # The subcommand only: the words before the first flag (a flag's value, such as
        # the update message, is not part of the command's name).
        words = " ".join(itertools.takewhile(lambda arg: not arg.startswith("-"), args))
        stop = self._context.stop if interruptible else None
        command = process.Command(
            [self._context.binary, *_non_interactive(args)],
            cwd=self._context.work_dir,
            env={**self._env(), **(env or {})},
            stdin=stdin,
            grace=self._context.grace,
        )
        output = process.Output(self._context.on_line, self._context.on_line)
        started = self._context.clock.now()
        try:
            result = process.run(command, stop=stop, output=output)
        except process.StoppedError as err:
            self.interrupted = True
            raise CliStoppedError(words) from err
        seconds = round(self._context.clock.now() - started, 3)
        self.seconds += seconds
        log.debug("pulumi command", command=words, code=result.code, seconds=seconds)
        result = dataclasses.replace(
            result, stdout=plain(result.stdout), stderr=plain(result.stderr)
        )
        self.last = result
        self.interrupted |= result.interrupted
        if result.code != 0:
            raise CliError(words, result)
        return result

    def environment(self) -> dict[str, str]:
        """The whole environment of every command (secrets included: never log it)."""
        return self._env()

    def _env(self) -> dict[str, str]:
        env = {**inherited_env(), **self._context.env, **FIXED_ENV}
        binary = Path(self._context.binary)
        if binary.is_absolute():  # plugins next to the binary come first
            env["PATH"] = os.pathsep.join([str(binary.parent), env.get("PATH", "")])
        return env


def _non_interactive(args: Sequence[str]) -> list[str]:
    """Put ``--non-interactive`` first unless present before a ``--`` separator."""
    end = list(args).index("--") if "--" in args else len(args)
    return list(args) if "--non-interactive" in args[:end] else ["--non-interactive", *args]
