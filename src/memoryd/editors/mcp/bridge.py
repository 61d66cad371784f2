"""What each MCP tool does: arguments checked, the binding applied, the daemon called.

No MCP SDK here (``mcp_server`` wires this to it), so the logic is testable on
its own. Every daemon call goes through :class:`memoryd.client.AsyncClient`;
the bridge never opens the store or loads a model.

Failures come back as :class:`ToolOutcome` with ``is_error`` set, never as an
exception, so one bad call never ends the bridge: a daemon that is down answers
how to start it, and the next call connects again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from memoryd.client import (
    AccessDenied,
    AsyncClient,
    ClientError,
    Disconnected,
    Memory,
    NotFound,
    NotRunning,
    SearchHit,
    Timeout,
)
from memoryd.editors.mcp.binding import Binding
from memoryd.editors.mcp.tools import ToolSpec
from memoryd.errors import ERROR_CODES

log = structlog.get_logger(__name__)

#: recall asks for more than k when rows the binding may not read (org rows, say)
#: take places in the daemon's answer; never past the protocol's k limit.
MAX_K = 100


class ToolFailure(Exception):
    """A tool call that cannot be done; the message is what the agent reads."""

    def __init__(self, message: str, *, code: int | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field


#: The ``_meta`` key of an error result carrying the memoryd error code and argument.
ERROR_META_KEY = "memoryd/error"


@dataclass(frozen=True)
class ToolOutcome:
    """A tool's answer: the structured result, or an error text (``is_error``).

    An error carries no structured content: a tool's output schema describes
    its answer, and some clients (the TypeScript SDK's) check an error's
    structured content against it too. The code and the argument at fault go
    in ``meta`` (the result's ``_meta``) for clients that want them.
    """

    structured: dict[str, Any] | None
    text: str
    is_error: bool = False
    meta: dict[str, Any] | None = None

    @classmethod
    def ok(cls, structured: dict[str, Any]) -> ToolOutcome:
        return cls(structured, json.dumps(structured, ensure_ascii=False))

    @classmethod
    def error(cls, message: str, *, code: int | None = None, field: str | None = None) -> ToolOutcome:
        detail = {k: v for k, v in (("code", code), ("field", field)) if v is not None}
        return cls(None, message, is_error=True, meta={ERROR_META_KEY: detail} if detail else None)


def _not_visible(memory_id: str) -> ToolFailure:
    # The same words for an unknown id and for another owner's row: the answer
    # must not tell the agent that a foreign id exists.
    return ToolFailure(f"no memory with id {memory_id!r} is visible to this agent "
                       "(use an id that recall or remember returned)", code=1002, field="id")


def _time(memory: Memory) -> str:
    return memory.occurred_at or memory.recorded_at or ""


def argument_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> ToolFailure | None:
    """The first way ``arguments`` break ``schema``, naming the argument; None when they fit."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema).iter_errors(dict(arguments)))
    if error is None:
        return None
    if error.validator == "required":
        missing = [name for name in error.validator_value if name not in error.instance]
        field = missing[0] if missing else ""
        return ToolFailure(f"invalid arguments: {field!r} is required", code=-32602, field=field)
    if error.validator == "additionalProperties":
        known = set(schema.get("properties", {}))
        extra = sorted(set(error.instance) - known)
        field = extra[0] if extra else ""
        return ToolFailure(f"invalid arguments: {field!r} is not an argument of this tool "
                           f"(it takes {', '.join(sorted(known)) or 'none'})", code=-32602, field=field)
    field = str(error.absolute_path[0]) if error.absolute_path else ""
    return ToolFailure(f"invalid argument {field!r}: {error.message}", code=-32602, field=field or None)


#: Tool calls that run at once (each may build a page of up to 100 memories); more wait.
MAX_RUNNING_CALLS = 4


class AnswerGate:
    """What the bridge holds for an editor that does not read its answers (PROTOCOL.md 1.2).

    The SDK writes answers to stdout one at a time; while the editor does not
    read, each finished call's answer waits in its task. The gate counts those
    answers (built, not yet taken by the writer) and the calls running, and
    while they pass ``max_bytes`` (about: a tool answer counts twice its text,
    as it carries it as text and as structured content) or ``max_held``
    answers, no call starts and no message is read from the editor. At most
    ``max_running`` calls run at once. So what the bridge holds stays within
    ``max_bytes`` plus ``max_running`` answers, whatever the editor sends.
    """

    def __init__(self, max_bytes: int, max_held: int, max_running: int = MAX_RUNNING_CALLS):
        self.max_bytes = max_bytes
        self.max_held = max_held
        self.max_running = max_running
        self.held_bytes = 0
        self.held = 0
        self.running = 0
        self._sizes: dict[asyncio.Task[Any], int] = {}
        self._event: asyncio.Event | None = None

    def room_to_read(self) -> bool:
        return self.held_bytes < self.max_bytes and self.held + self.running < self.max_held

    def room_to_call(self) -> bool:
        return self.held_bytes < self.max_bytes and self.running < self.max_running

    async def _until(self, room: Callable[[], bool]) -> None:
        # One loop, no lock: nothing runs between the check and what the caller does next.
        while not room():
            if self._event is None:
                self._event = asyncio.Event()
            self._event.clear()
            await self._event.wait()

    def _changed(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait_to_read(self) -> None:
        """Return when the editor's next message may be read."""
        await self._until(self.room_to_read)

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Run one tool call when there is room for its answer."""
        await self._until(self.room_to_call)
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._changed()

    def hold(self, size: int) -> None:
        """The current task has built an answer of about ``size`` bytes; it counts until the
        writer takes it (:meth:`taken`) or the task ends without sending it (a cancelled call)."""
        task = asyncio.current_task()
        if task is None or task in self._sizes:
            return
        self._sizes[task] = size
        self.held_bytes += size
        self.held += 1
        task.add_done_callback(self._release)

    def taken(self) -> None:
        """The writer took the current task's answer."""
        task = asyncio.current_task()
        if task is not None:
            self._release(task)

    def _release(self, task: asyncio.Task[Any]) -> None:
        size = self._sizes.pop(task, None)
        if size is not None:
            self.held_bytes -= size
            self.held -= 1
            self._changed()


class Bridge:
    """Runs the tools for one binding over one daemon connection."""

    def __init__(self, binding: Binding, client: AsyncClient, specs: list[ToolSpec]):
        self.binding = binding
        self.client = client
        self.specs = {spec.name: spec for spec in specs}
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "remember": self.remember, "recall": self.recall, "get_memory": self.get_memory,
            "update_memory": self.update_memory, "forget": self.forget, "memory_status": self.memory_status,
        }

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutcome:
        """Run one tool; every failure becomes an error outcome that says what to do.

        Failures are logged (stderr, which editors keep as the server's log);
        a bug in a handler is answered as an internal error and the bridge goes on.
        """
        started = time.perf_counter()
        try:
            outcome = await self._run(name, arguments)
        except Exception as exc:
            log.exception("mcp.tool_crashed", tool=name, error=repr(exc))
            return ToolOutcome.error(f"internal error in the memoryd bridge ({type(exc).__name__}); "
                                     "see the MCP server's log")
        ms = round((time.perf_counter() - started) * 1000, 1)
        if outcome.is_error:
            detail = (outcome.meta or {}).get(ERROR_META_KEY, {})
            log.warning("mcp.tool_failed", tool=name, ms=ms, code=detail.get("code"), error=outcome.text)
        else:
            log.debug("mcp.tool_done", tool=name, ms=ms)
        return outcome

    async def _run(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutcome:
        spec = self.specs.get(name)
        if spec is None:
            return ToolOutcome.error(f"unknown tool {name!r}; the tools are {', '.join(self.specs)}")
        args = dict(arguments or {})
        problem = argument_problem(spec.input_schema, args)
        if problem is not None:
            return ToolOutcome.error(problem.message, code=problem.code, field=problem.field)
        try:
            return ToolOutcome.ok(await self._handlers[name](args))
        except ToolFailure as exc:
            return ToolOutcome.error(exc.message, code=exc.code, field=exc.field)
        except NotRunning as exc:
            return ToolOutcome.error(f"{exc}, then call this tool again")
        except AccessDenied as exc:
            return ToolOutcome.error(str(exc))
        except ClientError as exc:
            name_of = ERROR_CODES.get(exc.code, ("error",))[0]
            where = f" (argument {exc.field!r})" if exc.field else ""
            return ToolOutcome.error(f"memoryd refused the call{where}: {exc.message} "
                                     f"[error {exc.code} {name_of}]", code=exc.code, field=exc.field)
        except (Disconnected, Timeout) as exc:
            return ToolOutcome.error(str(exc))

    # -- helpers -------------------------------------------------------------------------------
    async def _visible(self, memory_id: str, include: tuple[str, ...] = ()) -> Memory:
        """The memory, if this binding may see it; otherwise the same not-found as an unknown id."""
        try:
            memory = await self.client.get(memory_id, include=include)
        except NotFound:
            raise _not_visible(memory_id) from None
        if not self.binding.can_see(memory):
            raise _not_visible(memory_id)
        return memory

    def _scope_allowed(self, scope: str) -> None:
        if scope not in self.binding.scopes:  # the schema's enum already says so; a second lock
            raise ToolFailure(f"scope {scope!r} is not allowed for this agent "
                              f"(allowed: {', '.join(self.binding.scopes)})", code=1005, field="scope")

    # -- tools ------------------------------------------------------------------------------------
    async def remember(self, args: dict[str, Any]) -> dict[str, Any]:
        scope = args.get("scope") or self.binding.default_write_scope
        self._scope_allowed(scope)
        optional = {k: args[k] for k in ("kind", "importance", "metadata", "ttl_s") if k in args}
        written = await self.client.write(args["content"], scope=scope, **optional,
                                          **self.binding.write_owners())
        return {"id": written.id, "scope": scope, "kind": args.get("kind", "auto"),
                "recorded_at": written.recorded_at or "", "duplicate_of": written.duplicate_of,
                "notices": list(written.notices)}

    async def recall(self, args: dict[str, Any]) -> dict[str, Any]:
        k = int(args.get("k", 10))
        if "scope" in args:
            self._scope_allowed(args["scope"])
        params = {name: args[name] for name in ("kind", "scope", "mode", "as_of") if name in args}
        fetch = k
        while True:
            found = await self.client.search(args["query"], k=fetch, **params, **self.binding.read_keys())
            kept = [hit for hit in found.results if self.binding.can_see(hit)]
            # Rows the binding may not read (org rows without 'org' in --scopes) took places in
            # the answer: ask for more until k remain or the store has no more to give.
            if len(kept) >= k or len(found.results) < fetch or fetch >= MAX_K:
                break
            fetch = min(MAX_K, fetch * 2 + (len(found.results) - len(kept)))
        return {"results": [self._hit(hit) for hit in kept[:k]], "mode_used": found.mode_used,
                "notices": list(found.notices)}

    @staticmethod
    def _hit(hit: SearchHit) -> dict[str, Any]:
        return {"id": hit.id, "kind": hit.kind or "", "scope": hit.scope or "", "status": hit.status or "",
                "score": hit.score, "importance": hit.importance, "time": _time(hit), "content": hit.content}

    async def get_memory(self, args: dict[str, Any]) -> dict[str, Any]:
        memory = await self._visible(args["id"], include=("history", "citations"))
        return {
            "id": memory.id, "kind": memory.kind or "", "scope": memory.scope or "",
            "status": memory.status or "", "content": memory.content, "time": _time(memory),
            "importance": memory.importance, "recorded_at": memory.recorded_at,
            "valid_from": memory.valid_from, "valid_to": memory.valid_to, "retired_at": memory.retired_at,
            "occurred_at": memory.occurred_at, "metadata": memory.metadata, "derived": memory.derived,
            "pending": list(memory.pending), "citations": list(memory.citations or []),
            "history": list(memory.history or []),
        }

    async def update_memory(self, args: dict[str, Any]) -> dict[str, Any]:
        await self._visible(args["id"])
        done = await self.client.supersede(args["id"], content=args["content"], reason=args.get("reason"),
                                           **self.binding.write_owners())
        return {"old_id": done.old_id, "new_id": done.new_id}

    async def forget(self, args: dict[str, Any]) -> dict[str, Any]:
        await self._visible(args["id"])
        reason = args.get("reason") or "forgotten by an agent over MCP"
        done = await self.client.forget(args["id"], reason=reason)
        return {"id": args["id"], "request_id": done.request_id, "status": "deleting"}

    async def memory_status(self, args: dict[str, Any]) -> dict[str, Any]:
        status = await self.client.status()
        backlog = {name: int(q.get("ready", 0)) + int(q.get("failed", 0)) + int(q.get("leased", 0))
                   for name, q in status.queues.items()}
        return {"health": status.health or "healthy", "problems": list(status.problems),
                "version": status.version, "memories": dict(status.memories),
                "backlog": {name: n for name, n in backlog.items() if n},
                "reviews_open": int(status.reviews_open), "identity": self.binding.describe()}
