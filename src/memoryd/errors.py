"""Every error memoryd reports, in one table.

The server, the client, the CLI and the docs read :data:`ERROR_CODES`; a new
code is added here and nowhere else. Messages say what happened and what to do.
"""

from __future__ import annotations

from typing import Any

#: code -> (name, what it means). Fixed by PROTOCOL.md: add, never rename.
ERROR_CODES: dict[int, tuple[str, str]] = {
    -32700: ("parse_error", "the frame is not valid JSON"),
    -32600: ("invalid_request", "the frame is not a JSON-RPC 2.0 request object"),
    -32601: ("method_not_found", "no such method on this socket"),
    -32602: ("invalid_params", "a parameter is missing, of the wrong type or out of range"),
    1001: ("too_large", "the frame or the content is too large"),
    1002: ("not_found", "no such memory or object"),
    1003: ("store_unavailable", "the store cannot take the request now; nothing was written"),
    1004: ("overloaded", "the write queue is full, or answers wait unread past a cap; "
                         "retry later; nothing was written"),
    1005: ("forbidden", "the request is outside the caller's scope or socket"),
    1006: ("tombstoned", "the content matches a tombstone in this scope"),
    1007: ("conflict", "the request conflicts with the current state"),
}


class MemorydError(Exception):
    """Root of every memoryd error; carries a protocol code and optional data."""

    code: int = 1003

    def __init__(self, message: str, *, code: int | None = None, data: dict[str, Any] | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        if self.code not in ERROR_CODES:
            raise ValueError(f"unknown error code {self.code}; add it to ERROR_CODES")
        self.message = message
        self.data = data or {}

    def to_json(self) -> dict[str, Any]:
        """The JSON-RPC error object for this error."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        data = dict(self.data)
        data.setdefault("name", ERROR_CODES[self.code][0])
        out["data"] = data
        return out


class ParseError(MemorydError):
    code = -32700


class InvalidRequest(MemorydError):
    code = -32600


class MethodNotFound(MemorydError):
    code = -32601


class InvalidParams(MemorydError):
    """A parameter is at fault; ``field`` names it."""

    code = -32602

    def __init__(self, field: str, problem: str):
        super().__init__(f"invalid parameter {field!r}: {problem}", data={"field": field})
        self.field = field


class TooLarge(MemorydError):
    code = 1001

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message, data={"field": field} if field else None)


class NotFound(MemorydError):
    code = 1002


class StoreUnavailable(MemorydError):
    code = 1003


class Overloaded(MemorydError):
    code = 1004


class Forbidden(MemorydError):
    code = 1005


class Tombstoned(MemorydError):
    code = 1006


class Conflict(MemorydError):
    code = 1007


class ConfigError(MemorydError):
    """The configuration is unusable; raised before the daemon serves anything."""

    code = -32602


class StaleLease(Exception):
    """A job's lease was lost (expired and reclaimed); its output must not be written."""


class PassUnavailable(RuntimeError):
    """A pass cannot run now (its model is off or failed to load); its jobs wait uncounted."""
