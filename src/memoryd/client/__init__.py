"""memoryd's public client library: talk to the daemon over its Unix socket.

    from memoryd.client import Client

    with Client() as md:                       # finds the socket as PROTOCOL.md says
        w = md.write("Staging DB is Postgres 15 on db1:5432", agent_id="me")
        hits = md.search("which database does staging use", agent_id="me")
        print(hits.results[0].content, hits.results[0].score)

:class:`Client` is synchronous; :class:`AsyncClient` is its asyncio twin with
the same methods. Every agent-socket method has a typed method (``write``,
``write_many``, ``search``, ``get``, ``supersede``, ``forget``, ``status``,
``ping``) returning a result dataclass that keeps the whole answer in ``raw``;
``call(method, params)`` reaches any method, including the operator socket's
(``Client(admin=True)``). Each contract error code raises its own
:class:`ClientError` subclass (:data:`ERROR_CLASSES`). docs/client.md has an
example of each.

This package imports only the standard library and memoryd's config (no
SQLAlchemy, no models), so editors and hooks that use it start quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memoryd.client.discovery import socket_path
from memoryd.client.errors import (
    ERROR_CLASSES,
    AccessDenied,
    ClientError,
    Conflict,
    Disconnected,
    Forbidden,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    NotRunning,
    Overloaded,
    ParseError,
    StoreUnavailable,
    Timeout,
    Tombstoned,
    TooLarge,
    error_from_answer,
)
from memoryd.client.params import READ_METHODS, retry_safe
from memoryd.client.results import (
    SCOPE_KEYS,
    ForgetResult,
    Memory,
    Ping,
    SearchHit,
    SearchResult,
    Status,
    SupersedeResult,
    WriteResult,
)
from memoryd.client.sync import DEFAULT_TIMEOUT_S, Client

if TYPE_CHECKING:
    from memoryd.client.aio import AsyncClient


def __getattr__(name: str) -> Any:
    # AsyncClient is imported on first use: asyncio is not free, and the sync CLI never needs it.
    if name == "AsyncClient":
        from memoryd.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_TIMEOUT_S", "ERROR_CLASSES", "READ_METHODS", "SCOPE_KEYS",
    "AccessDenied", "AsyncClient", "Client", "ClientError", "Conflict", "Disconnected",
    "Forbidden", "ForgetResult", "InvalidParams", "InvalidRequest", "Memory", "MethodNotFound",
    "NotFound", "NotRunning", "Overloaded", "ParseError", "Ping", "SearchHit", "SearchResult",
    "Status", "StoreUnavailable", "SupersedeResult", "Timeout", "Tombstoned", "TooLarge",
    "WriteResult", "error_from_answer", "retry_safe", "socket_path",
]
