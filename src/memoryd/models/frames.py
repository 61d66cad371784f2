"""The daemon ↔ model worker pipe: pickled messages in length-prefixed frames, bounded.

Both ends are memoryd's own code, started by the daemon as the same user, so
the messages are pickles (numpy arrays travel as they are). What this module
adds over ``multiprocessing.connection`` is bounds, so that neither end can
make the other hold unbounded memory or wait for ever:

* a frame is at most ``max_frame_bytes`` (:data:`MAX_FRAME_BYTES`, far above
  the largest real message: an embed request of a batch of 64 KB memories, or
  its answer of float32 vectors). A message over it is refused before a byte
  is written (:class:`FrameTooLarge`; the stream stays usable); a frame header
  over it is refused before its body is read or its buffer allocated (the
  stream cannot be resynchronised then: the reader must close it);
* a send gives up after ``send_timeout_s`` when the peer stops reading
  (:class:`PeerNotReading`): a blocking write to a worker that never reads
  again would otherwise hang every caller queued behind it. The stream may
  hold half a frame then, so the caller must close it (the daemon kills the
  worker).

A frame is a 4-byte big-endian length, then that many bytes of pickle.
"""

from __future__ import annotations

import pickle
import select
import socket
import struct
import time
from typing import Any

#: Largest frame either end sends or accepts (bytes).
MAX_FRAME_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct("!I")
#: Bytes read from the socket at a time.
_CHUNK = 1 << 20


class FrameTooLarge(OSError):
    """A message (to send) or a frame header (received) is over the frame limit."""


class PeerNotReading(OSError):
    """The peer did not take a frame within the send timeout: it stopped reading."""


class FramedSocket:
    """One end of the pipe (a connected stream socket), with bounded frames both ways.

    Not thread-safe on either side: callers hold their own lock around
    :meth:`send`, and one thread reads.
    """

    def __init__(self, sock: socket.socket, *, max_frame_bytes: int = MAX_FRAME_BYTES,
                 send_timeout_s: float | None = None):
        sock.setblocking(True)
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self.send_timeout_s = send_timeout_s
        #: A send stopped part way (timeout, error): the stream may hold half a frame.
        self.broken = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def poll(self, timeout_s: float) -> bool:
        """True when a frame (or the end of the stream) can be read within ``timeout_s``."""
        readable, _, _ = select.select([self.sock], [], [], timeout_s)
        return bool(readable)

    def send(self, obj: Any) -> None:
        """Write one message; FrameTooLarge (nothing written) or PeerNotReading (stream broken)."""
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) > self.max_frame_bytes:
            raise FrameTooLarge(f"a {len(payload)}-byte message is over the {self.max_frame_bytes}-byte "
                                "frame limit of the model worker's pipe")
        if self.broken:
            raise OSError("the pipe is broken by an earlier send that stopped part way")
        deadline = None if self.send_timeout_s is None else time.monotonic() + self.send_timeout_s
        try:
            self._write(memoryview(_HEADER.pack(len(payload))), deadline)
            self._write(memoryview(payload), deadline)
        except BaseException:
            self.broken = True
            raise

    def _write(self, view: memoryview, deadline: float | None) -> None:
        while view:
            try:
                # Non-blocking for this call only: the socket stays blocking for the reader.
                sent = self.sock.send(view, socket.MSG_DONTWAIT)
            except BlockingIOError:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise PeerNotReading(f"the peer took no data for {self.send_timeout_s:.0f} s") from None
                select.select([], [self.sock], [], left)
                continue
            view = view[sent:]

    def recv(self) -> Any:
        """Read one message; EOFError at the end of the stream, FrameTooLarge on an oversized header."""
        (size,) = _HEADER.unpack(self._read(_HEADER.size))
        if size > self.max_frame_bytes:
            raise FrameTooLarge(f"a {size}-byte frame is over the {self.max_frame_bytes}-byte frame limit "
                                "of the model worker's pipe")
        return pickle.loads(self._read(size))

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], min(n - got, _CHUNK))
            if k == 0:
                raise EOFError("the pipe was closed")
            got += k
        return buf
