"""The console's one connection to the daemon: an AsyncClient on the operator socket.

Every page's calls go through :meth:`Gateway.call`, which turns what the client
raises into :class:`DaemonProblem`, a message for the page and an HTTP status:
a daemon that went away is a 503 saying how to start it, an error answer keeps
the daemon's own text (it already says what to do).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from memoryd.client import AccessDenied, ClientError, Disconnected, NotRunning, Timeout
from memoryd.client.aio import AsyncClient

#: Seconds a page waits for one answer (a page's calls run at once over the one connection).
CALL_TIMEOUT_S = 30.0


class DaemonProblem(Exception):
    """A call the page could not make: ``status`` for the response, ``message`` for the person."""

    def __init__(self, status: int, message: str, code: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class Gateway:
    """Calls on the operator socket for the pages (one pipelined connection)."""

    def __init__(self, client: AsyncClient):
        self.client = client

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """One method's result; DaemonProblem when there is none."""
        try:
            return await self.client.call(method, dict(params or {}))
        except ClientError as exc:
            status = {1002: 404, -32602: 400, 1005: 403, 1006: 409, 1007: 409, 1004: 503, 1003: 503}
            field = f" (field: {exc.field})" if exc.field else ""
            raise DaemonProblem(status.get(exc.code, 502), f"{exc.message}{field}", exc.code) from exc
        except (NotRunning, AccessDenied, Disconnected, Timeout) as exc:
            raise DaemonProblem(503, str(exc)) from exc

    async def gather(self, *calls: tuple[str, Mapping[str, Any]]) -> list[Any]:
        """Several calls at once on the one connection (the protocol matches answers by id)."""
        return list(await asyncio.gather(*(self.call(m, p) for m, p in calls)))

    async def close(self) -> None:
        await self.client.close()
