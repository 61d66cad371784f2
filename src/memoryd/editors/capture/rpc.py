"""A minimal JSON-RPC call over the agent socket, for the capture hook only.

The hook has a time budget of tens of milliseconds and importing the public
client library (:mod:`memoryd.client`, with its asyncio twin and result
classes) costs more than that on a small machine. This does the one thing the
hook needs: connect, send a request line, read the answer line, all against
one deadline. Anything else talks to the daemon through :mod:`memoryd.client`.
"""

from __future__ import annotations

import json
import socket
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class RpcError(Exception):
    """An error answer from the daemon: its code, message and data."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None):
        super().__init__(f"{message} (error {code})")
        self.code = code
        self.message = message
        self.data = data or {}


class DeadlineCaller:
    """One connection to ``path`` whose every call must be answered before ``deadline``
    (time.monotonic()). A missed deadline raises TimeoutError; nothing is retried."""

    def __init__(self, path: str, deadline: float):
        self.deadline = deadline
        self._ids = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf = b""
        try:
            self._sock.settimeout(self._remaining())
            self._sock.connect(path)
        except BaseException:
            self._sock.close()
            raise

    def _remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the capture budget ran out before the daemon answered")
        return left

    def __call__(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        frame = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        self._sock.settimeout(self._remaining())
        self._sock.sendall(json.dumps(frame, ensure_ascii=False).encode() + b"\n")
        while True:
            while b"\n" not in self._buf:
                self._sock.settimeout(self._remaining())
                chunk = self._sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the daemon closed the connection")
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            answer = json.loads(line)
            if answer.get("id") == self._ids or answer.get("id") is None:
                break
        if "error" in answer:
            err = answer["error"]
            raise RpcError(int(err.get("code", 0)), str(err.get("message", "")), err.get("data"))
        return answer.get("result")

    def close(self) -> None:
        self._sock.close()
