"""A scripted stand-in for the daemon's socket, for the client's unit tests.

It answers each request line with what ``respond(msg, conn_no)`` returns:
a dict (sent as the answer), None (the connection is closed without an
answer, as a daemon that crashed or restarted mid-request would) or
``"silent"`` (nothing is sent; the client's timeout fires). Every request it
received is kept, with the number of the connection it came on, so a test can
count what the client actually sent. The real daemon is exercised by
tests/client/test_client_daemon.py over the same code paths.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Respond = Callable[[dict[str, Any], int], Any]


def result(msg: dict[str, Any], value: Any) -> dict[str, Any]:
    """A success answer to ``msg``."""
    return {"jsonrpc": "2.0", "id": msg["id"], "result": value}


def error(msg: dict[str, Any], code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """An error answer to ``msg``."""
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": msg["id"], "error": err}


class FakeDaemon:
    """A Unix socket server in a thread; one handler thread per connection."""

    def __init__(self, respond: Respond):
        self.respond = respond
        self.dir = Path(tempfile.mkdtemp(prefix="mdc-", dir="/tmp"))
        self.path = self.dir / "memoryd.sock"
        self.received: list[tuple[int, dict[str, Any]]] = []
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(8)
        self._open: list[socket.socket] = []
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def methods(self) -> list[str]:
        return [m["method"] for _, m in self.received]

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        buf = b""
        with contextlib.suppress(OSError):
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    self.received.append((number, msg))
                    answer = self.respond(msg, number)
                    if answer is None:
                        conn.close()
                        return
                    if answer != "silent":
                        conn.sendall(json.dumps(answer).encode() + b"\n")
        conn.close()

    def drop_connections(self) -> None:
        """Close every open connection from the server side (a daemon restart, as the client sees it)."""
        for conn in self._open:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()
        self._open.clear()

    def close(self) -> None:
        self._stop = True
        self.drop_connections()
        self._server.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.dir.rmdir()
