"""A Stack's ``PULUMI_HOME``: its own directory, a shared plugin store, no saved credentials."""

from __future__ import annotations

import json
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CREDENTIALS_FILE = "credentials.json"  # in PULUMI_HOME: the CLI's saved logins and tokens
PLUGINS_DIR = "plugins"  # in PULUMI_HOME: downloaded and installed plugins


def make_home(home: Path, plugins: Path) -> None:
    """Create a Stack's ``PULUMI_HOME`` whose ``plugins`` is a symlink to the shared store.

    The CLI follows the symlink both to install plugins and to find them, so a plugin is
    downloaded once for all Stacks. A ``plugins`` directory that is not a symlink (made by
    a CLI before the link existed) is left alone: it works, it is only not shared.
    """
    plugins.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    link = home / PLUGINS_DIR
    if link.is_symlink():
        if link.readlink() == plugins:
            return
        link.unlink()  # the store moved
    elif link.exists():
        return
    link.symlink_to(plugins, target_is_directory=True)


def forget_credentials(home: Path) -> None:
    """Delete the logins and access tokens the CLI saved in ``home`` during an operation.

    Every command gets its backend and token from its environment; a saved token would
    only serve a later command that has none (another tenant's, in a shared home), and
    any program of any Stack could read it from disk.
    """
    try:
        (home / CREDENTIALS_FILE).unlink(missing_ok=True)
    except OSError as err:
        log.warning("Cannot delete the CLI's saved credentials", error=str(err))


def current_login(home: Path) -> str | None:
    """The backend ``pulumi login`` selected, from ``PULUMI_HOME/credentials.json``."""
    try:
        current = json.loads((home / CREDENTIALS_FILE).read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        return None
    return current if isinstance(current, str) else None
