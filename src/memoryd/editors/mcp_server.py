"""``memoryd mcp``: the bridge served over stdio with the official MCP Python SDK.

This is the only module that imports the SDK (``mcp``), and the CLI imports it
only when the bridge runs: the SDK's import is most of the bridge's start-up
time (bench/mcp_startup.py), and no other command should pay for it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from memoryd import __version__
from memoryd.client import AsyncClient
from memoryd.config import Config
from memoryd.editors.binding import Binding
from memoryd.editors.mcp_bridge import Bridge
from memoryd.editors.mcp_tools import SERVER_INSTRUCTIONS, ToolSpec, tool_specs


def sdk_tool(spec: ToolSpec) -> types.Tool:
    """The SDK's Tool for one of our specs."""
    return types.Tool(
        name=spec.name, title=spec.title, description=spec.description,
        input_schema=spec.input_schema, output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            title=spec.title, read_only_hint=spec.read_only, destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent, open_world_hint=False,
        ),
    )


def build_server(bridge: Bridge) -> Server[Any]:
    """A low-level SDK server whose tools are the bridge's."""
    tools = [sdk_tool(spec) for spec in bridge.specs.values()]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await bridge.call(params.name, params.arguments)
        result = types.CallToolResult(content=[types.TextContent(type="text", text=outcome.text)],
                                      is_error=outcome.is_error)
        if outcome.structured is not None:
            result.structured_content = outcome.structured
        if outcome.meta is not None:
            result.meta = outcome.meta
        return result

    return Server("memoryd", version=__version__, title="memoryd",
                  instructions=SERVER_INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(binding: Binding, cfg: Config, specs: list[ToolSpec], *, stdin: Any = None,
                stdout: Any = None) -> None:
    """Serve MCP until the input ends.

    ``stdin``/``stdout`` are blocking text file objects (readline; write and
    flush); by default the SDK claims the process's own.
    """
    client = AsyncClient(cfg.resolved_socket())
    server = build_server(Bridge(binding, client, specs))
    streams = stdio_server(stdin=anyio.wrap_file(stdin) if stdin is not None else None,
                           stdout=anyio.wrap_file(stdout) if stdout is not None else None)
    try:
        async with streams as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await client.close()


def run(binding: Binding, cfg: Config, specs: list[ToolSpec] | None = None, *, stdin: Any = None,
        stdout: Any = None) -> None:
    """Blocking entry point (see :func:`memoryd.editors.mcp_handshake.serve` for the CLI's)."""
    if specs is None:
        specs = tool_specs(cfg.kinds, binding.scopes, binding.default_write_scope)
    asyncio.run(serve(binding, cfg, specs, stdin=stdin, stdout=stdout))
