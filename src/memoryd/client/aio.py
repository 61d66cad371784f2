"""The asyncio client: one connection, many requests in flight, answers matched by id."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memoryd.client import params as p
from memoryd.client.errors import AccessDenied, Disconnected, NotRunning, Timeout, error_from_answer
from memoryd.client.results import (
    ForgetResult,
    Memory,
    Ping,
    SearchResult,
    Status,
    SupersedeResult,
    WriteResult,
)
from memoryd.client.sync import DEFAULT_TIMEOUT_S, encode_request, resolve
from memoryd.config import Config

#: Longest answer line accepted: a search of k=100 memories of 64 KiB each, escaped, fits.
MAX_LINE_BYTES = 64 << 20


class _Connection:
    """One open stream and the requests waiting on it."""

    def __init__(self, path: Path, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.path = path
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._read_answers())

    async def _read_answers(self) -> None:
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                msg = json.loads(line)
                if not isinstance(msg, dict):
                    continue
                fut = self.pending.pop(msg["id"], None) if msg.get("id") is not None else None
                if fut is None and msg.get("id") is None and len(self.pending) == 1:
                    # An error with a null id answers a frame the daemon could not parse;
                    # with one request in flight it can only be that one's.
                    fut = self.pending.pop(next(iter(self.pending)))
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (OSError, ValueError):
            pass  # a broken stream ends like a closed one: waiters fail below
        finally:
            self.closed = True
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the daemon closed the connection"))
            self.pending.clear()

    async def close(self) -> None:
        self.closed = True
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class AsyncClient:
    """The asyncio twin of :class:`memoryd.client.Client`: same methods, awaited.

    One connection carries many requests at once (the protocol matches answers
    by id), so ``asyncio.gather`` over calls pipelines them. It connects on
    first use (or ``await client.connect()``, or ``async with``).

    Timeouts: each call waits at most ``timeout_s`` for its answer, then raises
    :class:`Timeout`; the connection stays usable (a late answer is dropped).

    Reconnect: when the daemon closes the connection, the next call opens a
    new one. A call that was in flight when it closed is sent again, once, only
    when that is safe: reads, and writes that carry an ``idempotency_key``
    (every item's, for ``write_many``); otherwise it raises
    :class:`Disconnected`. ``retry=`` on :meth:`call` overrides that.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, admin: bool = False,
                 config: str | os.PathLike[str] | Config | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        self.path = resolve(path, admin, config)
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._conn: _Connection | None = None
        self._connecting: asyncio.Lock | None = None

    async def connect(self) -> None:
        """Open the connection if it is not open (raises NotRunning, AccessDenied, Timeout)."""
        await self._ensure()

    async def _ensure(self) -> _Connection:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(str(self.path), limit=MAX_LINE_BYTES), self.timeout_s)
            except FileNotFoundError as exc:
                raise NotRunning(self.path) from exc
            except ConnectionRefusedError as exc:
                raise NotRunning(self.path, "the socket file is stale") from exc
            except PermissionError as exc:
                raise AccessDenied(self.path) from exc
            except TimeoutError as exc:
                raise Timeout(self.path, "connect", self.timeout_s) from exc
            self._conn = _Connection(self.path, reader, writer)
            return self._conn

    async def close(self) -> None:
        """Close the connection; a later call opens a new one."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def __aenter__(self) -> AsyncClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *,
                   timeout_s: float | None = None, retry: bool | None = None) -> Any:
        """Send one request and return its ``result`` (raises as :meth:`Client.call` does)."""
        params = dict(params or {})
        resend_ok = p.retry_safe(method, params) if retry is None else retry
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        for attempt in (1, 2):
            reused = self._conn is not None and not self._conn.closed
            conn = await self._ensure()
            req_id = next(self._ids)
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            conn.pending[req_id] = fut
            try:
                conn.writer.write(encode_request(req_id, method, params))
                await conn.writer.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                # The frame did not reach the daemon whole: sending again is safe.
                conn.pending.pop(req_id, None)
                await conn.close()
                if attempt == 1 and reused:
                    continue
                raise Disconnected(self.path, method, sent=False) from exc
            try:
                msg = await asyncio.wait_for(fut, wait_s)
            except TimeoutError as exc:
                conn.pending.pop(req_id, None)
                raise Timeout(self.path, method, wait_s) from exc
            except ConnectionError as exc:
                if attempt == 1 and reused and resend_ok:
                    continue
                raise Disconnected(self.path, method, sent=True) from exc
            if "error" in msg:
                raise error_from_answer(msg["error"])
            return msg.get("result")
        raise AssertionError("unreachable: the second attempt returns or raises")

    # -- typed methods (agent socket); see memoryd.client.Client for each one's contract ----
    async def write(self, content: str, *, kind: str | None = None, scope: str | None = None,
                    agent_id: str | None = None, user_id: str | None = None,
                    project: str | None = None, session_id: str | None = None,
                    importance: float | None = None, metadata: Mapping[str, Any] | None = None,
                    ttl_s: float | None = None, valid_from: str | None = None,
                    valid_to: str | None = None, occurred_at: str | None = None,
                    idempotency_key: str | None = None, **extra: Any) -> WriteResult:
        """``memory.write`` (see :meth:`memoryd.client.Client.write`)."""
        return WriteResult.from_json(await self.call("memory.write", p.from_arguments(locals())))

    async def write_many(self, items: Sequence[Mapping[str, Any]]) -> list[WriteResult]:
        """``memory.write_many``: 1..1000 ``memory.write`` param objects, all or nothing."""
        result = await self.call("memory.write_many", {"items": [dict(i) for i in items]})
        return [WriteResult.from_json(r) for r in result["results"]]

    async def search(self, query: str, *, k: int | None = None, scope: str | None = None,
                     kind: str | None = None, mode: str | None = None, agent_id: str | None = None,
                     user_id: str | None = None, project: str | None = None,
                     session_id: str | None = None, as_of: str | None = None,
                     valid_at: str | None = None, include_candidates: bool | None = None,
                     **extra: Any) -> SearchResult:
        """``memory.search`` (see :meth:`memoryd.client.Client.search`)."""
        return SearchResult.from_json(await self.call("memory.search", p.from_arguments(locals())))

    async def get(self, memory_id: str, *, include: Iterable[str] = ()) -> Memory:
        """``memory.get``: one memory by id (not scope-filtered: the id is the capability)."""
        return Memory.from_json(await self.call("memory.get", p.get(memory_id, include)))

    async def supersede(self, old_id: str, *, content: str | None = None, new_id: str | None = None,
                        reason: str | None = None, agent_id: str | None = None,
                        user_id: str | None = None, project: str | None = None,
                        session_id: str | None = None, **write_params: Any) -> SupersedeResult:
        """``memory.supersede`` (see :meth:`memoryd.client.Client.supersede`); never sent twice."""
        args = dict(locals())
        del args["write_params"]
        return SupersedeResult.from_json(
            await self.call("memory.supersede", {**p.from_arguments(args), **p.compact(write_params)}))

    async def forget(self, memory_id: str | None = None, *, subject: Mapping[str, str] | None = None,
                     reason: str | None = None, tombstone: bool | None = None) -> ForgetResult:
        """``memory.forget`` by id (``subject`` only on the operator socket); never sent twice."""
        return ForgetResult.from_json(
            await self.call("memory.forget", p.forget(memory_id, subject, reason, tombstone)))

    async def status(self) -> Status:
        """``daemon.status``: health, queues, passes, models."""
        return Status.from_json(await self.call("daemon.status"))

    async def ping(self) -> Ping:
        """``daemon.ping``: version, protocol and pid."""
        return Ping.from_json(await self.call("daemon.ping"))
