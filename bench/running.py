"""``Running``: a base making an object with ``start`` and ``stop`` a context manager."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self


class Running(abc.ABC):
    """``with obj`` calls ``obj.start()`` on entry and ``obj.stop()`` on exit.

    A mixin: list it after a base class that already has ``start`` and ``stop``.
    """

    @abc.abstractmethod
    def start(self) -> None:
        """Begin running."""

    @abc.abstractmethod
    def stop(self) -> object:
        """Stop running; safe to call twice, and when ``start`` failed. The result is ignored."""

    def __enter__(self) -> Self:
        """Start; the object itself. A start that raises (Ctrl-C too) is stopped first."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop, whether or not the block raised (exceptions propagate)."""
        self.stop()
