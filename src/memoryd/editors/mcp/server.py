"""``memoryd mcp``: the bridge served over stdio with the official MCP Python SDK.

This is the only module that imports the SDK (``mcp``), and the CLI imports it
only when the bridge runs: the SDK's import is most of the bridge's start-up
time (bench/mcp_startup.py), and no other command should pay for it.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Self

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from memoryd import __version__
from memoryd.client import AsyncClient
from memoryd.config import Config
from memoryd.editors.mcp.binding import Binding
from memoryd.editors.mcp.bridge import AnswerGate, Bridge
from memoryd.editors.mcp.tools import SERVER_INSTRUCTIONS, ToolSpec, tool_specs


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


#: What an answer other than a tool's (ping, tools/list, an error) counts while it waits.
SMALL_ANSWER_BYTES = 1024


class _GatedStream:
    """What both gated streams hand straight to the SDK's stream they wrap."""

    def __init__(self, inner: Any, gate: AnswerGate):
        self._inner = inner
        self._gate = gate

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc_val, exc_tb)
        return result


class GatedWriteStream(_GatedStream):
    """The SDK's outgoing stream, telling the gate when the stdout writer takes an answer.

    Each answer counts from when it is built (or handed here) until the writer
    takes it: while the editor does not read, the writer is stuck on a full
    pipe and the answers wait in their tasks.
    """

    async def send(self, item: Any, /) -> None:
        self._gate.hold(SMALL_ANSWER_BYTES)  # a no-op for a tool answer, counted already
        try:
            await self._inner.send(item)
        finally:
            self._gate.taken()


class GatedReadStream(_GatedStream):
    """The SDK's incoming stream: the editor's next message is read only when the gate has
    room, so an editor that does not read its answers is not read either."""

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK reads it when present)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        await self._gate.wait_to_read()
        return await self._inner.receive()

    def __aiter__(self) -> GatedReadStream:
        return self

    async def __anext__(self) -> Any:
        await self._gate.wait_to_read()
        return await self._inner.__anext__()


def build_server(bridge: Bridge, gate: AnswerGate | None = None) -> Server[Any]:
    """A low-level SDK server whose tools are the bridge's (each call through ``gate``)."""
    tools = [sdk_tool(spec) for spec in bridge.specs.values()]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if gate is None:
            outcome = await bridge.call(params.name, params.arguments)
        else:
            async with gate.call():
                outcome = await bridge.call(params.name, params.arguments)
            # Text and structured content carry the same data: about twice the text.
            gate.hold(2 * len(outcome.text))
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
    flush); by default the SDK claims the process's own. What the bridge holds
    for an editor that stops reading is bounded by ``conn_max_buffered_bytes``
    and ``max_inflight_per_connection`` (:class:`AnswerGate`).
    """
    client = AsyncClient(cfg.resolved_socket())
    gate = AnswerGate(cfg.conn_max_buffered_bytes, cfg.max_inflight_per_connection)
    server = build_server(Bridge(binding, client, specs), gate)
    streams = stdio_server(stdin=anyio.wrap_file(stdin) if stdin is not None else None,
                           stdout=anyio.wrap_file(stdout) if stdout is not None else None)
    try:
        async with streams as (read_stream, write_stream):
            await server.run(GatedReadStream(read_stream, gate), GatedWriteStream(write_stream, gate),
                             server.create_initialization_options())
    finally:
        await client.close()


def run(binding: Binding, cfg: Config, specs: list[ToolSpec] | None = None, *, stdin: Any = None,
        stdout: Any = None) -> None:
    """Blocking entry point (see :func:`memoryd.editors.mcp.handshake.serve` for the CLI's)."""
    if specs is None:
        specs = tool_specs(cfg.kinds, binding.scopes, binding.default_write_scope)
    asyncio.run(serve(binding, cfg, specs, stdin=stdin, stdout=stdout))
