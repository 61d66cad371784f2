"""Back-pressure in the MCP bridge: an editor that stops reading cannot make it hold every answer.

A real ``memoryd mcp`` on a real daemon: the test writes the handshake and
100 ``recall`` calls whose answers are about 12 MB each (100 memories of
60 KB, as text and as structured content), and does not read the bridge's
stdout. Without a bound the bridge builds every answer and keeps it waiting
for the pipe (more than a gigabyte); with it, it stops calling the daemon and
reading the editor while a few answers wait, and serves the rest once the
editor reads. Nothing here asserts on time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import psutil

from tests.editors.test_mcp_handshake import frame
from tests.integration.harness import DaemonHandle, hermetic_env

AGENT = "mcp-bp"
ROWS = 100
ROW_BYTES = 60 * 1024
CALLS = 100
#: How far the bridge's RSS may rise while the calls wait (unbounded, it builds 100 answers
#: of about 12 MB). The documented bound is conn_max_buffered_bytes (8 MiB) plus the four
#: calls that may run at once; this is generous.
RSS_RISE_BOUND_MB = 400


def test_a_bridge_whose_editor_does_not_read_holds_a_bounded_number_of_answers(
        daemon: DaemonHandle) -> None:
    filler = "lorem ipsum dolor sit amet " * (ROW_BYTES // 27)
    with daemon.client() as c:
        for i in range(ROWS):
            c.call("memory.write", {"content": f"row {i:05d} {filler}", "agent_id": AGENT})
    argv = [sys.executable, "-m", "memoryd", "mcp", "--socket", str(daemon.socket), "--agent-id", AGENT,
            "--project", "p", "--scopes", "agent"]
    with open(daemon.home / "bridge-bp.stderr", "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=hermetic_env(daemon.home))
    assert proc.stdin is not None and proc.stdout is not None
    timer = threading.Timer(240, proc.kill)  # a hang guard: a killed process ends every read
    timer.start()
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "pytest", "version": "1.0"}}
        proc.stdin.write(frame(0, "initialize", init) + frame(None, "notifications/initialized"))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        before = psutil.Process(proc.pid).memory_info().rss / 2**20
        recall = {"name": "recall", "arguments": {"query": "lorem", "k": ROWS}}
        calls = b"".join(frame(i, "tools/call", recall) for i in range(1, CALLS + 1))
        # Written from a thread: a bridge that stops reading leaves this write waiting on the pipe.
        writer = threading.Thread(target=lambda: (proc.stdin.write(calls), proc.stdin.flush()),  # type: ignore[union-attr]
                                  daemon=True)
        writer.start()
        peak = before
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the bridge exited"
            peak = max(peak, psutil.Process(proc.pid).memory_info().rss / 2**20)
            # Checked as it grows: an unbounded bridge fails here, not after taking the memory.
            assert peak - before < RSS_RISE_BOUND_MB, f"bridge RSS rose from {before:.0f} to {peak:.0f} MB"
            time.sleep(0.1)
        # The editor reads again: the answers waiting are whole recall answers, none lost.
        for _ in range(3):
            answer = json.loads(proc.stdout.readline())
            assert 1 <= answer["id"] <= CALLS
            result = answer["result"]
            assert result["isError"] is False, result["content"][0]["text"]
            assert len(result["structuredContent"]["results"]) == ROWS
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(30)
