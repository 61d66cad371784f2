"""The asyncio Unix-socket server: framing, peer checks, concurrency per connection.

Each connection reads frames in its own task and runs each request in its
own task, so many requests may be in flight on one connection and a slow or
silent client holds up nobody but itself. A client that stops reading its
answers is not read in turn, and the bytes of unread answers are capped per
connection and in all (service/backpressure.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import weakref
from pathlib import Path
from typing import Any

import structlog

from memoryd.config import Config
from memoryd.errors import Forbidden, MemorydError, StoreUnavailable, TooLarge
from memoryd.service import protocol
from memoryd.service.backpressure import AnswerBudget, Outbox
from memoryd.service.handlers import WRITE_METHODS, Dispatcher, Peer
from memoryd.service.peercred import allowed, peer_credentials
from memoryd.service.sockets import bind_unix

log = structlog.get_logger(__name__)

READ_CHUNK = 65536
#: Seconds a closed connection's unread answers may take to reach its client before it is aborted.
CLOSE_GRACE_S = 5.0

#: Methods that change nothing: their answer, once built, may still be replaced by 1004
#: (a refusal says nothing was done). Any other method is refused only before it runs.
READ_METHODS = frozenset({
    "memory.get", "memory.search", "memory.list", "memory.export", "daemon.ping", "daemon.status",
    "queue.list", "review.list", "review.get", "audit.verify",
})
#: The reads that run on the read thread pool (all but ping, answered on the loop).
POOLED_READS = READ_METHODS - {"daemon.ping"}

#: One answer budget per daemon: its agent and operator sockets share the dispatcher, and so
#: the global cap, whichever socket the unread answers wait on.
_budgets: weakref.WeakKeyDictionary[Dispatcher, AnswerBudget] = weakref.WeakKeyDictionary()


def shared_budget(dispatcher: Dispatcher, cfg: Config) -> AnswerBudget:
    """The answer budget of the daemon that ``dispatcher`` serves."""
    budget = _budgets.get(dispatcher)
    if budget is None:
        budget = _budgets[dispatcher] = AnswerBudget(cfg.conn_max_buffered_bytes,
                                                     cfg.total_max_buffered_bytes)
    return budget


class SocketServer:
    """Serves one socket (agent or operator) with the dispatcher's method table."""

    def __init__(self, path: Path, dispatcher: Dispatcher, cfg: Config, *, admin: bool,
                 inherited: socket.socket | None = None, budget: AnswerBudget | None = None):
        self.path = path
        #: A listening socket handed over by systemd (socket activation); its file is systemd's.
        self.inherited = inherited
        self.dispatcher = dispatcher
        self.cfg = cfg
        self.admin = admin
        #: Unread answers' bytes, shared with the daemon's other socket.
        self.budget = budget if budget is not None else shared_budget(dispatcher, cfg)
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._sock: socket.socket | None = None
        #: True once this server bound the file at ``path``; only then may it remove it.
        self._owns_file = False

    async def start(self) -> None:
        if self.inherited is not None:
            self._sock = self.inherited
        else:
            self._sock = bind_unix(self.path)
            self._owns_file = True
        self._server = await asyncio.start_unix_server(
            self._on_connect, sock=self._sock, limit=READ_CHUNK
        )
        log.info("socket.listening", path=str(self.path), admin=self.admin,
                 activated=self.inherited is not None)

    def stop_listening(self) -> None:
        """Accept no new connections; requests already in flight go on."""
        if self._server is not None:
            self._server.close()
        # A daemon that failed to bind (another one is serving) must not unlink the live one's file.
        if self._owns_file:
            self._owns_file = False
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def close(self) -> None:
        """Stop accepting, remove the socket file, and close open connections."""
        self.stop_listening()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        box = self.budget.outbox(writer.transport)
        try:
            await self._serve(reader, writer, box)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection.crashed")
        finally:
            self._conns.discard(task)
            writer.close()
            # A client that closed its side without reading would hold the unread answers (and
            # this task) for ever: past the grace, they are dropped with the connection.
            try:
                await asyncio.wait_for(writer.wait_closed(), CLOSE_GRACE_S)
            except (Exception, asyncio.CancelledError):
                writer.transport.abort()
            box.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, box: Outbox) -> None:
        sock = writer.get_extra_info("socket")
        pid, uid = peer_credentials(sock)
        peer = Peer(pid=pid, uid=uid)
        if not allowed(uid):
            log.warning("connection.refused", uid=uid, pid=pid, path=str(self.path))
            refused = Forbidden(f"uid {uid} may not use this socket; connect as the daemon's user")
            writer.write(protocol.encode_error(None, refused))
            await writer.drain()
            return
        if len(self._conns) > self.cfg.max_connections:
            err = StoreUnavailable("too many connections; close idle ones and retry")
            writer.write(protocol.encode_error(None, err))
            await writer.drain()
            return
        slots = asyncio.Semaphore(self.cfg.max_inflight_per_connection)
        reads = asyncio.Semaphore(self.cfg.read_threads)
        pending: set[asyncio.Task[None]] = set()
        buf = bytearray()
        discarding = False
        limit = self.cfg.max_frame_bytes
        try:
            while True:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    break
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        if len(buf) > limit and not discarding:
                            discarding = True  # answer once the frame's end is found
                        if discarding:
                            buf.clear()
                        break
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    if discarding:
                        discarding = False
                        self._reply_error(box, None, TooLarge(
                            f"frame exceeds max_frame_bytes ({limit}); send smaller requests"))
                        continue
                    if len(line) > limit:
                        self._reply_error(box, None, TooLarge(
                            f"frame exceeds max_frame_bytes ({limit}); send smaller requests"))
                        continue
                    if not line.strip():
                        continue
                    await slots.acquire()  # back-pressure: stop reading at the in-flight cap
                    try:
                        req = protocol.decode(line)
                    except MemorydError as exc:
                        self._reply_error(box, getattr(exc, "request_id", None), exc)
                        slots.release()
                        continue
                    overload = box.refuse_early(changes_state=req.method not in READ_METHODS)
                    if overload is not None:
                        if not req.is_notification:
                            self._reply_error(box, req.id, overload)
                        slots.release()
                        continue
                    if req.method in WRITE_METHODS and req.method in self.dispatcher.table(self.admin):
                        self._submit_write(req, peer, box, slots)
                        continue
                    t = asyncio.create_task(self._handle(req, peer, writer, box, slots, reads))
                    pending.add(t)
                    t.add_done_callback(pending.discard)
                # Back-pressure: while the answers already sent wait above the transport's
                # high-water mark (the client is not reading), read no more requests.
                await writer.drain()
        finally:
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _reply_error(self, box: Outbox, req_id: Any, err: MemorydError) -> None:
        box.send(protocol.encode_error(req_id, err))

    def _submit_write(self, req: protocol.Request, peer: Peer, box: Outbox, slots: asyncio.Semaphore) -> None:
        """A write, answered from its commit's callback (no task): one loop turn from commit to reply."""

        def answer(outcome: Any) -> None:
            try:
                if req.is_notification:
                    return
                if isinstance(outcome, MemorydError):
                    self._reply_error(box, req.id, outcome)
                else:
                    # Never refused: the write is committed (it was admitted under the caps).
                    box.send(protocol.encode_result(req.id, outcome))
            finally:
                slots.release()

        try:
            self.dispatcher.submit_write(req.method, req.params, peer, answer, admin=self.admin)
        except Exception as exc:  # bad input or a full queue (nothing was queued), or a bug
            slots.release()
            self._reply_failure(box, req, exc)

    def _reply_failure(self, box: Outbox, req: protocol.Request, exc: Exception) -> None:
        """Answer a request whose handling raised (call it in the except block): a MemorydError
        as it is, anything else logged with its traceback and answered as 1003."""
        err = exc if isinstance(exc, MemorydError) else None
        if err is None:
            log.exception("request.crashed", method=req.method)
            err = StoreUnavailable(f"internal error in {req.method}: {exc}; see the daemon log")
        if not req.is_notification:
            self._reply_error(box, req.id, err)

    async def _handle(self, req: protocol.Request, peer: Peer, writer: asyncio.StreamWriter, box: Outbox,
                      slots: asyncio.Semaphore, reads: asyncio.Semaphore) -> None:
        try:
            if req.method in POOLED_READS:
                # A connection runs no more reads at once than the pool has threads, so the
                # ones behind them are refused, not run, once its client stops reading.
                async with reads:
                    refused = box.refuse_before_read()
                    if refused is not None:
                        if not req.is_notification:
                            self._reply_error(box, req.id, refused)
                        return
                    await self._run(req, peer, writer, box)
            else:
                await self._run(req, peer, writer, box)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            slots.release()

    async def _run(self, req: protocol.Request, peer: Peer, writer: asyncio.StreamWriter,
                   box: Outbox) -> None:
        """Dispatch one request and send its answer. The result is dropped once encoded: kept
        alive while the caller waits for a client that does not read, it would be memory no
        cap counts."""
        try:
            result = await self.dispatcher.dispatch(req.method, req.params, peer, self.admin)
        except Exception as exc:
            self._reply_failure(box, req, exc)
            return
        if req.is_notification or writer.is_closing():
            return
        data = self._answer(req, result, box)
        del result
        if req.method in READ_METHODS and box.must_wait(len(data)):
            refused = await box.wait_room(writer, len(data))
            if refused is not None:
                data = protocol.encode_error(req.id, refused)
        box.send(data)

    @staticmethod
    def _answer(req: protocol.Request, result: Any, box: Outbox) -> bytes:
        """The encoded answer, or the 1004 that replaces it: its connection stopped reading, or
        everyone's unread answers would pass the global cap (the per-connection cap makes an
        answer wait instead: :meth:`Outbox.wait_room`).

        Only a read's answer is replaced (the others were admitted under the caps and
        have run). One that surely will not fit is refused before it is encoded, which
        is most of its cost on the event loop."""
        if req.method not in READ_METHODS:
            return protocol.encode_result(req.id, result)
        refused = box.refuse_early(changes_state=False) or box.refuse_result(result)
        if refused is None:
            data = protocol.encode_result(req.id, result)
            refused = box.refuse_answer(len(data))
            if refused is None:
                return data
        return protocol.encode_error(req.id, refused)
