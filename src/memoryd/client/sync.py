"""The synchronous client: one connection, one call at a time."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from memoryd.client import params as p
from memoryd.client.discovery import socket_path
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
from memoryd.config import Config

DEFAULT_TIMEOUT_S = 30.0


def encode_request(req_id: int, method: str, params: Mapping[str, Any]) -> bytes:
    """One JSON-RPC 2.0 request frame, newline-terminated."""
    frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": dict(params)}
    return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


def resolve(path: str | os.PathLike[str] | None, admin: bool,
            config: str | os.PathLike[str] | Config | None) -> Path:
    """The path a client connects to (an explicit agent socket needs no config lookup)."""
    if path is not None and not admin:
        return Path(path).expanduser()
    return socket_path(path, admin=admin, config=config)


def _open(path: Path, timeout_s: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except FileNotFoundError as exc:
        sock.close()
        raise NotRunning(path) from exc
    except ConnectionRefusedError as exc:
        sock.close()
        raise NotRunning(path, "the socket file is stale") from exc
    except PermissionError as exc:
        sock.close()
        raise AccessDenied(path) from exc
    except OSError:
        sock.close()
        raise
    return sock


class Client:
    """A connection to memoryd with a typed method for every agent-socket method.

    ``Client()`` finds the agent socket by PROTOCOL.md's rules
    (``$MEMORYD_SOCKET``, the config file, ``$XDG_RUNTIME_DIR``, the state dir);
    ``Client(path)`` connects to ``path``; ``Client(admin=True)`` (or
    ``Client(agent_path, admin=True)``) reaches the operator socket, where
    ``review.*``, ``queue.*``, ``audit.verify`` and export are served: use
    :meth:`call` for those.

    The connection opens in the constructor (``connect=False`` defers it to the
    first call), so a missing daemon raises :class:`NotRunning` at once.

    Timeouts: every call waits at most ``timeout_s`` (per call, or the
    client's default) for its answer, then raises :class:`Timeout` and drops the
    connection (the next call opens a new one). The daemon may still carry out
    a request that timed out.

    Reconnect: when the daemon has closed the connection (it restarted, say),
    the next call opens a new one and sends again, once. A request that could
    not be sent whole is always sent again. A request that was sent but not
    answered is sent again only when that is safe: reads (get, search, status,
    ping, list), a ``memory.write`` that carries an ``idempotency_key``, and a
    ``memory.write_many`` whose every item carries one (the daemon answers a
    repeated key with the first result). Other calls raise
    :class:`Disconnected` instead, since the daemon may have done them; pass
    ``retry=True`` or ``retry=False`` to :meth:`call` to decide yourself.

    Calls from several threads are serialised (one request in flight); give
    each thread its own client for parallel requests, or use
    :class:`memoryd.client.AsyncClient`, which pipelines them.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, admin: bool = False,
                 config: str | os.PathLike[str] | Config | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, connect: bool = True):
        self.path = resolve(path, admin, config)
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        if connect:
            self.connect()

    # -- connection ------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection if it is not open (raises NotRunning, AccessDenied)."""
        with self._lock:
            if self._sock is None:
                self._sock = _open(self.path, self.timeout_s)
                self._buf.clear()

    @property
    def connected(self) -> bool:
        """True while a connection is open (it may still have been closed by the daemon)."""
        return self._sock is not None

    def close(self) -> None:
        """Close the connection; a later call opens a new one."""
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None
                    self._buf.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw frames (tests send what the typed methods never would) ----------------
    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are on the current connection."""
        self.connect()
        assert self._sock is not None
        self._sock.sendall(data)

    def read_message(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The next message on the connection (raises ConnectionError when the daemon closed it)."""
        self.connect()
        line = self._read_line(time.monotonic() + (timeout_s or self.timeout_s))
        msg: dict[str, Any] = json.loads(line)
        return msg

    def _read_line(self, deadline: float) -> bytes:
        assert self._sock is not None
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[:end + 1]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self._buf += chunk

    # -- calls -------------------------------------------------------------------
    def call(self, method: str, params: Mapping[str, Any] | None = None, *,
             timeout_s: float | None = None, retry: bool | None = None) -> Any:
        """Send one request and return its ``result``.

        Raises the :class:`~memoryd.client.ClientError` subclass for an error
        answer, :class:`NotRunning`/:class:`AccessDenied` when the socket cannot
        be reached, :class:`Timeout` and :class:`Disconnected` (see the class
        docstring for when a call is sent again; ``retry`` overrides that).
        """
        params = dict(params or {})
        resend_ok = p.retry_safe(method, params) if retry is None else retry
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            for attempt in (1, 2):
                reused = self._sock is not None
                self.connect()
                assert self._sock is not None
                req_id = next(self._ids)
                try:
                    self._sock.settimeout(wait_s)
                    self._sock.sendall(encode_request(req_id, method, params))
                except (BrokenPipeError, ConnectionResetError) as exc:
                    # Nothing the daemon could act on reached it: sending again is safe.
                    self.close()
                    if attempt == 1 and reused:
                        continue
                    raise Disconnected(self.path, method, sent=False) from exc
                except TimeoutError as exc:
                    self.close()
                    raise Timeout(self.path, method, wait_s) from exc
                try:
                    msg = self._answer(req_id, time.monotonic() + wait_s)
                except TimeoutError as exc:
                    self.close()  # a late answer must not be read as the next call's
                    raise Timeout(self.path, method, wait_s) from exc
                except ConnectionError as exc:
                    self.close()
                    if attempt == 1 and reused and resend_ok:
                        continue
                    raise Disconnected(self.path, method, sent=True) from exc
                break
        if "error" in msg:
            raise error_from_answer(msg["error"])
        return msg.get("result")

    def _answer(self, req_id: int, deadline: float) -> dict[str, Any]:
        while True:
            msg = json.loads(self._read_line(deadline))
            # An error with a null id answers a frame the daemon could not parse: ours.
            if isinstance(msg, dict) and msg.get("id") in (req_id, None):
                return msg

    # -- typed methods (agent socket) ---------------------------------------------------
    def write(self, content: str, *, kind: str | None = None, scope: str | None = None,
              agent_id: str | None = None, user_id: str | None = None, project: str | None = None,
              session_id: str | None = None, importance: float | None = None,
              metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
              valid_from: str | None = None, valid_to: str | None = None,
              occurred_at: str | None = None, idempotency_key: str | None = None,
              **extra: Any) -> WriteResult:
        """``memory.write``: store one memory; answered once it is durable.

        ``scope`` (default ``agent``) needs its key field: ``agent_id`` for
        ``agent``, ``user_id`` for ``user``, ``project``, ``session_id``.
        ``extra`` passes parameters this client does not name yet.
        """
        return WriteResult.from_json(self.call("memory.write", p.from_arguments(locals())))

    def write_many(self, items: Sequence[Mapping[str, Any]]) -> list[WriteResult]:
        """``memory.write_many``: 1..1000 ``memory.write`` param objects, all or nothing."""
        result = self.call("memory.write_many", {"items": [dict(i) for i in items]})
        return [WriteResult.from_json(r) for r in result["results"]]

    def search(self, query: str, *, k: int | None = None, scope: str | None = None,
               kind: str | None = None, mode: str | None = None, agent_id: str | None = None,
               user_id: str | None = None, project: str | None = None, session_id: str | None = None,
               as_of: str | None = None, valid_at: str | None = None,
               include_candidates: bool | None = None, **extra: Any) -> SearchResult:
        """``memory.search``: ranked memories visible to the owner fields given.

        The owner fields are access keys: ``agent_id`` makes that agent's rows
        visible, and so on; ``org`` rows are always visible. ``scope`` and
        ``kind`` narrow; ``mode`` is ``hybrid`` (default), ``lexical`` or ``vector``.
        """
        return SearchResult.from_json(self.call("memory.search", p.from_arguments(locals())))

    def get(self, memory_id: str, *, include: Iterable[str] = ()) -> Memory:
        """``memory.get``: one memory by id; ``include`` any of ``history``, ``citations``, ``links``.

        Not scope-filtered: the id is the capability (raises NotFound for an unknown id).
        """
        return Memory.from_json(self.call("memory.get", p.get(memory_id, include)))

    def supersede(self, old_id: str, *, content: str | None = None, new_id: str | None = None,
                  reason: str | None = None, agent_id: str | None = None, user_id: str | None = None,
                  project: str | None = None, session_id: str | None = None,
                  **write_params: Any) -> SupersedeResult:
        """``memory.supersede``: replace ``old_id`` by new ``content`` (or an existing ``new_id``).

        Send the old row's scope key (its ``agent_id`` for an agent row) or the
        daemon answers Forbidden. ``write_params`` are ``memory.write``
        parameters for the new row. Never sent twice (see the class docstring).
        """
        args = dict(locals())
        del args["write_params"]
        return SupersedeResult.from_json(
            self.call("memory.supersede", {**p.from_arguments(args), **p.compact(write_params)}))

    def forget(self, memory_id: str | None = None, *, subject: Mapping[str, str] | None = None,
               reason: str | None = None, tombstone: bool | None = None) -> ForgetResult:
        """``memory.forget``: erase one memory by id (``subject`` only on the operator socket).

        The answer comes once the request is durable; the row reads ``deleting``
        until the retention pass has erased it. Never sent twice.
        """
        return ForgetResult.from_json(
            self.call("memory.forget", p.forget(memory_id, subject, reason, tombstone)))

    def status(self) -> Status:
        """``daemon.status``: health, queues, passes, models."""
        return Status.from_json(self.call("daemon.status"))

    def ping(self) -> Ping:
        """``daemon.ping``: version, protocol and pid."""
        return Ping.from_json(self.call("daemon.ping"))
