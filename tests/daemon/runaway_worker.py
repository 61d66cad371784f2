"""A stand-in model worker whose answer runs away: ``python -m tests.daemon.runaway_worker --fd N``.

It speaks the pipe's framing (a 4-byte big-endian length, then the body; the
same as multiprocessing.connection's for frames under 2 GiB), takes its
options and then one request, and answers with a header that claims
``CLAIMED_BYTES`` and then streams zeros, ``STREAMED_BYTES`` at most, as a
worker gone wrong could. It stops by itself: after that many bytes, or when
the pipe closes, or after ``LIFETIME_S``.

Only the daemon's side of the bound can be tested this way (a real worker
refuses its own oversized answer before sending it, as an error answer:
tests/daemon/test_model_worker_pipe.py tests that as well).
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time

CLAIMED_BYTES = 1 << 30
STREAMED_BYTES = 256 << 20
LIFETIME_S = 60.0


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    (size,) = struct.unpack("!I", exactly(4))
    return exactly(size)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    sock = socket.socket(fileno=parser.parse_known_args()[0].fd)
    started = time.monotonic()
    try:
        first = read_frame(sock)
        if b"configure" in first:
            read_frame(sock)  # the request
        sock.sendall(struct.pack("!I", CLAIMED_BYTES))
        zeros, sent = bytes(1 << 20), 0
        while sent < STREAMED_BYTES and time.monotonic() - started < LIFETIME_S:
            sock.sendall(zeros)
            sent += len(zeros)
        time.sleep(max(0.0, LIFETIME_S - (time.monotonic() - started)))
    except (EOFError, OSError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
