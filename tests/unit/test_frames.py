"""models/frames.py on a real socketpair: the framing, and each of its bounds.

The processes around it (a real worker, a stand-in whose answer runs away, a
stopped worker) are tests/daemon/test_model_worker_pipe.py; these pin the
pipe's own rules with both ends in this process.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import numpy as np
import pytest

from memoryd.models.frames import FramedSocket, FrameTooLarge, PeerNotReading

LIMIT = 64 * 1024


@pytest.fixture
def pair() -> Iterator[tuple[FramedSocket, FramedSocket]]:
    a, b = socket.socketpair()
    ends = (FramedSocket(a, max_frame_bytes=LIMIT, send_timeout_s=0.5),
            FramedSocket(b, max_frame_bytes=LIMIT))
    yield ends
    for end in ends:
        end.close()


def test_messages_cross_whole_and_in_order(pair: tuple[FramedSocket, FramedSocket]) -> None:
    near, far = pair
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    near.send({"id": 1, "op": "embed", "texts": ["a", "b"]})
    near.send({"id": 2, "result": vectors})
    assert far.poll(5.0)
    assert far.recv() == {"id": 1, "op": "embed", "texts": ["a", "b"]}
    second = far.recv()
    assert second["id"] == 2 and np.array_equal(second["result"], vectors)
    assert not far.poll(0.0)


def test_a_message_over_the_limit_is_refused_before_a_byte_is_written(
        pair: tuple[FramedSocket, FramedSocket]) -> None:
    near, far = pair
    with pytest.raises(FrameTooLarge, match=f"over the {LIMIT}-byte frame limit"):
        near.send({"texts": ["x" * LIMIT]})
    assert not far.poll(0.1)  # nothing reached the other end
    near.send({"ok": True})  # and the stream is intact
    assert far.recv() == {"ok": True}


def test_a_header_over_the_limit_is_refused_unread(pair: tuple[FramedSocket, FramedSocket]) -> None:
    near, far = pair
    near.sock.sendall(struct.pack("!I", 1 << 30) + b"\0" * 1024)
    with pytest.raises(FrameTooLarge, match="a 1073741824-byte frame is over"):
        far.recv()


def test_the_end_of_the_stream_mid_frame_is_eof(pair: tuple[FramedSocket, FramedSocket]) -> None:
    near, far = pair
    near.sock.sendall(struct.pack("!I", 100) + b"\0" * 10)
    near.sock.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        far.recv()


def test_a_peer_that_stops_reading_fails_the_send_after_its_timeout_and_breaks_the_pipe(
        pair: tuple[FramedSocket, FramedSocket]) -> None:
    near, _far = pair
    chunk = {"texts": ["y" * (LIMIT // 2)]}
    with pytest.raises(PeerNotReading):
        for _ in range(10_000):  # the socket's buffers fill: the far end never reads
            near.send(chunk)
    assert near.broken
    with pytest.raises(OSError, match="broken"):
        near.send({"ok": True})
