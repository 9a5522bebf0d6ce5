"""A program's dependencies, installed (or found installed) before its operation runs.

``Installer.prepared`` plans the install for the program's runtime (``nodejs``,
``python``, ``go``; other runtimes install nothing), finds the environment in the store
or makes it, links it into the program's directory, and holds it until the operation
ends, so that eviction never removes an environment in use. While a tool runs,
``on_install`` hears what runs and since when, at once and then every ``TICK`` seconds,
so the status can say "installing dependencies (npm ci), 12s". The records say what was a
cache hit or a miss, what ran and how long it took (the metrics); ``usage`` the bytes the
store holds after it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import structlog

from controller.clock import Clock, RealClock
from workspace.runner.deps import golang, nodejs, python
from workspace.runner.deps.downloads import compile_cache_env, download_env
from workspace.runner.deps.failures import message, permanence
from workspace.runner.deps.plan import InstallPlan
from workspace.runner.deps.store import DependencyStore, Entry, Usage
from workspace.runner.deps.tools import ToolFailedError, Tools
from workspace.runner.deps.types import Activation, DependencyError, Permanence
from workspace.runner.project import Project
from workspace.runner.types import InstallRecord

log = structlog.get_logger(__name__)

TICK = 5.0  # seconds between two reports of a running install
PLANNERS: dict[str, Callable[[Project, Tools], InstallPlan | None]] = {
    "nodejs": nodejs.plan,
    "python": python.plan,
    "go": golang.plan,
}
OnInstall = Callable[[str, datetime], None]
"""Told what is being installed (``installing dependencies (npm ci)``) and since when."""


@dataclass
class Prepared:
    """An operation's installed dependencies.

    ``activation`` makes the program use them (its links already made); ``plan`` is None
    when nothing was to be installed; ``records`` are the steps for the metrics;
    ``usage`` the store's bytes, measured after an install (None after a hit).
    """

    activation: Activation = field(default_factory=Activation)
    plan: InstallPlan | None = None
    records: list[InstallRecord] = field(default_factory=list)
    usage: Usage | None = None


class Installer:
    """Installs programs' dependencies into one store (see the module docstring)."""

    def __init__(self, store: DependencyStore, clock: Clock | None = None) -> None:
        """Keep environments and download caches in ``store``; time installs on ``clock``."""
        self.store = store
        self.clock: Clock = clock or RealClock()

    def environment(self, owner: str) -> dict[str, str]:
        """Variables every tool and CLI of ``owner``'s runs gets: the download caches.

        And the compile cache of TypeScript programs, one per ``owner`` (a Stack's own
        identity: ``downloads.compile_cache_env``).
        """
        return download_env(self.store) | compile_cache_env(self.store, owner)

    @contextlib.contextmanager
    def prepared(self, project: Project, tools: Tools, on_install: OnInstall) -> Iterator[Prepared]:
        """Install (or find) the program's dependencies and hold them for the block.

        Raises ``DependencyError`` when they cannot be installed (the message has what
        ran and the tool's last lines), ``ToolStoppedError`` when ``tools.stop`` ended it.
        """
        planner = PLANNERS.get(project.runtime)
        plan = planner(project, tools) if planner else None
        if plan is None:
            yield Prepared()
            return
        prepared = Prepared(plan=plan)
        entry = self.store.entry(plan.kind, plan.key)
        clock = self.clock
        started = clock.now()
        build = self._builder(plan, prepared, on_install)

        def waiting() -> None:
            on_install(f"waiting for another run installing {plan.tool}", clock.wall())

        with (
            self.store.downloading(tools.stop),
            self.store.using(entry, build, tools.stop, waiting) as hit,
        ):
            if hit:
                seconds = clock.now() - started
                prepared.records.append(
                    InstallRecord(plan.kind, plan.tool, hit=True, seconds=seconds)
                )
            prepared.activation = plan.activation(entry.path)
            link(project.directory, prepared.activation)
            yield prepared

    def _builder(
        self, plan: InstallPlan, prepared: Prepared, on_install: OnInstall
    ) -> Callable[[Entry], None]:
        """The store's build step: run the plan under a ticker, record it, evict after."""
        clock = self.clock

        def build(entry: Entry) -> None:
            started = clock.now()
            log.info("Installing dependencies", tool=plan.tool, environment=entry.name)
            try:
                with ticking(f"installing dependencies ({plan.tool})", on_install, clock):
                    plan.install(entry.path)
            except ToolFailedError as err:
                output = err.result.stderr + "\n" + err.result.stdout
                seconds = clock.now() - started
                record = InstallRecord(
                    plan.kind, plan.tool, hit=False, seconds=seconds, succeeded=False
                )
                text = message(f"installing dependencies ({plan.tool})", output)
                raise DependencyError(text, permanence(output), record) from err
            size = entry.finish(plan.kind, plan.tool)
            seconds = clock.now() - started
            prepared.records.append(InstallRecord(plan.kind, plan.tool, hit=False, seconds=seconds))
            log.info(
                "Installed dependencies", tool=plan.tool, seconds=round(seconds, 1), bytes=size
            )
            prepared.usage = self.store.evict()

        return build


def link(directory: Path, activation: Activation) -> None:
    """Make the activation's symlinks in the program's ``directory`` (replacing old ones).

    A link's name must stay inside ``directory``; a real file or directory of that name
    (part of the source) is left alone.
    """
    for name, target in activation.links.items():
        home = Path(os.path.normpath(directory.absolute()))
        path = Path(os.path.normpath(home / name))
        if path == home or os.path.commonpath([path, home]) != str(home):
            message = f"{name!r} must name a path inside the program's directory"
            raise DependencyError(message, Permanence.PERMANENT)
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            log.info("Keeping the program's own directory", name=name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target, target_is_directory=True)


@contextlib.contextmanager
def ticking(what: str, on_install: OnInstall, clock: Clock) -> Iterator[None]:
    """Tell ``on_install`` about ``what`` now and every ``TICK`` seconds until the block ends.

    ``since`` (the block's start) is read on ``clock``; the ticks are real seconds.
    """
    since, done = clock.wall(), threading.Event()
    on_install(what, since)

    def tick() -> None:
        while not done.wait(TICK):
            on_install(what, since)

    thread = threading.Thread(target=tick, name="install-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
