"""A small synchronous client for the CLI, tests and benchmarks."""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from typing import Any

from memoryd.errors import ERROR_CODES


class ClientError(Exception):
    """An error answer from the daemon (its JSON-RPC code, message and data)."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None):
        super().__init__(f"{message} (error {code}, {ERROR_CODES.get(code, ('unknown',))[0]})")
        self.code = code
        self.message = message
        self.data = data or {}


class NotRunning(Exception):
    """Nothing answers at the socket path."""

    def __init__(self, path: Path, detail: str = ""):
        super().__init__(
            f"memoryd is not running (no socket at {path}{'; ' + detail if detail else ''}); "
            "start it with `memoryd run` or `memoryd service install`"
        )
        self.path = path


class AccessDenied(Exception):
    """The socket exists but this user may not connect to it."""

    def __init__(self, path: Path):
        super().__init__(
            f"permission denied on {path}: the daemon runs as another user; "
            "run this command as that user"
        )
        self.path = path


class Client:
    """One connection; ``call`` sends a request and waits for its answer."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0):
        self.path = Path(path)
        self._ids = itertools.count(1)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(str(self.path))
        except FileNotFoundError as exc:
            self._sock.close()
            raise NotRunning(self.path) from exc
        except ConnectionRefusedError as exc:
            self._sock.close()
            raise NotRunning(self.path, "the socket file is stale") from exc
        except PermissionError as exc:
            self._sock.close()
            raise AccessDenied(self.path) from exc
        self._file = self._sock.makefile("rb")

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_message(self) -> dict[str, Any]:
        line = self._file.readline()
        if not line:
            raise ConnectionError("the daemon closed the connection")
        msg: dict[str, Any] = json.loads(line)
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and return its result; raise ClientError on an error answer."""
        req_id = next(self._ids)
        frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}}
        self.send_raw(json.dumps(frame).encode() + b"\n")
        while True:
            msg = self.read_message()
            if msg.get("id") == req_id or msg.get("id") is None:
                break
        if "error" in msg:
            err = msg["error"]
            raise ClientError(err["code"], err.get("message", ""), err.get("data"))
        return msg["result"]
