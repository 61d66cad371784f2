"""Spawn ``memoryd mcp`` as an editor would and drive it with the MCP SDK's own stdio client.

``bridge(daemon, *flags)`` is an async context manager yielding an initialized
``mcp.ClientSession`` talking to a real ``python -m memoryd mcp`` subprocess
(its stderr goes to a file the test can read). The SDK client checks every
successful tool result against the tool's output schema, so a structured
answer that breaks its schema fails the test on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult

from tests.integration.harness import hermetic_env

#: A hang guard for one MCP exchange, never a claim about speed (bench/mcp_startup.py is).
CALL_TIMEOUT_S = 60.0


def bridge_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The bridge's environment: hermetic, like the daemon's (no MEMORYD_* leaks in)."""
    return hermetic_env(home, extra)


@contextlib.asynccontextmanager
async def bridge(socket: Path, home: Path, *flags: str, cwd: Path | None = None,
                 stderr_name: str = "bridge.stderr") -> AsyncIterator[ClientSession]:
    """An initialized MCP session with ``memoryd mcp --socket SOCKET FLAGS``."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memoryd", "mcp", "--socket", str(socket), *flags],
        env=bridge_env(home), cwd=str(cwd or home))
    with open(home / stderr_name, "a", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session:
            await asyncio.wait_for(session.initialize(), CALL_TIMEOUT_S)
            yield session


async def call(session: ClientSession, tool: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
    """One tools/call (validated against the output schema by the SDK when it succeeds)."""
    return await asyncio.wait_for(session.call_tool(tool, arguments or {}), CALL_TIMEOUT_S)


def text_of(result: CallToolResult) -> str:
    """The text content of a result (what an agent reads)."""
    return "".join(getattr(block, "text", "") for block in result.content)


def ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful result; fails with the error text otherwise."""
    assert not result.is_error, f"tool error: {text_of(result)}"
    assert result.structured_content is not None
    # The text block carries the same JSON, for clients that read only text.
    assert json.loads(text_of(result)) == result.structured_content
    return dict(result.structured_content)

