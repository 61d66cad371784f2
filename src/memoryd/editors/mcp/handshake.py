"""Answer the MCP handshake while the SDK is still importing, then hand the stream over.

Importing the MCP SDK takes over a second of CPU on these machines (its
pydantic protocol models; bench/mcp_startup.py breaks it down), longer than
an editor should wait for ``initialize``. So the bridge starts the import on a
thread and, meanwhile, answers the opening messages of the initialize
handshake itself: ``initialize`` (with the version the SDK would negotiate,
read from the SDK's own version table), ``tools/list`` and ``ping``. The first
message it does not handle (a tool call, say), or the SDK becoming ready,
ends this phase: the SDK's server then gets the stream, with ``initialize`` and
``notifications/initialized`` replayed so its session is set up as if it had
answered them, and its duplicate ``initialize`` answer is dropped on the way
out. Everything else is the SDK's: tests/editors/test_mcp_handshake.py checks
that these early answers equal the SDK's own, field for field.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from memoryd import __version__
from memoryd.config import Config
from memoryd.editors.mcp.binding import Binding
from memoryd.editors.mcp.tools import SERVER_INSTRUCTIONS, ToolSpec, tool_specs

SERVER_NAME = "memoryd"
#: What the SDK's low-level server advertises for a server with tools and nothing else.
CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}


def sdk_versions() -> tuple[tuple[str, ...], str] | None:
    """The SDK's handshake protocol versions and its default, without importing the SDK.

    ``mcp_types/version.py`` imports only ``typing``; loading that one file
    costs a millisecond where the package costs a second. None when the SDK's
    layout is not the one known here: the bridge then waits for the SDK.
    """
    try:
        spec = importlib.util.find_spec("mcp_types")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
        file_spec = importlib.util.spec_from_file_location("_memoryd_mcp_versions", path)
        if file_spec is None or file_spec.loader is None:
            return None
        module: ModuleType = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        return tuple(module.HANDSHAKE_PROTOCOL_VERSIONS), str(module.LATEST_HANDSHAKE_VERSION)
    except (ImportError, OSError, AttributeError, SyntaxError):
        return None


def tool_json(spec: ToolSpec) -> dict[str, Any]:
    """One tool as ``tools/list`` carries it on the wire."""
    return {"name": spec.name, "title": spec.title, "description": spec.description,
            "inputSchema": spec.input_schema, "outputSchema": spec.output_schema,
            "annotations": spec.annotations}


def _valid_initialize(params: Any) -> bool:
    # Anything the SDK might refuse is left for the SDK to answer.
    if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), str):
        return False
    info = params.get("clientInfo")
    return (isinstance(params.get("capabilities"), dict) and isinstance(info, dict)
            and isinstance(info.get("name"), str) and isinstance(info.get("version"), str))


class EarlyAnswers:
    """The handshake phase: reads lines, answers what it can, keeps what the SDK must replay."""

    def __init__(self, stdin: BinaryIO, out: BinaryIO, specs: Iterable[ToolSpec],
                 versions: tuple[tuple[str, ...], str] | None, ready: threading.Event):
        self.stdin = stdin
        self.out = out
        self.tools = [tool_json(spec) for spec in specs]
        self.versions = versions
        self.ready = ready
        #: Lines the SDK must see first, in order.
        self.replay: list[bytes] = []
        #: Ids answered here whose SDK answer (to the replayed request) must be dropped.
        self.answered: set[Any] = set()
        self.initialized = False
        self.notified = False

    def initialize_result(self, params: dict[str, Any]) -> dict[str, Any]:
        """What the SDK answers to ``initialize`` (its negotiation: the client's version if it
        speaks it in the handshake, else its newest handshake version)."""
        assert self.versions is not None
        supported, latest = self.versions
        requested = params["protocolVersion"]
        return {"protocolVersion": requested if requested in supported else latest,
                "capabilities": CAPABILITIES,
                "serverInfo": {"name": SERVER_NAME, "title": SERVER_NAME, "version": __version__},
                "instructions": SERVER_INSTRUCTIONS}

    def run(self) -> bool:
        """Answer until the SDK is ready or a message needs it; False when stdin closed first."""
        while not self.ready.is_set():
            line = self.stdin.readline()
            if not line:
                return False
            if not self._handle(line):
                self.replay.append(line)
                return True
        return True

    def _handle(self, line: bytes) -> bool:
        if self.versions is None or self.ready.is_set():
            return False
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return False
        method, req_id = msg.get("method"), msg.get("id")
        # Only plain ids are answered here (a dict id is a malformed request: the SDK's to refuse).
        has_id = isinstance(req_id, str | int) and not isinstance(req_id, bool)
        if "id" in msg and not has_id:
            return False
        if method == "initialize" and has_id and not self.initialized:
            if not _valid_initialize(msg.get("params")):
                return False
            self._send(req_id, self.initialize_result(msg["params"]))
            self.answered.add(req_id)
            self.replay.append(line)
            self.initialized = True
            return True
        if method == "notifications/initialized" and not has_id and self.initialized:
            self.replay.append(line)
            self.notified = True
            return True
        if not (has_id and self.notified):
            return False
        params = msg.get("params") or {}
        if method == "tools/list" and isinstance(params, dict) and not params.get("cursor"):
            self._send(req_id, {"tools": self.tools})
            return True
        if method == "ping":
            self._send(req_id, {})
            return True
        return False

    def _send(self, req_id: Any, result: dict[str, Any]) -> None:
        frame = {"jsonrpc": "2.0", "id": req_id, "result": result}
        self.out.write(json.dumps(frame, ensure_ascii=False).encode() + b"\n")
        self.out.flush()


class ReplayThenRead:
    """A text line source for the SDK: the replayed lines, then the rest of stdin."""

    def __init__(self, replay: list[bytes], stdin: BinaryIO):
        self._replay = list(replay)
        self._stdin = stdin

    def readline(self) -> str:
        line = self._replay.pop(0) if self._replay else self._stdin.readline()
        return line.decode("utf-8", errors="replace")


class DropAnswered:
    """The SDK's text output, less its answers to requests already answered early."""

    def __init__(self, out: BinaryIO, answered: set[Any]):
        self._out = out
        self._answered = set(answered)

    def write(self, text: str) -> int:
        if self._answered:
            try:
                msg = json.loads(text)
            except ValueError:
                msg = None
            req_id = msg.get("id") if isinstance(msg, dict) and "method" not in msg else None
            if isinstance(req_id, str | int) and req_id in self._answered:
                self._answered.discard(req_id)
                return len(text)
        self._out.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        self._out.flush()


def load_in_background(load: Callable[[], None]) -> tuple[threading.Event, list[BaseException]]:
    """Run ``load`` (the SDK import) on a thread; the event is set when it has finished."""
    ready = threading.Event()
    failures: list[BaseException] = []

    def target() -> None:
        try:
            load()
        except BaseException as exc:  # handed to the main thread, which re-raises it
            failures.append(exc)
        finally:
            ready.set()

    threading.Thread(target=target, name="mcp-sdk-import", daemon=True).start()
    return ready, failures


def _import_sdk() -> None:
    importlib.import_module("memoryd.editors.mcp.server")


def serve(binding: Binding, cfg: Config) -> None:
    """Run the bridge on this process's stdin and stdout until the editor closes them."""
    specs = tool_specs(cfg.kinds, binding.scopes, binding.default_write_scope)
    ready, failures = load_in_background(_import_sdk)
    # The protocol gets its own copy of fd 1, and fd 1 becomes stderr: a stray print from
    # anything in this process can then never corrupt the JSON-RPC stream.
    wire = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    early = EarlyAnswers(sys.stdin.buffer, wire, specs, sdk_versions(), ready)
    if not early.run():
        return
    from memoryd.log import configure_logging

    # After the early answers: structlog's import is not on the handshake's path.
    configure_logging(cfg.log_level, "json" if cfg.log_format == "auto" else cfg.log_format)
    ready.wait()
    if failures:
        if isinstance(failures[0], ImportError):
            raise SystemExit(f"memoryd mcp cannot start the MCP server: {failures[0]}; install the "
                             "MCP Python SDK into this environment: pip install 'mcp>=2.3,<3'")
        raise failures[0]
    from memoryd.editors.mcp import server as mcp_server

    mcp_server.run(binding, cfg, specs, stdin=ReplayThenRead(early.replay, sys.stdin.buffer),
                   stdout=DropAnswered(wire, early.answered))
