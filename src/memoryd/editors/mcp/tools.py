"""The MCP tools the bridge offers: names, descriptions, schemas and annotations.

Plain data, no SDK import: the server module turns these into the SDK's
``Tool`` objects, the bridge validates arguments against ``input_schema``, and
the tests read them without starting anything. The descriptions are written
for the agent that reads them when it decides which tool to call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MODES = ("hybrid", "lexical", "vector")

SERVER_INSTRUCTIONS = (
    "memoryd is your long-term memory across sessions. Before answering or acting on something "
    "that may have come up before (conventions, decisions, how to build or test, the user's "
    "preferences, earlier fixes), call recall. When you learn something worth keeping, call "
    "remember with one self-contained statement. When a stored memory turns out to be wrong or "
    "outdated, call update_memory rather than remembering a contradiction."
)


@dataclass(frozen=True)
class ToolSpec:
    """One tool as MCP lists it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    read_only: bool
    destructive: bool
    idempotent: bool
    annotations: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        # openWorldHint false: the tools touch this machine's memory store, nothing beyond it.
        object.__setattr__(self, "annotations", {
            "title": self.title, "readOnlyHint": self.read_only, "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent, "openWorldHint": False,
        })


def _obj(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


_STR = {"type": "string"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_OPT_STR = {"type": ["string", "null"]}
_ID = {"type": "string", "minLength": 1, "maxLength": 64,
       "description": "A memory id (mem_...) as recall or remember returned it."}

_MEMORY_FIELDS: dict[str, Any] = {
    "id": _STR, "kind": _STR, "scope": _STR, "status": _STR,
    "content": _OPT_STR,
    "time": {"type": "string", "description": "When it happened if known, else when it was recorded."},
}


def tool_specs(kinds: Sequence[str], scopes: Sequence[str], default_scope: str) -> list[ToolSpec]:
    """The six tools, with the ``kind`` and ``scope`` choices this bridge allows."""
    kind_enum = ["auto", *kinds]
    scope_prop = {"type": "string", "enum": list(scopes)}
    scope_help = {
        "agent": "'agent' only you (this agent) will see it",
        "project": "'project' every agent working on this project sees it",
        "user": "'user' it follows the user across projects",
        "session": "'session' only this session sees it, and it expires in a day",
        "org": "'org' everyone sees it",
    }
    scope_text = "; ".join(scope_help[s] for s in scopes if s in scope_help)

    remember = ToolSpec(
        name="remember", title="Remember",
        description=(
            "Save something worth knowing in a later session: a fact about this codebase or its "
            "environment, a decision and why it was made, a preference of the user, a procedure "
            "that worked, a pitfall to avoid. Write one self-contained statement per call, with "
            "the names, paths and versions it depends on (no 'it' or 'this' that only makes sense "
            "in this chat). Never store secrets, tokens or passwords. Content that is already "
            "stored is not stored twice. Returns the memory's id."),
        input_schema=_obj({
            "content": {"type": "string", "minLength": 1, "maxLength": 65536,
                        "description": "The statement to remember."},
            "kind": {"type": "string", "enum": kind_enum,
                     "description": "What it is; 'auto' (default) lets memoryd classify it."},
            "importance": {"type": "number", "minimum": 0, "maximum": 1,
                           "description": "0..1, default 0.5; higher ranks it above others in recall."},
            "metadata": {"type": "object", "propertyNames": {"pattern": "^[^_]"},
                         "description": "Extra key/value data kept with it (keys must not start with _)."},
            "ttl_s": {"type": "number", "exclusiveMinimum": 0,
                      "description": "Forget it after this many seconds (for things true only for a while)."},
            "scope": {**scope_prop, "description": f"Who sees it (default '{default_scope}'): {scope_text}."},
        }, ["content"]),
        output_schema=_obj({
            "id": _STR, "scope": _STR, "kind": _STR, "recorded_at": _STR,
            "duplicate_of": {**_OPT_STR, "description": "Set when identical content was already stored."},
            "notices": _STRINGS,
        }, ["id", "scope", "recorded_at", "notices"]),
        read_only=False, destructive=False, idempotent=False,
    )

    recall = ToolSpec(
        name="recall", title="Recall",
        description=(
            "Search long-term memory. Call it before you answer or act on anything that may have "
            "been learned before: project conventions, past decisions, how to build, run or test, "
            "the user's preferences, earlier errors and their fixes. Ask in plain words or key "
            "terms. Results are ranked best first, each with its id, kind, scope, score, time and "
            "content; scores compare within one answer only. Read 'notices': they say when the "
            "answer may be incomplete (for example, memories not yet indexed for search by meaning)."),
        input_schema=_obj({
            "query": {"type": "string", "minLength": 1, "maxLength": 4096,
                      "description": "What you want to know."},
            "k": {"type": "integer", "minimum": 1, "maximum": 100,
                  "description": "How many results at most (default 10)."},
            "kind": {"type": "string", "enum": kind_enum, "description": "Only memories of this kind."},
            "scope": {**scope_prop,
                      "description": "Only memories of this scope (default: all you may read)."},
            "mode": {"type": "string", "enum": list(MODES),
                     "description": "'hybrid' (default) words and meaning; 'lexical' exact words; "
                                    "'vector' meaning only."},
            "as_of": {"type": "string", "format": "date-time",
                      "description": "RFC 3339 time: answer with what memory held then "
                                     "(superseded memories included)."},
        }, ["query"]),
        output_schema=_obj({
            "results": {"type": "array", "items": {
                "type": "object",
                "properties": {**_MEMORY_FIELDS, "score": {"type": "number"},
                               "importance": {"type": ["number", "null"]}},
                "required": ["id", "kind", "scope", "score", "time", "content"],
            }},
            "mode_used": _STR,
            "notices": _STRINGS,
        }, ["results", "mode_used", "notices"]),
        read_only=True, destructive=False, idempotent=True,
    )

    get_memory = ToolSpec(
        name="get_memory", title="Get memory",
        description=(
            "Read one memory in full by the id recall or remember gave you: its content and "
            "status, when it was valid, the memories it was derived from (citations) and its "
            "history (written, corroborated, superseded). Use it to check where a memory came from "
            "before you rely on it."),
        input_schema=_obj({"id": _ID}, ["id"]),
        output_schema=_obj({
            **_MEMORY_FIELDS,
            "importance": {"type": ["number", "null"]},
            "recorded_at": _OPT_STR, "valid_from": _OPT_STR, "valid_to": _OPT_STR,
            "retired_at": _OPT_STR, "occurred_at": _OPT_STR,
            "metadata": {"type": ["object", "null"]},
            "derived": {"type": "boolean"},
            "pending": _STRINGS,
            "citations": _STRINGS,
            "history": {"type": "array", "items": {"type": "object"}},
        }, ["id", "kind", "scope", "status", "content", "time", "citations", "history"]),
        read_only=True, destructive=False, idempotent=True,
    )

    update_memory = ToolSpec(
        name="update_memory", title="Update memory",
        description=(
            "Correct a memory that is wrong or out of date. The old memory is closed (kept in its "
            "history, no longer returned by recall) and the new content replaces it in the same "
            "scope. Say why in 'reason'. Use this, not remember, when you find that something "
            "stored is no longer true, so recall does not return both."),
        input_schema=_obj({
            "id": {**_ID, "description": "The id of the memory to replace."},
            "content": {"type": "string", "minLength": 1, "maxLength": 65536,
                        "description": "The corrected statement, self-contained."},
            "reason": {"type": "string", "maxLength": 2000, "description": "Why the old one is wrong."},
        }, ["id", "content"]),
        output_schema=_obj({"old_id": _STR, "new_id": _STR}, ["old_id", "new_id"]),
        # Nothing is lost (the old row stays in history), but a second call on the same id fails.
        read_only=False, destructive=False, idempotent=False,
    )

    forget = ToolSpec(
        name="forget", title="Forget",
        description=(
            "Erase one memory for good, by id, and keep the same content from being stored again "
            "in its scope. Only for content that must not be kept: private data, something the "
            "user asked you to forget, or harmful misinformation. To fix a fact, use update_memory "
            "instead. This cannot be undone."),
        input_schema=_obj({
            "id": {**_ID, "description": "The id of the memory to erase."},
            "reason": {"type": "string", "maxLength": 2000, "description": "Why (kept in the audit log)."},
        }, ["id"]),
        output_schema=_obj({"id": _STR, "request_id": _STR, "status": _STR}, ["id", "request_id", "status"]),
        read_only=False, destructive=True, idempotent=True,
    )

    memory_status = ToolSpec(
        name="memory_status", title="Memory status",
        description=(
            "Check that the memory service is running and healthy, and how much background work "
            "is waiting (memories not yet indexed). Use it when recall misses something you just "
            "stored or when another memory tool reports an error."),
        input_schema=_obj({}),
        output_schema=_obj({
            "health": _STR, "problems": _STRINGS, "version": _STR,
            "memories": {"type": "object", "additionalProperties": {"type": "integer"}},
            "backlog": {"type": "object", "additionalProperties": {"type": "integer"}},
            "reviews_open": {"type": "integer"},
            "identity": {"type": "object"},
        }, ["health", "problems", "version", "memories", "backlog", "identity"]),
        read_only=True, destructive=False, idempotent=True,
    )
    return [remember, recall, get_memory, update_memory, forget, memory_status]
