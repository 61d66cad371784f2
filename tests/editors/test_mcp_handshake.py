"""The handshake the bridge answers while the SDK imports (editors/mcp/handshake.py).

Its answers must be the SDK's own: they are compared with what the SDK's
server says to the same requests, over a real pipe, field for field. Then the
hand-over: on the wire, every request gets exactly one answer, and the SDK
serves what comes after the handshake.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Config
from memoryd.editors.mcp.handshake import DropAnswered, EarlyAnswers, ReplayThenRead, sdk_versions
from memoryd.editors.mcp.tools import tool_specs
from tests.integration.harness import DaemonHandle, hermetic_env

#: Runs the SDK's server alone, without the early answers, for the reference answers.
SDK_ONLY = """
import sys
from memoryd.config import load_config
from memoryd.editors.mcp import server as mcp_server
from memoryd.editors.mcp.binding import Binding
binding = Binding(agent_id="a", user_id="u", project="p", session_id="s")
mcp_server.run(binding, load_config(None, socket=sys.argv[1]))
"""
CLIENT_INFO = {"name": "pytest", "version": "1.0"}


def frame(req_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if req_id is not None:
        msg["id"] = req_id
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode() + b"\n"


def handshake(version: str) -> list[bytes]:
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}
    return [frame(1, "initialize", init), frame(None, "notifications/initialized"), frame(2, "tools/list"),
            frame(3, "ping")]


def exchange(argv: list[str], lines: list[bytes], answers: int, env: dict[str, str]) -> list[dict[str, Any]]:
    """Write ``lines`` to a process's stdin, read ``answers`` lines of its stdout, then close
    stdin and read whatever else it writes before it exits (returned too)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env)
    assert proc.stdin is not None and proc.stdout is not None
    timer = threading.Timer(120, proc.kill)  # a hang guard: a killed process ends readline
    timer.start()
    try:
        proc.stdin.write(b"".join(lines))
        proc.stdin.flush()
        out = [json.loads(proc.stdout.readline()) for _ in range(answers)]
        proc.stdin.close()
        out += [json.loads(line) for line in proc.stdout.read().splitlines() if line.strip()]
        return out
    finally:
        timer.cancel()
        proc.kill()
        proc.wait(30)


def early(lines: list[bytes]) -> tuple[EarlyAnswers, list[dict[str, Any]]]:
    """Run the early phase in process over ``lines`` (the SDK never becomes ready)."""
    out = io.BytesIO()
    specs = tool_specs(Config().kinds, ("agent", "project", "user"), "project")
    answers = EarlyAnswers(io.BytesIO(b"".join(lines)), out, specs, sdk_versions(), threading.Event())
    answers.run()
    return answers, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", "2024-11-05", "1999-01-01"])
def test_early_answers_equal_the_sdks_own(tmp_path: Path, version: str) -> None:
    env = hermetic_env(tmp_path)
    sdk = exchange([sys.executable, "-c", SDK_ONLY, str(tmp_path / "none.sock")], handshake(version), 3, env)
    _, ours = early(handshake(version))
    assert [m["id"] for m in ours] == [1, 2, 3]
    assert ours == sdk
    # An unknown version is answered with the SDK's newest handshake version, as the SDK does.
    versions = sdk_versions()
    assert versions is not None
    expected = version if version in versions[0] else versions[1]
    assert ours[0]["result"]["protocolVersion"] == expected


def test_the_first_message_it_cannot_answer_hands_the_stream_over() -> None:
    lines = [*handshake("2025-11-25")[:3], frame(4, "tools/call", {"name": "memory_status", "arguments": {}}),
             frame(5, "ping")]
    answers, out = early(lines)
    assert [m["id"] for m in out] == [1, 2]  # initialize and tools/list answered early
    # The SDK gets initialize and initialized again (its session must be set up), then the call.
    assert answers.replay == [lines[0], lines[1], lines[3]]
    assert answers.answered == {1}
    assert answers.stdin.read() == lines[4]  # the rest stays unread for the SDK


@pytest.mark.parametrize("first", [
    frame(1, "initialize", {"protocolVersion": "2025-11-25"}),  # no clientInfo: the SDK's to refuse
    frame(1, "tools/list"),  # no handshake first (a 2026-era request, or a broken client)
    b"not json\n",
])
def test_anything_but_a_valid_handshake_goes_to_the_sdk_untouched(first: bytes) -> None:
    answers, out = early([first, frame(2, "ping")])
    assert out == [] and answers.replay == [first] and answers.answered == set()


def test_the_sdks_answer_to_the_replayed_initialize_is_dropped_once() -> None:
    wire = io.BytesIO()
    out = DropAnswered(wire, {1})
    out.write(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "x"}}) + "\n")
    out.write(json.dumps({"jsonrpc": "2.0", "id": 4, "result": {}}) + "\n")
    out.write(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"again": True}}) + "\n")
    assert [json.loads(line)["id"] for line in wire.getvalue().splitlines()] == [4, 1]
    source = ReplayThenRead([b"a\n", b"b\n"], io.BytesIO(b"c\n"))
    assert [source.readline() for _ in range(4)] == ["a\n", "b\n", "c\n", ""]


def test_on_the_wire_each_request_gets_one_answer_and_the_sdk_serves_the_rest(
        module_daemon: DaemonHandle) -> None:
    lines = [*handshake("2025-11-25")[:3], frame(4, "tools/call", {"name": "memory_status", "arguments": {}}),
             frame(5, "ping"), frame(6, "tools/call", {"name": "nope", "arguments": {}})]
    argv = [sys.executable, "-m", "memoryd", "mcp", "--socket", str(module_daemon.socket), "--project", "p"]
    out = exchange(argv, lines, 5, hermetic_env(module_daemon.home))
    # Requests after the hand-over run concurrently in the SDK, so answers may come in any order;
    # each id exactly once (the SDK's answer to the replayed initialize was dropped).
    by_id = {m["id"]: m for m in out}
    assert sorted(m["id"] for m in out) == [1, 2, 4, 5, 6]
    status = by_id[4]["result"]
    assert status["isError"] is False and status["structuredContent"]["health"] == "healthy"
    assert by_id[5]["result"] == {}
    unknown = by_id[6]["result"]
    assert unknown["isError"] is True and "unknown tool 'nope'" in unknown["content"][0]["text"]
