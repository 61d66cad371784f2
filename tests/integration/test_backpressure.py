"""Back-pressure (PROTOCOL.md 1.2): a client that stops reading cannot take the daemon's memory.

Real daemons, real sockets, real non-reading clients: each sends pipelined
``memory.list`` requests whose answers are megabytes and never reads. The
daemon must stay within a generous memory bound, keep answering other
clients, and answer the hostile client 1004 ``overloaded`` once its unread
answers pass the caps. Figures (RSS before/during/after, ping latencies) are
bench/backpressure.py's; nothing here asserts on time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from memoryd.service.client import ClientError
from tests.integration.harness import DaemonHandle, RawConnection, wait_until

AGENT = "bp-agent"
ROWS = 100
ROW_BYTES = 60 * 1024
#: 100 rows of 60 KB: one memory.list limit=100 answer is about 6 MB.
PAGE_BYTES = ROWS * ROW_BYTES
#: How far the daemon's RSS may rise while 16 clients sit on 64 such requests each (a
#: daemon without back-pressure queues 16 x 64 x 6 MB: gigabytes). The documented bound is
#: total_max_buffered_bytes (64 MiB) plus the answers being built; this is generous.
RSS_RISE_BOUND_MB = 600


def seed(daemon: DaemonHandle, rows: int = ROWS) -> None:
    """``rows`` distinct memories of about 60 KB each, for one agent."""
    filler = "lorem ipsum dolor sit amet " * (ROW_BYTES // 27)
    with daemon.client() as c:
        for i in range(rows):
            c.call("memory.write", {"content": f"row {i:05d} {filler}", "agent_id": AGENT})


def rss_mb(daemon: DaemonHandle) -> float:
    assert daemon.proc is not None
    return float(psutil.Process(daemon.proc.pid).memory_info().rss) / 2**20


def list_frames(count: int, limit: int = ROWS) -> bytes:
    return b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "memory.list",
                                "params": {"agent_id": AGENT, "limit": limit}}).encode() + b"\n"
                    for i in range(count))


@contextmanager
def non_readers(path: Path, connections: int, requests: int) -> Iterator[list[RawConnection]]:
    """Connections that each send ``requests`` list requests and then do not read."""
    conns = [RawConnection(path, timeout_s=60.0) for _ in range(connections)]
    try:
        for conn in conns:
            conn.send(list_frames(requests))
        yield conns
    finally:
        for conn in conns:
            conn.close()


def answers(conn: RawConnection, count: int) -> list[dict[str, Any]]:
    return [conn.read() for _ in range(count)]


def test_sixteen_clients_that_never_read_leave_memory_bounded_and_others_answered(
        daemon: DaemonHandle) -> None:
    seed(daemon)
    before = rss_mb(daemon)
    with non_readers(daemon.socket, 16, 64) as conns:
        peak = before
        pings = 0
        deadline = time.monotonic() + 12.0  # the daemon works through 1024 requests meanwhile
        while time.monotonic() < deadline:
            peak = max(peak, rss_mb(daemon))
            # Checked as it grows, so a daemon without back-pressure fails here, not after
            # it has taken the machine's memory.
            assert peak - before < RSS_RISE_BOUND_MB, f"RSS rose from {before:.0f} to {peak:.0f} MB"
            with daemon.client(timeout_s=60.0) as c:
                assert c.call("daemon.ping")["pid"] == daemon.proc.pid  # type: ignore[union-attr]
            pings += 1
            time.sleep(0.1)
        assert pings > 0
        # What a hostile connection was told, once it reads: a page, then 1004 overloaded.
        got = answers(conns[0], 64)
    assert sorted(a["id"] for a in got) == list(range(64))
    pages = [a for a in got if "result" in a]
    refused = [a for a in got if "error" in a]
    assert len(pages) + len(refused) == 64
    assert pages, "the first page goes out, whatever the caps"
    assert len(pages[0]["result"]["memories"]) == ROWS
    assert refused and {a["error"]["code"] for a in refused} == {1004}
    assert {a["error"]["data"]["name"] for a in refused} == {"overloaded"}
    # After they close, the daemon serves pages again.
    assert len(daemon.call("memory.list", {"agent_id": AGENT, "limit": ROWS})["memories"]) == ROWS


def test_a_page_larger_than_the_connection_cap_reaches_a_client_that_reads(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("bp-conn", config={"conn_max_buffered_bytes": 1 << 20})
    seed(daemon)
    # 6 MB against a 1 MiB cap: an answer goes alone whatever its size.
    for _ in range(3):
        assert len(daemon.call("memory.list", {"agent_id": AGENT, "limit": ROWS})["memories"]) == ROWS


def test_a_connection_past_its_cap_is_refused_and_served_again_once_it_reads(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    daemon = start_daemon("bp-own", config={"conn_max_buffered_bytes": 1 << 20})
    seed(daemon)
    with non_readers(daemon.socket, 1, 8) as (conn,):
        # Past its cap the answers wait for the client to read; reading nothing for a while,
        # it is refused (logged once).
        wait_until(lambda: '"answers.unread"' in daemon.stderr_text(), timeout_s=60.0)
        got = answers(conn, 8)
        pages = [a for a in got if "result" in a]
        refused = [a for a in got if "error" in a]
        assert pages and refused
        assert "conn_max_buffered_bytes" in refused[0]["error"]["message"]
        # Everything read: the same connection is served again.
        conn.send(list_frames(1))
        again = conn.read()
        assert len(again["result"]["memories"]) == ROWS


def test_past_the_global_cap_other_clients_get_1004_for_pages_and_writes_but_pings_answered(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    # Less than one page in all: the first unread page goes alone, then only small answers.
    daemon = start_daemon("bp-total", config={"total_max_buffered_bytes": 4 << 20})
    seed(daemon)
    with non_readers(daemon.socket, 1, 1):
        # The hostile page sits in the daemon (the socket buffer holds only a little of it).
        # The probe asks for one row (60 KB, past the 4 KiB always sent, and small enough
        # for the socket's own buffer, so the probe's answers never count as unread).
        def page_refused() -> bool:
            try:
                daemon.call("memory.list", {"agent_id": AGENT, "limit": 1})
            except ClientError as exc:
                assert exc.code == 1004
                assert "total_max_buffered_bytes" in exc.message
                return True
            return False

        wait_until(page_refused, timeout_s=30.0)
        assert daemon.call("daemon.ping")["pid"] == daemon.proc.pid  # type: ignore[union-attr]
        before = daemon.scalar("SELECT count(*) FROM memories")
        with pytest.raises(ClientError) as refused_write:
            daemon.call("memory.write", {"content": "written while answers pile up", "agent_id": AGENT})
        assert refused_write.value.code == 1004
        assert daemon.scalar("SELECT count(*) FROM memories") == before  # nothing was written
    # The hostile client is gone: pages and writes are served again.
    wait_until(lambda: not page_refused(), timeout_s=30.0)
    daemon.call("memory.write", {"content": "written after they left", "agent_id": AGENT})
    assert daemon.scalar("SELECT count(*) FROM memories") == before + 1
