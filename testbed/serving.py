"""A socket server answering from a background thread: the test bed's small HTTP servers.

``Serving(server, name)`` starts ``server.serve_forever`` on a daemon thread; ``stop``
shuts the loop down, closes the socket and waits for the thread. The git HTTP server and
the plugin and package mirrors share it.
"""

from __future__ import annotations

import socketserver
import threading

STOP_TIMEOUT = 10.0  # seconds to wait for the serving thread after shutdown


class Serving:
    """``server`` answering from a daemon thread until ``stop`` (see the module)."""

    def __init__(
        self, server: socketserver.BaseServer, name: str, *, poll_interval: float = 0.5
    ) -> None:
        """Serve ``server`` from a thread named ``name``; the socket is already bound.

        ``poll_interval`` is how long ``stop`` may wait for the loop to notice.
        """
        self.server = server
        self._stopped = False
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": poll_interval},
            name=name,
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, close the socket and wait for the thread; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(STOP_TIMEOUT)
