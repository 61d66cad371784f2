"""The asyncio Unix-socket server: framing, peer checks, concurrency per connection.

Each connection reads frames in its own task and runs each request in its
own task, so many requests may be in flight on one connection and a slow or
silent client holds up nobody but itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path
from typing import Any

import structlog

from memoryd.config import Config
from memoryd.errors import Forbidden, MemorydError, StoreUnavailable, TooLarge
from memoryd.service import protocol
from memoryd.service.handlers import WRITE_METHODS, Dispatcher, Peer
from memoryd.service.peercred import allowed, peer_credentials
from memoryd.service.sockets import bind_unix

log = structlog.get_logger(__name__)

READ_CHUNK = 65536


class SocketServer:
    """Serves one socket (agent or operator) with the dispatcher's method table."""

    def __init__(self, path: Path, dispatcher: Dispatcher, cfg: Config, *, admin: bool,
                 inherited: socket.socket | None = None):
        self.path = path
        #: A listening socket handed over by systemd (socket activation); its file is systemd's.
        self.inherited = inherited
        self.dispatcher = dispatcher
        self.cfg = cfg
        self.admin = admin
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
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection.crashed")
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
                        self._reply_error(writer, None, TooLarge(
                            f"frame exceeds max_frame_bytes ({limit}); send smaller requests"))
                        continue
                    if len(line) > limit:
                        self._reply_error(writer, None, TooLarge(
                            f"frame exceeds max_frame_bytes ({limit}); send smaller requests"))
                        continue
                    if not line.strip():
                        continue
                    await slots.acquire()  # back-pressure: stop reading at the in-flight cap
                    try:
                        req = protocol.decode(line)
                    except MemorydError as exc:
                        self._reply_error(writer, getattr(exc, "request_id", None), exc)
                        slots.release()
                        continue
                    if req.method in WRITE_METHODS and req.method in self.dispatcher.table(self.admin):
                        self._submit_write(req, peer, writer, slots)
                        continue
                    t = asyncio.create_task(self._handle(req, peer, writer, slots))
                    pending.add(t)
                    t.add_done_callback(pending.discard)
                await writer.drain()
        finally:
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _reply_error(self, writer: asyncio.StreamWriter, req_id: Any, err: MemorydError) -> None:
        if not writer.is_closing():
            writer.write(protocol.encode_error(req_id, err))

    def _submit_write(self, req: protocol.Request, peer: Peer, writer: asyncio.StreamWriter,
                      slots: asyncio.Semaphore) -> None:
        """A write, answered from its commit's callback (no task): one loop turn from commit to reply."""

        def answer(outcome: Any) -> None:
            try:
                if req.is_notification or writer.is_closing():
                    return
                if isinstance(outcome, MemorydError):
                    self._reply_error(writer, req.id, outcome)
                else:
                    writer.write(protocol.encode_result(req.id, outcome))
            finally:
                slots.release()

        try:
            self.dispatcher.submit_write(req.method, req.params, peer, answer, admin=self.admin)
        except Exception as exc:  # bad input or a full queue (nothing was queued), or a bug
            slots.release()
            self._reply_failure(writer, req, exc)

    def _reply_failure(self, writer: asyncio.StreamWriter, req: protocol.Request, exc: Exception) -> None:
        """Answer a request whose handling raised (call it in the except block): a MemorydError
        as it is, anything else logged with its traceback and answered as 1003."""
        err = exc if isinstance(exc, MemorydError) else None
        if err is None:
            log.exception("request.crashed", method=req.method)
            err = StoreUnavailable(f"internal error in {req.method}: {exc}; see the daemon log")
        if not req.is_notification:
            self._reply_error(writer, req.id, err)

    async def _handle(self, req: protocol.Request, peer: Peer, writer: asyncio.StreamWriter,
                      slots: asyncio.Semaphore) -> None:
        req_id: Any = req.id
        try:
            try:
                result = await self.dispatcher.dispatch(req.method, req.params, peer, self.admin)
            except Exception as exc:
                self._reply_failure(writer, req, exc)
                return
            if not req.is_notification and not writer.is_closing():
                writer.write(protocol.encode_result(req_id, result))
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        finally:
            slots.release()
