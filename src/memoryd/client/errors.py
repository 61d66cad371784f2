"""The client's exceptions: one class per contract error code, plus the transport's.

A daemon's error answer becomes the :class:`ClientError` subclass registered
for its code in :data:`ERROR_CLASSES` (built from :data:`memoryd.errors.ERROR_CODES`,
the one table of codes); a code this client does not know becomes a plain
:class:`ClientError`, so a newer daemon never breaks an older client.

The transport's failures are separate because no answer came: :class:`NotRunning`
(nothing listens at the socket), :class:`AccessDenied` (another user's socket),
:class:`Disconnected` (the daemon closed the connection mid-call) and
:class:`Timeout` (no answer in time). The last two are ``OSError`` subclasses,
like the socket errors they stand for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memoryd.errors import ERROR_CODES

START_HINT = "start it with `memoryd run` or `memoryd service install`"


class ClientError(Exception):
    """An error answer from the daemon: its JSON-RPC ``code``, ``message`` and ``data``."""

    #: The contract code a subclass stands for (the root stands for any).
    code: int = 0

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None):
        name = ERROR_CODES.get(code, ("unknown",))[0]
        super().__init__(f"{message} (error {code}, {name})")
        self.code = code
        self.message = message
        self.data: dict[str, Any] = data or {}

    @property
    def field(self) -> str | None:
        """The parameter at fault, when the daemon named one (``data.field``)."""
        value = self.data.get("field")
        return value if isinstance(value, str) else None


class ParseError(ClientError):
    """-32700: the frame was not valid JSON."""

    code = -32700


class InvalidRequest(ClientError):
    """-32600: the frame was not a JSON-RPC 2.0 request object."""

    code = -32600


class MethodNotFound(ClientError):
    """-32601: no such method on this socket (``review.*`` on the agent socket, too)."""

    code = -32601


class InvalidParams(ClientError):
    """-32602: a parameter is missing, of the wrong type or out of range; ``field`` names it."""

    code = -32602


class TooLarge(ClientError):
    """1001: the frame or the content is too large."""

    code = 1001


class NotFound(ClientError):
    """1002: no such memory or object (also a malformed id)."""

    code = 1002


class StoreUnavailable(ClientError):
    """1003: the store cannot take the request now; nothing was written."""

    code = 1003


class Overloaded(ClientError):
    """1004: the write queue is full, or answers wait unread past a cap; retry later; nothing was written."""

    code = 1004


class Forbidden(ClientError):
    """1005: the request is outside the caller's scope, or not served on this socket."""

    code = 1005


class Tombstoned(ClientError):
    """1006: the content matches a tombstone (a forgotten value) in this scope and owner."""

    code = 1006


class Conflict(ClientError):
    """1007: the request conflicts with the current state (a lost supersede race, a reused key)."""

    code = 1007


#: code -> the exception class for it; every code of the contract has one.
ERROR_CLASSES: dict[int, type[ClientError]] = {
    cls.code: cls
    for cls in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, TooLarge, NotFound,
                StoreUnavailable, Overloaded, Forbidden, Tombstoned, Conflict)
}


def error_from_answer(error: dict[str, Any]) -> ClientError:
    """The exception for one JSON-RPC error object (its class chosen by ``code``)."""
    code = error.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    data = error.get("data")
    cls = ERROR_CLASSES.get(code, ClientError)
    return cls(code, str(error.get("message", "")), data if isinstance(data, dict) else None)


class NotRunning(Exception):
    """Nothing answers at the socket path: no file there, or a stale one."""

    def __init__(self, path: Path, detail: str = ""):
        super().__init__(
            f"memoryd is not running (no socket at {path}{'; ' + detail if detail else ''}); "
            + START_HINT
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


class Disconnected(ConnectionError):
    """The daemon closed the connection before answering.

    ``sent`` says whether the request had been sent whole: when it had, the
    daemon may have carried it out, which is why only read methods and keyed
    writes are sent again (see :func:`memoryd.client.params.retry_safe`).
    """

    def __init__(self, path: Path, method: str, *, sent: bool):
        super().__init__(
            f"the daemon at {path} closed the connection before answering {method}; "
            "it may be restarting: check `memoryd status` and retry"
        )
        self.path = path
        self.method = method
        self.sent = sent


class Timeout(TimeoutError):
    """No answer within the call's timeout (the daemon may still carry the request out)."""

    def __init__(self, path: Path, method: str, timeout_s: float):
        super().__init__(
            f"no answer to {method} from {path} within {timeout_s:g} s; the daemon may be "
            "overloaded or stuck: check `memoryd status`, or pass a longer timeout_s"
        )
        self.path = path
        self.method = method
        self.timeout_s = timeout_s
