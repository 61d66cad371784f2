"""Memory rows: the write path (idempotency, tombstones, duplicates), reads, access counts."""

from __future__ import annotations

import hashlib
import json
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, delete, insert, select, update

from memoryd.clock import parse_rfc3339, to_rfc3339
from memoryd.errors import Conflict, NotFound, Tombstoned
from memoryd.queue import jobs as jobq
from memoryd.store import audit, keyed, links, vectors
from memoryd.store.backends import backend_for
from memoryd.store.ids import new_memory_id
from memoryd.store.schema import LIVE_STATUSES, idempotency_keys, memories, tombstones
from memoryd.text.normalize import loose


def normalize_content(content: str) -> str:
    """The form identity is judged on: Unicode NFC, outer whitespace trimmed."""
    return unicodedata.normalize("NFC", content).strip()


def content_hash(content: str) -> str:
    """sha256 of the normalised content (duplicates and tombstones compare this)."""
    return hashlib.sha256(normalize_content(content).encode("utf-8")).hexdigest()


def loose_hash(content: str) -> str:
    """sha256 of the loosely normalised content (text/normalize.py ``loose``): what forget
    finds a row's copies by, whatever their length (``memories.loose_hash``, indexed)."""
    return hashlib.sha256(loose(content).encode("utf-8")).hexdigest()


def lock_name(scope: str, owner: str, chash: str) -> str:
    """The name a write locks (Backend.lock_identities) for one content identity. A forget
    lays its tombstones under the same names, so a write and a forget of one text are one
    serialised decision on every backend."""
    return f"content\0{scope}\0{owner}\0{chash}"


@dataclass(frozen=True)
class Restore:
    """What an import restores of an exported row beyond the write params (operator only).

    ``links`` are (kind, "to" | "from", other memory id, created_at): the new
    row is the link's source for "to" and its target for "from".
    """

    recorded_at: str
    status: str = "active"
    source_id: str | None = None
    retired_at: str | None = None
    expires_at: str | None = None
    derived: bool = False
    importance_raw: float | None = None
    corroboration: int = 1
    access_count: int = 0
    last_accessed_at: str | None = None
    kind_method: str | None = None
    kind_confidence: float | None = None
    links: tuple[tuple[str, str, str, str | None], ...] = ()
    #: The exported embedding, stored as is instead of queueing embed: set only when its model
    #: and dimension are the target embedder's and it was made from this content
    #: (service/validation.py keep_vector).
    vector: KeptVector | None = None


@dataclass(frozen=True)
class KeptVector:
    """An imported row's vector that the target keeps: its model, dimension and float32
    little-endian bytes (the content hash is the row's own, checked before)."""

    model: str
    dim: int
    data: bytes


@dataclass
class NewMemory:
    """A validated memory.write request (service/validation.py builds it)."""

    content: str
    kind: str
    scope: str
    owner: str
    agent_id: str | None = None
    user_id: str | None = None
    project: str | None = None
    session_id: str | None = None
    importance: float = 0.5
    valid_from: str | None = None
    valid_to: str | None = None
    #: When the remembered thing happened or was said (protocol 1.1), if the writer knows.
    occurred_at: str | None = None
    ttl_s: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    #: sha256 of the request's parameters, to tell a retry from a reuse of the key.
    request_hash: str = ""
    #: Derived memories (extract) start as candidates; writes from clients are active.
    status: str = "active"
    derived: bool = False
    #: An imported row's state (memoryd import); such a write takes the per-write path.
    restore: Restore | None = None

    @property
    def hash(self) -> str:
        return content_hash(self.content)


@dataclass
class WriteContext:
    """What the write path needs besides the request."""

    actor: str
    #: Passes to enqueue for a new memory (those that exist in this version).
    passes: Sequence[str]
    max_attempts: int
    idempotency_ttl_s: float


def write_memory(conn: Connection, req: NewMemory, now: datetime, ctx: WriteContext) -> dict[str, Any]:
    """Write one memory inside the caller's transaction and return its result.

    Raises Tombstoned (1006) or Conflict (1007); the caller's savepoint then
    discards anything this call wrote.
    """
    now_epoch = now.timestamp()
    chash = req.hash
    # Already held when the group committer took this write; not when another mutation
    # (supersede, merge, an extracted fact) writes: re-taking a held lock is a no-op.
    backend_for(conn).lock_identities(conn, [lock_name(req.scope, req.owner, chash)])
    if req.idempotency_key is not None:
        prior = conn.execute(
            select(idempotency_keys.c.request_hash, idempotency_keys.c.result).where(
                idempotency_keys.c.scope == req.scope,
                idempotency_keys.c.owner == req.owner,
                idempotency_keys.c.key == req.idempotency_key,
                idempotency_keys.c.expires_at > now_epoch,
            )
        ).first()
        if prior is not None:
            if prior.request_hash != req.request_hash:
                raise Conflict(
                    "idempotency_key was already used with different parameters; "
                    "use a new key for a new write",
                    data={"field": "idempotency_key"},
                )
            return dict(prior.result)

    if is_tombstoned(conn, req.scope, req.owner, chash):
        raise tombstoned_error()

    # A restored row that is history (superseded, rejected, archived) is kept as it was:
    # only a live row can be a duplicate of another.
    history = req.restore is not None and req.restore.status not in LIVE_STATUSES
    dup = None if history else conn.execute(
        select(memories.c.id, memories.c.recorded_at, memories.c.corroboration).where(
            memories.c.scope == req.scope,
            memories.c.owner == req.owner,
            memories.c.content_hash == chash,
            memories.c.status.in_(LIVE_STATUSES),
        ).limit(1)
    ).first()
    if dup is not None:
        # Another independent write of the same content: it corroborates the row.
        conn.execute(update(memories).where(memories.c.id == dup.id)
                     .values(corroboration=memories.c.corroboration + 1))
        ev = corroborate_event(to_rfc3339(now), ctx.actor, dup.id, dup.corroboration)
        audit.append_many(conn, [ev])
        result: dict[str, Any] = duplicate_result(dup.id, dup.recorded_at)
    else:
        result = _insert_new(conn, req, chash, now, ctx)
    if req.restore is not None and req.restore.links:
        _restore_links(conn, result["id"], req.restore, now)

    if req.idempotency_key is not None:
        # An expired key may linger until pruned; it must not block the key's reuse.
        conn.execute(delete(idempotency_keys).where(
            idempotency_keys.c.scope == req.scope, idempotency_keys.c.owner == req.owner,
            idempotency_keys.c.key == req.idempotency_key,
        ))
        conn.execute(
            insert(idempotency_keys).values(
                scope=req.scope, owner=req.owner, key=req.idempotency_key,
                request_hash=req.request_hash, result=result, created_at=now_epoch,
                expires_at=now_epoch + ctx.idempotency_ttl_s,
            )
        )
    return result


def _insert_new(conn: Connection, req: NewMemory, chash: str, now: datetime,
                ctx: WriteContext) -> dict[str, Any]:
    values = new_row(req, chash, now)
    passes: Sequence[str] = ctx.passes
    kept = req.restore.vector if req.restore is not None else None
    if req.restore is not None:
        values.update(restored_values(req.restore, req.importance))
        # An imported row brings its derived rows along: it is embedded again, not re-extracted.
        passes = [p for p in ctx.passes if p in RESTORED_PASSES]
        if kept is not None:
            # Its vector came with it: no embed, but what the embed pass queues after a vector.
            passes = kept_vector_passes(ctx.passes, values["kind"])
    inserted = conn.execute(insert(memories).values(**values)).inserted_primary_key
    if kept is not None:
        assert inserted is not None
        # In the row's transaction: the row never exists without its vector, nor the reverse.
        vectors.upsert(conn, [{"memory_seq": int(inserted[0]), "model": kept.model, "dim": kept.dim,
                               "vector": kept.data, "content_hash": chash,
                               "embedded_at": to_rfc3339(now)}])
    event = write_event(values, ctx.actor, keyed.secret(conn))
    if req.restore is not None:
        # Stamped now: the import happens now, whatever time the row was first recorded.
        event = audit.Event(to_rfc3339(now), event.actor, "memory.import", event.memory_id,
                            {**event.detail, "source_id": req.restore.source_id})
    audit.append_many(conn, [event])
    queued = []
    for pass_name in passes:
        jobq.enqueue(conn, pass_name, values["id"], now=now.timestamp(), max_attempts=ctx.max_attempts)
        queued.append(pass_name)
    result = new_result(values, queued)
    if kept is not None:
        result["vector_kept"] = True
    return result


#: The passes the embed pass queues for a memory once it has stored its vector (passes/embed.py
#: reads them here: the store queues the same for an imported row whose vector was kept).
EMBED_FOLLOW_UPS = ("classify", "consolidate", "reflect")


def kept_vector_passes(passes: Sequence[str], kind: str) -> list[str]:
    """The passes an imported row whose vector was kept is queued for: those the embed pass
    queues once it has stored a vector (classify only for a row of kind ``auto``)."""
    return [p for p in passes if p in EMBED_FOLLOW_UPS and (p != "classify" or kind == "auto")]


def new_row(req: NewMemory, chash: str, now: datetime, recorded_at: str | None = None) -> dict[str, Any]:
    """The memories row for a new write (a fresh id, stamped ``now``; ``recorded_at``:
    ``now`` already formatted, as a group formats it once for all its rows)."""
    recorded_at = to_rfc3339(now) if recorded_at is None else recorded_at
    return {
        "id": new_memory_id(int(now.timestamp() * 1000)),
        "content": req.content,
        "content_hash": chash,
        "loose_hash": loose_hash(req.content),
        "kind": req.kind,
        "scope": req.scope,
        "owner": req.owner,
        "agent_id": req.agent_id,
        "user_id": req.user_id,
        "project": req.project,
        "session_id": req.session_id,
        "status": req.status,
        "importance": req.importance,
        "importance_raw": req.importance,
        "valid_from": req.valid_from or recorded_at,
        "valid_to": req.valid_to,
        "occurred_at": req.occurred_at,
        "recorded_at": recorded_at,
        "expires_at": to_rfc3339(now + timedelta(seconds=req.ttl_s)) if req.ttl_s else None,
        "derived": req.derived,
        "metadata": req.metadata,
    }


#: Passes an imported row is queued for.
RESTORED_PASSES = ("embed",)


def restored_values(restore: Restore, importance: float) -> dict[str, Any]:
    """Columns an import sets from the exported row instead of from ``now``."""
    recorded_ms = int(parse_rfc3339(restore.recorded_at).timestamp() * 1000)
    return {
        # The id keeps the original's time order (ids sort by creation time).
        "id": new_memory_id(recorded_ms),
        "status": restore.status,
        "recorded_at": restore.recorded_at,
        "retired_at": restore.retired_at,
        "expires_at": restore.expires_at,
        "derived": restore.derived,
        "importance_raw": importance if restore.importance_raw is None else restore.importance_raw,
        "corroboration": restore.corroboration,
        "access_count": restore.access_count,
        "last_accessed_at": restore.last_accessed_at,
        "kind_method": restore.kind_method,
        "kind_confidence": restore.kind_confidence,
    }


def _restore_links(conn: Connection, memory_id: str, restore: Restore, now: datetime) -> None:
    """Lay an imported row's links to rows already in the store (1002 when one is missing)."""
    for i, (kind, direction, other, created_at) in enumerate(restore.links):
        if get_row(conn, other) is None:
            raise NotFound(f"restore.links[{i}] names {other!r}, which is not in the store; "
                           "import the rows it links to first",
                           data={"field": f"restore.links[{i}].{direction}"})
        src, dst = (memory_id, other) if direction == "to" else (other, memory_id)
        links.add(conn, src, dst, kind, created_at or to_rfc3339(now))


_WRITE_DETAIL = ("content_hash", "kind", "scope", "owner", "status", "importance", "valid_from",
                 "valid_to", "occurred_at", "expires_at")


def write_event(values: dict[str, Any], actor: str, key: bytes) -> audit.Event:
    """The audit event of a new row (hashes and fields, never the text). The owner is
    recorded as its keyed hash under ``key`` (store/keyed.py): the chain can never be
    rewritten, so it never holds an identifier a forget by subject must erase."""
    detail = {k: values[k] for k in _WRITE_DETAIL}
    detail["owner"] = keyed.keyed_with(key, values["owner"])
    return audit.Event(values["recorded_at"], actor,
                       "memory.derive" if values["derived"] else "memory.write", values["id"], detail)


def corroborate_event(at: str, actor: str, memory_id: str, before: int) -> audit.Event:
    """The audit event of a duplicate write that corroborates ``memory_id``."""
    return audit.Event(at, actor, "memory.corroborate", memory_id,
                       {"before": {"corroboration": before}, "after": {"corroboration": before + 1}})


def new_result(values: dict[str, Any], queued: list[str]) -> dict[str, Any]:
    """memory.write's result for a new row."""
    return {"id": values["id"], "recorded_at": values["recorded_at"], "queued": queued, "notices": []}


DUPLICATE_NOTICE = "an identical live memory exists in this scope; nothing was written"


def duplicate_result(memory_id: str, recorded_at: str) -> dict[str, Any]:
    """memory.write's result for a duplicate of a live row."""
    return {"id": memory_id, "recorded_at": recorded_at, "queued": [], "duplicate_of": memory_id,
            "notices": [DUPLICATE_NOTICE]}


def tombstoned_error() -> Tombstoned:
    """1006, for a write of content that carries a tombstone in its scope."""
    return Tombstoned(
        "this content was forgotten or rejected in this scope and may not be written again",
        data={"field": "content"},
    )


def is_tombstoned(conn: Connection, scope: str, owner: str, chash: str) -> bool:
    """Whether (scope, owner, content hash) carries a tombstone (which holds the owner as
    its keyed hash, store/keyed.py)."""
    return conn.execute(
        select(tombstones.c.id).where(
            tombstones.c.scope == scope, tombstones.c.owner == keyed.keyed(conn, owner),
            tombstones.c.content_hash == chash,
        ).limit(1)
    ).first() is not None


def add_tombstone(conn: Connection, scope: str, owner: str, chash: str, now: datetime,
                  reason: str | None = None) -> None:
    """Lay a tombstone (idempotent). It keeps the owner only as a keyed hash: enough to
    refuse that owner's rewrite, not to tell who the owner was."""
    if not is_tombstoned(conn, scope, owner, chash):
        conn.execute(insert(tombstones).values(
            scope=scope, owner=keyed.keyed(conn, owner), content_hash=chash, created_at=to_rfc3339(now),
            reason=reason,
        ))


def request_hash(params: dict[str, Any]) -> str:
    """A stable hash of a write's parameters (the idempotency key excluded)."""
    body = {k: v for k, v in params.items() if k != "idempotency_key"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


# -- reads ---------------------------------------------------------------

PUBLIC_FIELDS = (
    "id", "content", "kind", "scope", "agent_id", "user_id", "project", "session_id", "status",
    "importance", "importance_raw", "access_count", "last_accessed_at", "valid_from", "valid_to",
    "occurred_at", "recorded_at", "retired_at", "expires_at", "metadata", "derived", "corroboration",
    "kind_method", "kind_confidence",
)


def to_public(row: Row[Any] | dict[str, Any]) -> dict[str, Any]:
    """A memory row as the protocol shows it."""
    data = dict(row._mapping) if isinstance(row, Row) else dict(row)
    if data.get("status") == "forgotten":
        return {"id": data["id"], "status": "forgotten", "content": None}
    if data.get("status") == "deleting":
        # Being erased: the text is no longer served, only the id and the state.
        return {"id": data["id"], "status": "deleting", "content": None}
    out = {name: data.get(name) for name in PUBLIC_FIELDS}
    out["derived"] = bool(out["derived"])
    return out


def get_row(conn: Connection, memory_id: str) -> Row[Any] | None:
    """One memory row by id."""
    return conn.execute(select(memories).where(memories.c.id == memory_id)).first()


def record_access(conn: Connection, counts: dict[str, int], at: datetime) -> int:
    """Add read counts to ``access_count`` and stamp ``last_accessed_at``."""
    if not counts:
        return 0
    stmt = (
        update(memories)
        .where(memories.c.id == bindparam("mid"))
        .values(access_count=memories.c.access_count + bindparam("n"),
                last_accessed_at=bindparam("at"))
    )
    stamp = to_rfc3339(at)
    conn.execute(stmt, [{"mid": mid, "n": n, "at": stamp} for mid, n in counts.items()])
    return len(counts)


def prune_idempotency(conn: Connection, now_epoch: float | None = None) -> int:
    """Forget idempotency keys past their window."""
    cutoff = time.time() if now_epoch is None else now_epoch
    return conn.execute(delete(idempotency_keys).where(idempotency_keys.c.expires_at <= cutoff)).rowcount


def count_by_status(conn: Connection) -> dict[str, int]:
    """Memory counts keyed by status."""
    from sqlalchemy import func

    rows = conn.execute(select(memories.c.status, func.count()).group_by(memories.c.status))
    return {status: n for status, n in rows}


def ids_with(conn: Connection, ids: Iterable[str], *where: Any) -> list[Row[Any]]:
    """Rows for ``ids`` matching extra conditions (helper for passes)."""
    id_list = list(ids)
    if not id_list:
        return []
    return list(conn.execute(select(memories).where(and_(memories.c.id.in_(id_list), *where))))


AccessSink = Callable[[Iterable[str]], None]
