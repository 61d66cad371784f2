"""Conversation turns from a Claude Code transcript (JSON Lines, appended as a session runs).

Each line of a transcript is one entry: ``type`` (``user``, ``assistant``,
``system``, ``summary``, ``file-history-snapshot`` ...), ``uuid``,
``parentUuid``, ``sessionId``, ``timestamp``, ``cwd``, ``isSidechain`` and,
for the two message types, ``message`` with ``role`` and ``content`` (a string,
or a list of blocks: ``text``, ``thinking``, ``tool_use``, ``tool_result``,
``image``).

A *turn* is an entry that carries conversation: a person's prompt (text, not
a tool result and not a slash command's bookkeeping) or the text an
assistant entry says (its ``text`` blocks; thinking and tool calls are not
conversation). Claude Code writes each assistant content block as its own
entry, so one reply may be several turns. Entries are written once and never
changed, so a turn's index (its ordinal among the transcript's turns) is
stable: it is half of the turn's idempotency key.

Reading starts at a byte offset and stops before a last line that has no
newline yet (an entry still being written).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Any

#: Text that marks a user entry as a slash command's bookkeeping, not something said.
COMMAND_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>",
                    "<local-command-stderr>", "<command-args>")


class Turn:
    """One turn of the conversation. (Plain classes, not dataclasses or NamedTuples: the
    hook avoids importing dataclasses and typing.)"""

    __slots__ = ("role", "text", "timestamp", "turn_index", "uuid")

    def __init__(self, turn_index: int, role: str, text: str, timestamp: str | None,
                 uuid: str | None) -> None:
        self.turn_index = turn_index
        self.role = role
        self.text = text
        self.timestamp = timestamp
        self.uuid = uuid


def _text_blocks(content: Any) -> str | None:
    """The text of a message's content; None when it holds a tool result or no text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            return None  # a tool's output, fed back to the model: not conversation
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "\n\n".join(texts) if texts else None


def turn_text(entry: Any) -> tuple[str, str] | None:
    """(role, text) when a transcript entry is a conversation turn, else None."""
    if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
        return None
    # Subagents' entries, injected caveats and compaction summaries are not the conversation.
    if entry.get("isSidechain") or entry.get("isMeta") or entry.get("isCompactSummary"):
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    text = _text_blocks(message.get("content"))
    if text is None or not text.strip():
        return None
    role = str(message.get("role") if message.get("role") in ("user", "assistant") else entry["type"])
    if role == "user" and text.lstrip().startswith(COMMAND_PREFIXES):
        return None
    return role, text.strip()


class ReadResult:
    """Turns found past the offset, and where the next read starts."""

    __slots__ = ("next_index", "offset", "turns")

    def __init__(self, turns: list[Turn], offset: int, next_index: int) -> None:
        self.turns = turns
        self.offset = offset
        self.next_index = next_index


def read_turns(path: str | os.PathLike[str], offset: int = 0, next_index: int = 0) -> ReadResult:
    """The turns of ``path`` from byte ``offset``; the first one found gets ``next_index``.

    A file shorter than ``offset`` was replaced (not appended to): it is read
    from the start again, and its turns get indices from 0 again, which is
    what its idempotency keys would have been from the start.
    """
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        if size < offset:
            offset, next_index = 0, 0
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n")
    if end < 0:
        return ReadResult([], offset, next_index)
    turns = []
    index = next_index
    for raw in data[:end].split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue  # a damaged line is skipped, never fatal to the editor
        found = turn_text(entry)
        if found is None:
            continue
        timestamp = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
        uuid = entry.get("uuid") if isinstance(entry.get("uuid"), str) else None
        turns.append(Turn(index, found[0], found[1], timestamp, uuid))
        index += 1
    return ReadResult(turns, offset + end + 1, index)
