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

A transcript is untrusted input that names a path: the hook reads only a
regular file inside the editor's transcript folders (:func:`transcript_roots`),
opened without following a last symlink and without blocking (a FIFO or a
device is refused, never read), and a run reads at most ``max_bytes``
(:data:`RUN_BYTES`) in :data:`CHUNK_BYTES` pieces: the rest waits for the next
run. The cursor moves over whole lines only; a line longer than a whole run's
bytes is skipped (a run that starts at a line and finds no newline in
``max_bytes`` marks the cursor ``skipping``; the next runs drop bytes through
the next newline).
"""

from __future__ import annotations

import json
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Text that marks a user entry as a slash command's bookkeeping, not something said.
COMMAND_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>",
                    "<local-command-stderr>", "<command-args>")


#: How much of a transcript one hook run reads at most; the rest is read by the next runs.
#: 2 MiB reads and parses in about 6 ms of CPU alone (4 MiB: 13 ms), 10-15 ms in a hook run
#: (bench/capture_hook.py): well inside the hook's 100 ms; a 300 MB backlog takes ~150 runs.
RUN_BYTES = 2 << 20
#: One read(): a run reads its bytes in pieces this size, never "the rest of the file" at once.
CHUNK_BYTES = 256 << 10
#: Where the transcript folders can be named instead (os.pathsep-separated): tests, other layouts.
ROOTS_ENV = "MEMORYD_CAPTURE_TRANSCRIPT_DIRS"


class TranscriptRefused(Exception):
    """The hook's ``transcript_path`` names something the hook will not read."""


def transcript_roots() -> list[str]:
    """The folders a transcript may live in: ``$MEMORYD_CAPTURE_TRANSCRIPT_DIRS`` when set, else
    Claude Code's ``projects`` folder (under ``$CLAUDE_CONFIG_DIR``, by default ``~/.claude``)."""
    named = os.environ.get(ROOTS_ENV)
    if named:
        return [os.path.expanduser(p) for p in named.split(os.pathsep) if p]
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return [os.path.join(os.path.expanduser(base), "projects")]


def open_transcript(path: str | os.PathLike[str], roots: list[str] | None = None) -> int:
    """A read-only descriptor on the transcript at ``path``; raise TranscriptRefused unless it
    resolves (symlinks followed) to a regular file inside one of ``roots``.

    The resolved path is opened with O_NOFOLLOW (a symlink swapped in after the check is
    refused, not followed) and O_NONBLOCK (opening a FIFO must not wait for a writer), and
    what was opened is checked with fstat, so the check and the read are of one file.
    FileNotFoundError passes through: a transcript not written yet is not an error.
    """
    real = os.path.realpath(path)
    inside = False
    for root in transcript_roots() if roots is None else roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            inside = True
            break
    if not inside:
        raise TranscriptRefused(f"{path} is not inside the editor's transcript folders "
                                f"(set {ROOTS_ENV} to read transcripts elsewhere)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise TranscriptRefused(f"{path} cannot be opened as a transcript ({exc.strerror})") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TranscriptRefused(f"{path} is not a regular file")
    return fd


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
    """Turns found past the offset, where the next read starts, and whether it starts inside
    a line too long to read (``skipping``: drop bytes through the next newline first)."""

    __slots__ = ("next_index", "offset", "skipping", "turns")

    def __init__(self, turns: list[Turn], offset: int, next_index: int, skipping: bool = False) -> None:
        self.turns = turns
        self.offset = offset
        self.next_index = next_index
        self.skipping = skipping


def _turn(raw: bytes, index: int) -> Turn | None:
    """The turn one whole line holds, numbered ``index``; None for anything else."""
    if not raw.strip():
        return None
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # a damaged (or absurdly nested) line is skipped, never fatal to the editor
    found = turn_text(entry)
    if found is None:
        return None
    timestamp = entry.get("timestamp") if isinstance(entry.get("timestamp"), str) else None
    uuid = entry.get("uuid") if isinstance(entry.get("uuid"), str) else None
    return Turn(index, found[0], found[1], timestamp, uuid)


def read_turns(path: str | os.PathLike[str], offset: int = 0, next_index: int = 0, *,
               skipping: bool = False, roots: list[str] | None = None,
               max_bytes: int | None = None) -> ReadResult:
    """The turns of ``path`` from byte ``offset``, at most ``max_bytes`` of it (default
    :data:`RUN_BYTES`); the first turn found gets ``next_index``. Raise TranscriptRefused
    for anything but a regular file inside ``roots`` (default :func:`transcript_roots`).

    A file shorter than ``offset`` was replaced (not appended to): it is read
    from the start again, and its turns get indices from 0 again, which is
    what its idempotency keys would have been from the start.
    """
    max_bytes = RUN_BYTES if max_bytes is None else max_bytes
    fd = open_transcript(path, roots)
    try:
        if os.fstat(fd).st_size < offset:
            offset, next_index, skipping = 0, 0, False
        chunks = []
        pos = offset
        while pos - offset < max_bytes:
            chunk = os.pread(fd, min(CHUNK_BYTES, offset + max_bytes - pos), pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        data = b"".join(chunks)  # at most max_bytes: one copy, then split once
        del chunks
        end = data.rfind(b"\n")
        if end < 0:
            # A whole run's bytes and no newline: a line longer than any run may read. Drop
            # what was read; the next runs go on dropping through the newline that ends it.
            # (Fewer bytes than that: a last line still being written, left for the next run.)
            full = len(data) >= max_bytes
            return ReadResult([], offset + len(data) if full else offset, next_index, skipping or full)
        lines = data[:end].split(b"\n")
        if skipping:
            lines.pop(0)  # the rest of the line too long to read
        turns: list[Turn] = []
        index = next_index
        for raw in lines:
            turn = _turn(raw, index)
            if turn is not None:
                turns.append(turn)
                index += 1
        return ReadResult(turns, offset + end + 1, index, False)
    finally:
        os.close(fd)
