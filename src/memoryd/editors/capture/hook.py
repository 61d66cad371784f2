"""``memoryd capture claude-code``: a Claude Code hook that writes new conversation turns.

Claude Code runs the hook with one JSON object on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, and per event e.g.
``prompt`` for UserPromptSubmit, ``reason`` for SessionEnd). On
UserPromptSubmit, Stop and SessionEnd the hook reads the transcript from where
the last run stopped (a per-transcript cursor under the data directory; at most
a few MiB a run, editors/capture/transcript.py, and only a regular file in the
editor's transcript folders) and writes each new turn as a ``conversation``
memory:

- scope ``project`` (named from the hook's ``cwd`` as ``--project auto``
  names it) or ``user``; ``session_id`` the editor's session id;
- ``occurred_at`` the turn's timestamp; ``metadata`` its role, turn index and
  transcript path;
- idempotency key derived from the transcript path and the turn index, so a
  turn delivered twice (a second event, a replayed spool) writes once.

It must never slow or break the editor: it gives the daemon a fixed time
budget, spools the turns to disk when the daemon is down or slow
(editors/capture/spool.py), prints nothing on stdout (UserPromptSubmit's
stdout would reach the model as context, Stop's JSON as a decision) and
always exits 0. Standard library only (editors/capture/rpc.py speaks to the
socket): no SQLAlchemy, no models, not even the client library.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time

from memoryd import privatefs
from memoryd.editors.capture import spool as spool
from memoryd.editors.capture.rpc import DeadlineCaller, RpcError
from memoryd.editors.capture.transcript import TranscriptRefused, Turn, read_turns
from memoryd.editors.project import project_key

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    Call = Callable[[str, dict[str, Any]], Any]

EVENTS = ("UserPromptSubmit", "Stop", "SessionEnd")
SOURCE = "claude-code"
#: A turn longer than this (UTF-8 bytes) is cut, below the daemon's 65,536-byte limit.
MAX_TEXT_BYTES = 60_000
#: How long a run waits for another run holding the same transcript's cursor.
LOCK_WAIT_S = 0.03
#: A cursor left this long after its transcript was deleted is removed (SessionEnd prunes them).
CURSOR_KEEP_S = 86_400.0
#: Codes that refuse an item for good: the turn is dropped, the others go on.
REFUSED_CODES = (-32602, 1001, 1002, 1005, 1006, 1007)


class Options:
    """Where the turns go and how long the daemon may take (``deadline``: the
    time.monotonic() after which the hook stops waiting for the daemon and spools)."""

    __slots__ = ("data_dir", "deadline", "scope", "socket", "user_id")

    def __init__(self, scope: str, user_id: str | None, socket: str, data_dir: str,
                 deadline: float) -> None:
        self.scope = scope  # "project" | "user"
        self.user_id = user_id
        self.socket = socket
        self.data_dir = data_dir
        self.deadline = deadline


class Outcome:
    """What one hook run did (for tests and the benchmark; the hook itself prints nothing):
    ``action`` is ignored, nothing, sent, spooled, busy, refused (the transcript path names
    no regular file in the editor's transcript folders) or failed. ``turns`` counts the
    turns stored (sent) or kept in the spool (spooled)."""

    __slots__ = ("action", "detail", "turns")

    def __init__(self, action: str, turns: int = 0, detail: str = "") -> None:
        self.action = action
        self.turns = turns
        self.detail = detail


def idempotency_key(transcript_path: str, index: int) -> str:
    """A turn's key: the transcript path and the turn index, hashed to a fixed length."""
    digest = hashlib.sha256(f"{transcript_path}\n{index}".encode()).hexdigest()
    return f"claude-code:{digest[:48]}"


def _clip(text: str) -> tuple[str, bool]:
    data = text.encode("utf-8")
    if len(data) <= MAX_TEXT_BYTES:
        return text, False
    return data[:MAX_TEXT_BYTES].decode("utf-8", errors="ignore") + " […]", True


def turn_params(turn: Turn, hook: dict[str, Any], opts: Options, project: str) -> dict[str, Any]:
    """memory.write params for one turn. Nothing in them depends on which event delivered
    the turn, so a second delivery is the same request (same key, same params)."""
    transcript = str(hook["transcript_path"])
    text, clipped = _clip(turn.text)
    metadata: dict[str, Any] = {"source": SOURCE, "role": turn.role, "turn_index": turn.turn_index,
                                "transcript_path": transcript}
    if turn.uuid:
        metadata["entry_uuid"] = turn.uuid
    if clipped:
        metadata["truncated"] = True
    params: dict[str, Any] = {
        "content": text, "kind": "conversation", "scope": opts.scope, "project": project,
        "agent_id": SOURCE, "session_id": str(hook["session_id"]), "metadata": metadata,
        "idempotency_key": idempotency_key(transcript, turn.turn_index),
    }
    if opts.scope == "user":
        params["user_id"] = opts.user_id
    if turn.timestamp:
        params["occurred_at"] = turn.timestamp
    return params


# -- the per-transcript cursor -------------------------------------------------------------

def state_path(data_dir: str, transcript_path: str) -> str:
    """Where the cursor of one transcript is kept."""
    name = hashlib.sha256(transcript_path.encode()).hexdigest()[:32]
    return os.path.join(data_dir, "capture", SOURCE, f"{name}.json")


@contextlib.contextmanager
def cursor(path: str, wait_s: float = LOCK_WAIT_S) -> Iterator[dict[str, Any] | None]:
    """The transcript's cursor, locked for this run (None when another run holds it)."""
    privatefs.make_dirs(os.path.dirname(path))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        give_up = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > give_up:
                    yield None
                    return
                time.sleep(0.002)
        raw = os.read(fd, 1 << 16)
        try:
            state = json.loads(raw) if raw.strip() else {}
        except ValueError:
            state = {}
        if not isinstance(state, dict):
            state = {}
        before = dict(state)
        yield state
        if state != before:
            body = json.dumps(state).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, body)
            os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def prune_cursors(data_dir: str, now: float | None = None, keep_s: float = CURSOR_KEEP_S) -> int:
    """Remove the cursors of transcripts that no longer exist (Claude Code deletes old
    transcripts), once they are ``keep_s`` old; return how many went. A cursor whose
    transcript is still there stays whatever its age: a resumed session goes on from it."""
    folder = os.path.dirname(state_path(data_dir, ""))
    now = time.time() if now is None else now
    removed = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(folder, name)
        try:
            if not name.endswith(".json") or now - os.stat(path).st_mtime < keep_s:
                continue
            with open(path, encoding="utf-8") as fh:
                try:
                    state = json.loads(fh.read() or "{}")
                except ValueError:  # damaged: names no transcript to resume
                    state = {}
            transcript = state.get("transcript") if isinstance(state, dict) else None
            if isinstance(transcript, str) and os.path.exists(transcript):
                continue
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    return removed


# -- sending ---------------------------------------------------------------------------

class Sent:
    """What :func:`send` did: ``kept`` the items not delivered (for the spool), ``stored`` how
    many the daemon wrote (or answered from their key), ``refused`` one line per refused item."""

    __slots__ = ("kept", "refused", "stored")

    def __init__(self) -> None:
        self.kept: list[dict[str, Any]] = []
        self.stored = 0
        self.refused: list[str] = []


def _item_index(exc: RpcError, count: int) -> int | None:
    """Which item of a write_many the daemon refused: ``data.index``, or the ``items[i]`` its
    ``field`` names (the socket's NUL check names the field but gives no index)."""
    index = exc.data.get("index")
    if not isinstance(index, int):
        field = exc.data.get("field")
        if isinstance(field, str) and field.startswith("items["):
            digits = field[len("items["):].partition("]")[0]
            index = int(digits) if digits.isdigit() else None
    return index if isinstance(index, int) and 0 <= index < count else None


def _refusal(item: dict[str, Any], exc: RpcError) -> str:
    meta = item.get("metadata")
    turn = meta.get("turn_index") if isinstance(meta, dict) else None
    return f"turn {turn}: {exc.message} (error {exc.code})"


def send(call: Call, items: list[dict[str, Any]], deadline: float) -> Sent:
    """Write ``items``; say how many were stored, which were refused and which to keep.

    A refused item (tombstoned, conflicting, invalid) is dropped alone: sending
    it again would be refused again, and the others are written. Transport
    failures raise.
    """
    out = Sent()
    pending = list(items)
    while pending:
        if time.monotonic() > deadline:
            out.kept = pending
            return out
        try:
            call("memory.write_many", {"items": pending})
            out.stored += len(pending)
            return out
        except RpcError as exc:
            index = _item_index(exc, len(pending))
            if exc.code in (-32602, 1001) and index is not None:
                out.refused.append(_refusal(pending.pop(index), exc))
                continue
            if exc.code not in REFUSED_CODES:
                out.kept = pending  # overloaded or store unavailable: keep them all
                return out
        # write_many is all or nothing and did not say which item it refused: one at a time.
        for i, item in enumerate(pending):
            if time.monotonic() > deadline:
                out.kept.extend(pending[i:])
                return out
            try:
                call("memory.write", item)
                out.stored += 1
            except RpcError as exc:
                if exc.code in REFUSED_CODES:
                    out.refused.append(_refusal(item, exc))
                else:
                    out.kept.append(item)
        return out
    return out


def flush_one(call: Call, folder: str, deadline: float) -> bool:
    """Send the oldest spooled file while the daemon is reachable; True when one was sent."""
    for path in spool.pending(folder):
        taken = spool.claim(path)
        if taken is None:
            continue
        try:
            items, _ = spool.read(taken)
            rest = send(call, items, deadline).kept
        except Exception:
            spool.release(taken)
            raise
        if rest:
            spool.release(taken)
            return False
        spool.remove(taken)
        return True
    return False


def run(hook: Any, opts: Options) -> Outcome:
    """Handle one hook payload (already parsed); at SessionEnd, prune stale cursors too."""
    outcome = capture(hook, opts)
    if outcome.action != "ignored" and hook.get("hook_event_name") == "SessionEnd" \
            and time.monotonic() < opts.deadline:
        prune_cursors(opts.data_dir)
    return outcome


def capture(hook: Any, opts: Options) -> Outcome:
    """Write the transcript's new turns (or spool them)."""
    if not isinstance(hook, dict) or hook.get("hook_event_name") not in EVENTS:
        return Outcome("ignored", detail="not an event capture handles")
    transcript, session, cwd = hook.get("transcript_path"), hook.get("session_id"), hook.get("cwd")
    if not all(isinstance(v, str) and v for v in (transcript, session, cwd)):
        return Outcome("ignored", detail="the payload lacks transcript_path, session_id or cwd")
    assert isinstance(transcript, str) and isinstance(cwd, str)
    if opts.scope == "user" and not opts.user_id:
        return Outcome("failed", detail="scope user needs a user id (--user-id or MEMORYD_USER_ID)")
    folder = spool.spool_dir(opts.data_dir)
    with cursor(state_path(opts.data_dir, transcript)) as state:
        if state is None:
            return Outcome("busy", detail="another capture run holds this transcript")
        try:
            found = read_turns(transcript, int(state.get("offset", 0)), int(state.get("next_index", 0)),
                               skipping=state.get("skipping") is True)
        except FileNotFoundError:
            return Outcome("nothing", detail="the transcript does not exist (yet)")
        except TranscriptRefused as exc:
            return Outcome("refused", detail=str(exc))
        advance = {"transcript": transcript, "offset": found.offset, "next_index": found.next_index,
                   "skipping": found.skipping}
        if not found.turns:
            state.update(advance)
            return Outcome("nothing")
        project = project_key(cwd)  # the repository's key, not its folder name (docs/projects.md)
        items = [turn_params(t, hook, opts, project) for t in found.turns]
        sent = Sent()
        sent.kept = items
        caller = None
        try:
            caller = DeadlineCaller(opts.socket, opts.deadline)
            sent = send(caller, items, opts.deadline)
            if not sent.kept and time.monotonic() < opts.deadline:
                flush_one(caller, folder, opts.deadline)
        except Exception as exc:  # down, refused, slow, broken: the spool keeps the turns
            detail = f"{type(exc).__name__}: {exc}"
        else:
            detail = ""
        finally:
            if caller is not None:
                caller.close()
        if sent.kept:
            spool.append(folder, sent.kept)  # raises when the disk refuses: the cursor stays put
        state.update(advance)
        refused = f"refused {len(sent.refused)}: " + "; ".join(sent.refused) if sent.refused else ""
        if sent.kept:
            detail = detail or "the daemon did not answer in time"
            return Outcome("spooled", len(sent.kept), "; ".join(p for p in (detail, refused) if p))
        return Outcome("sent", sent.stored, refused)
