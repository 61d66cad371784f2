"""Back-pressure: the bytes of answers waiting for their clients, per connection and in all.

An answer is written into its connection's transport, which holds what the
socket cannot take yet. A client that stops reading would otherwise leave
every answer it asked for in the daemon's memory (PROTOCOL.md 1.2,
"Back-pressure"). Two caps bound that:

- ``conn_max_buffered_bytes``: the unread answers one connection may hold;
- ``total_max_buffered_bytes``: the unread answers all connections hold.

Each answer is decided on its encoded size before it enters the transport;
answers encoded and waiting to enter count too. An answer that would take its
connection past its cap waits for the client to read (the queue to drain);
when the client reads nothing for :data:`STALL_S`, it is replaced by a 1004
``overloaded`` error, and the connection's later reads are refused before
they run until it has read everything. An answer that would take everyone's
unread answers past the global cap is refused at once (one that surely will
not fit, before it is encoded). One answer may pass a cap alone (nothing but
the transport's slack on its connection, or under :data:`TOTAL_SLACK` in
all), so a large page always reaches a client that reads. Answers of at most
:data:`SMALL_ANSWER` bytes are never refused: the refusal would cost as many
bytes. Meanwhile the server stops reading a connection whose transport is
above its high-water mark, so a client that does not read cannot send more
requests either.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
import time
from collections.abc import Callable
from typing import Any

import structlog

from memoryd.errors import Overloaded

log = structlog.get_logger(__name__)

#: Answers this small always go: a 1004 error frame is about as large.
SMALL_ANSWER = 4096
#: Values :func:`surely_larger` looks at before it gives up (a few milliseconds at most).
SIZE_WALK_STEPS = 20000
#: Unread bytes in all below which an answer goes whatever its size ("alone").
TOTAL_SLACK = 1 << 20
#: Seconds an answer waits for a client that reads nothing before it is refused.
STALL_S = 5.0


def surely_larger(value: Any, limit: int, *, steps: int = SIZE_WALK_STEPS) -> bool:
    """True when ``value`` encoded as JSON is surely longer than ``limit`` bytes.

    Adds up a lower bound of the encoded size (each string's characters and its
    quotes, a byte for any other scalar, two per container) and stops as soon as
    it passes ``limit``. False when it stays under, or when the walk has seen
    ``steps`` values without deciding. An answer that will be refused is thus
    refused without being encoded, which for a page of large rows costs tens of
    milliseconds of the event loop that every other client waits on.
    """
    total = 0
    stack = [value]
    while stack:
        steps -= 1
        if steps < 0:
            return False
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2
            for key, inner in item.items():
                total += (len(key) if isinstance(key, str) else 1) + 3
                stack.append(inner)
        elif isinstance(item, list | tuple):
            total += 2
            stack.extend(item)
        else:
            total += 1
        if total > limit:
            return True
    return False


#: A connection that held this many unread bytes hands its memory back to the system on close.
TRIM_AFTER_BYTES = 1 << 20
#: At most one trim per this many seconds (it walks every heap of the allocator).
TRIM_EVERY_S = 1.0


def _malloc_trim() -> Callable[[], None] | None:
    """glibc's ``malloc_trim(0)``, which returns the free pages of every heap (arena) to the
    system; None elsewhere. Freed memory otherwise stays in the process: the large answers
    of a client that stopped reading would keep the daemon's RSS up after it left."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl has no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class AnswerBudget:
    """The daemon's unread answers, across every connection of every socket."""

    def __init__(self, conn_cap: int, total_cap: int):
        self.conn_cap = conn_cap
        self.total_cap = total_cap
        #: Connections whose transport held bytes at their last write; the rest hold none,
        #: so the sum stays cheap while clients read (the set is almost always empty).
        self._waiting: set[Outbox] = set()
        #: Answers are being refused for the global cap (logged once per episode).
        self.refusing = False
        self._trim = _malloc_trim()
        self._trim_due: asyncio.TimerHandle | None = None
        self._trimmed_at = 0.0

    def outbox(self, transport: asyncio.WriteTransport) -> Outbox:
        """The accounting for one new connection."""
        return Outbox(self, transport)

    def closed(self, box: Outbox) -> None:
        """``box``'s connection is gone (call on the event loop); after one that held large
        answers, the allocator's free memory is handed back to the system, at most once per
        :data:`TRIM_EVERY_S` (connections that close together get one trim after the last)."""
        self._waiting.discard(box)
        if box.peak < TRIM_AFTER_BYTES or self._trim is None or self._trim_due is not None:
            return
        loop = asyncio.get_running_loop()
        wait = max(0.0, self._trimmed_at + TRIM_EVERY_S - time.monotonic())
        self._trim_due = loop.call_later(wait, self._start_trim, loop)

    def _start_trim(self, loop: asyncio.AbstractEventLoop) -> None:
        self._trim_due = None
        self._trimmed_at = time.monotonic()
        if self._trim is not None:
            # On a thread: the trim walks every heap, and the loop serves other clients meanwhile.
            loop.run_in_executor(None, self._trim)

    def total(self) -> int:
        """Bytes waiting in all transports now (drained connections leave the set)."""
        total = 0
        for box in list(self._waiting):
            n = box.held()
            if n == 0:
                self._waiting.discard(box)
            total += n
        return total


class Outbox:
    """One connection's unread answers: what may be admitted, encoded and written."""

    def __init__(self, budget: AnswerBudget, transport: asyncio.WriteTransport):
        self.budget = budget
        self.transport = transport
        #: An answer was refused since this connection's queue was last empty: its client is
        #: not reading, so later answers are refused before they are built.
        self.stalled = False
        #: An answer was refused for the global cap: while no room has been seen since, this
        #: connection's reads are refused before they run.
        self.over_total = False
        #: The most bytes this connection's transport held after a write.
        self.peak = 0
        #: Encoded answers waiting for this connection's queue to drain (:meth:`wait_room`).
        self.in_flight = 0

    def queued(self) -> int:
        """Bytes this connection's transport holds for its client (a closing transport's too:
        it keeps them until the client reads them or the connection is aborted)."""
        return self.transport.get_write_buffer_size()

    def held(self) -> int:
        """What counts against the global cap: the queue and the answers waiting to join it."""
        return self.transport.get_write_buffer_size() + self.in_flight

    def _queued_now(self) -> int:
        n = self.queued()
        if n == 0:
            self.stalled = False  # the client read everything: it is served again
        return n

    def refuse_early(self, *, changes_state: bool) -> Overloaded | None:
        """The refusal for a request before it runs, or for a read's answer before it is
        encoded (None: go on).

        A connection refused since its queue was last empty (its client stopped
        reading) gets nothing more built until its client reads. A request that
        changes state is refused while all unread answers are past the global
        cap too: its answer cannot be refused once it has run.
        """
        queued = self._queued_now()
        if queued and self.stalled:
            return self._own_refusal(queued)
        if changes_state:
            total = self.budget.total()
            if total >= self.budget.total_cap:
                return self._global_refusal(total)
            self.budget.refusing = False
        return None

    def refuse_before_read(self) -> Overloaded | None:
        """The refusal for a read before it runs on the read pool (None: run it).

        As :meth:`refuse_early`; and a connection refused for the global cap is
        refused again while the unread answers leave no room for more than a
        small answer: its reads are not run for answers that would be refused.
        """
        refused = self.refuse_early(changes_state=False)
        if refused is not None or not self.over_total:
            return refused
        total = self.budget.total()
        if total + SMALL_ANSWER > self.budget.total_cap:
            return self._global_refusal(total)
        self.over_total = False
        return None

    def refuse_result(self, result: Any) -> Overloaded | None:
        """The refusal for a read's result that surely will not fit under the global cap,
        before it is encoded (None: encode it, and ask :meth:`refuse_answer`)."""
        total = self.budget.total()
        if total > TOTAL_SLACK and surely_larger(result, max(SMALL_ANSWER, self.budget.total_cap - total)):
            return self._global_refusal(total)
        return None

    def refuse_answer(self, size: int) -> Overloaded | None:
        """The refusal that replaces a read's encoded answer of ``size`` bytes for the global
        cap (None: it may go, perhaps after :meth:`wait_room`).

        Only for requests that changed nothing: a refusal says nothing was done.
        """
        if size <= SMALL_ANSWER:
            return None
        total = self.budget.total()
        if total > TOTAL_SLACK and total + size > self.budget.total_cap:
            return self._global_refusal(total)
        self.budget.refusing = False
        return None

    def must_wait(self, size: int) -> bool:
        """Whether an answer of ``size`` bytes must wait for this connection's queue to drain:
        it would pass ``conn_max_buffered_bytes`` behind more than the transport's slack."""
        if size <= SMALL_ANSWER:
            return False
        queued = self.queued()
        high = self.transport.get_write_buffer_limits()[1]
        return queued > high and queued + size > self.budget.conn_cap

    async def wait_room(self, writer: asyncio.StreamWriter, size: int) -> Overloaded | None:
        """Hold an encoded answer of ``size`` bytes (counted as in flight) until this
        connection's queue drains enough for it; None then. A client that reads nothing for
        :data:`STALL_S` gets the 1004 instead: it is not reading."""
        self.in_flight += size
        self.budget._waiting.add(self)
        try:
            while self.must_wait(size):
                try:
                    await asyncio.wait_for(writer.drain(), STALL_S)
                except TimeoutError:
                    return self._own_refusal(self.queued())
                except ConnectionError:
                    return None  # the send that follows is a no-op on a closed transport
            return None
        finally:
            self.in_flight -= size

    def send(self, data: bytes) -> None:
        """Write ``data`` into the transport (nothing once it is closing); a connection left
        holding bytes is counted in the global sum."""
        if self.transport.is_closing():
            return
        self.transport.write(data)
        queued = self.transport.get_write_buffer_size()
        if queued:
            self.budget._waiting.add(self)
            self.peak = max(self.peak, queued)

    def close(self) -> None:
        """The connection is gone: its bytes no longer count."""
        self.budget.closed(self)

    def _own_refusal(self, queued: int) -> Overloaded:
        if not self.stalled:  # once per stall: a client that does not read is refused often
            log.warning("answers.unread", queued=queued, cap=self.budget.conn_cap)
        self.stalled = True
        return Overloaded(
            f"overloaded: {queued} bytes of answers on this connection are unread "
            f"(conn_max_buffered_bytes is {self.budget.conn_cap}); read the answers already sent, "
            "then retry. Nothing was done.")

    def _global_refusal(self, total: int) -> Overloaded:
        if not self.budget.refusing:  # once per episode, not once per answer
            log.warning("answers.unread_total", total=total, cap=self.budget.total_cap)
        self.budget.refusing = True
        self.over_total = True
        return Overloaded(
            f"overloaded: clients leave {total} bytes of answers unread "
            f"(total_max_buffered_bytes is {self.budget.total_cap}); retry later, or ask for "
            "fewer rows (a smaller limit or k). Nothing was done.")
