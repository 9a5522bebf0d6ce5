"""One command run in a pod's container through the API server's exec (``pods/exec``).

The Kubernetes client's websocket stream (``kubernetes.stream.ws_client``) is imported on
the first call only: an operator that never execs (no warm run pods) never loads the
websocket stack. The command gets one piece of text on its stdin and runs to its end,
at most ``timeout`` seconds; its stdout and exit status are read from the stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException


@dataclass(frozen=True)
class Exec:
    """Where to exec: the pod ``namespace/name``, its ``container``."""

    namespace: str
    name: str
    container: str


def run_in(
    api_client: client.ApiClient,
    where: Exec,
    command: tuple[str, ...],
    stdin: str,
    timeout: float,
) -> tuple[int | None, str]:
    """Run ``command`` in ``where`` with ``stdin``; (exit status, stdout).

    The status is None when the command had not ended after ``timeout`` seconds (the
    stream is closed then). ``ApiException`` when the exec cannot start: its status is the
    handshake's (403 without the permission, 404 no such pod, 400 a container not
    running) or 0 when the API server could not be reached.
    """
    from kubernetes.stream import ws_client  # noqa: PLC0415 - see the module doc

    query = [("command", part) for part in command]
    query += [("container", where.container), ("stdin", "true"), ("stdout", "true")]
    _, url, headers, _, _ = api_client.param_serialize(
        "GET",
        "/api/v1/namespaces/{namespace}/pods/{name}/exec",
        path_params={"namespace": where.namespace, "name": where.name},
        query_params=query,
        header_params={},
        auth_settings=["BearerToken"],
    )
    try:
        stream: Any = ws_client.WSClient(  # type: ignore[no-untyped-call]
            api_client.configuration,
            ws_client.get_websocket_url(url),  # type: ignore[no-untyped-call]
            {key.lower(): value for key, value in headers.items()},
            capture_all=False,
        )
    except Exception as err:  # noqa: BLE001 - the websocket library's own errors
        raise ApiException(status=_handshake_status(err), reason=str(err)) from None
    try:
        stream.write_stdin(stdin)
        stream.run_forever(timeout=timeout)
        out = str(stream.read_stdout()) if stream.peek_stdout() else ""
        return (None if stream.is_open() else int(stream.returncode)), out
    finally:
        stream.close()


def _handshake_status(err: Exception) -> int:
    """The HTTP status of a refused websocket handshake (0: none, the connection failed)."""
    status = getattr(err, "status_code", None)
    return status if isinstance(status, int) else 0
