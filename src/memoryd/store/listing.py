"""Browsing and exporting memories: memory.list (scope-filtered) and memory.export (operator).

Both page by an opaque cursor that names the last row served, so a page
never repeats or skips a row however the store grows meanwhile. memory.list
applies the one scope predicate (store/scope.py) and reads newest first;
memory.export reads in write order (``seq``), which keeps a derived memory
after the sources it cites, and never includes a row being forgotten.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, or_, select

from memoryd.store.ids import MAX_INTEGER
from memoryd.store.memories import to_public
from memoryd.store.schema import OWNER_FIELDS, memories, memory_links, memory_vectors
from memoryd.store.scope import Reader, visible

#: Statuses an export may contain: everything but rows being or already erased.
EXPORTABLE_STATUSES = ("active", "candidate", "superseded", "rejected", "archived")


class BadCursor(ValueError):
    """A cursor this listing did not hand out (or from another listing)."""


def encode_cursor(kind: str, position: list[Any]) -> str:
    """An opaque cursor: the listing's name and the last row's sort key."""
    raw = json.dumps([kind, *position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


#: The longest timestamp a cursor may carry (an RFC 3339 string is 20 - 32 characters).
MAX_STAMP_LEN = 64


def cursor_seq(value: Any) -> int:
    """A seq read from a cursor, or BadCursor: a forged one past the column's range was an
    internal error (the driver refused to bind it)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INTEGER:
        raise BadCursor("not a cursor this method handed out")
    return value


def cursor_stamp(value: Any) -> str:
    """A timestamp read from a cursor, or BadCursor."""
    if not isinstance(value, str) or len(value) > MAX_STAMP_LEN:
        raise BadCursor("not a cursor this method handed out")
    return value


def decode_cursor(kind: str, cursor: str, arity: int) -> list[Any]:
    """The sort key inside ``cursor``; BadCursor when it is not one of ``kind``'s."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise BadCursor("not a cursor this method handed out") from exc
    if not isinstance(value, list) or len(value) != arity + 1 or value[0] != kind:
        raise BadCursor("not a cursor this method handed out")
    return value[1:]


@dataclass(frozen=True)
class ListRequest:
    """A validated memory.list request."""

    reader: Reader
    scope: str | None = None
    kind: str | None = None
    statuses: tuple[str, ...] = ("active",)
    limit: int = 50
    cursor: str | None = None
    #: Recorded at or after / strictly before these RFC 3339 times (the console's time filter).
    recorded_after: str | None = None
    recorded_before: str | None = None


def list_memories(conn: Connection, req: ListRequest, now: str) -> dict[str, Any]:
    """One page of the rows ``req.reader`` may see, newest first (recorded_at, then seq).

    Expired rows are left out as in a search without ``as_of``.
    """
    conds = [
        visible(memories, req.reader, req.scope),
        memories.c.status.in_(req.statuses),
        or_(memories.c.expires_at.is_(None), memories.c.expires_at > now),
    ]
    if req.kind:
        conds.append(memories.c.kind == req.kind)
    if req.recorded_after:
        conds.append(memories.c.recorded_at >= req.recorded_after)
    if req.recorded_before:
        conds.append(memories.c.recorded_at < req.recorded_before)
    if req.cursor:
        stamp, position = decode_cursor("list", req.cursor, 2)
        recorded_at, seq = cursor_stamp(stamp), cursor_seq(position)
        conds.append(or_(memories.c.recorded_at < recorded_at,
                         and_(memories.c.recorded_at == recorded_at, memories.c.seq < seq)))
    rows = conn.execute(
        select(memories).where(and_(*conds))
        .order_by(memories.c.recorded_at.desc(), memories.c.seq.desc())
        .limit(req.limit + 1)
    ).all()
    more = len(rows) > req.limit
    rows = rows[: req.limit]
    next_cursor = encode_cursor("list", [rows[-1].recorded_at, rows[-1].seq]) if more else None
    return {"memories": [to_public(r) for r in rows], "next_cursor": next_cursor}


@dataclass(frozen=True)
class ExportRequest:
    """A validated memory.export request. Owner fields here are filters on the row's own
    columns (an operator exports a subject's rows), not access keys as in memory.list."""

    owners: tuple[tuple[str, str], ...] = ()
    scope: str | None = None
    kind: str | None = None
    statuses: tuple[str, ...] = EXPORTABLE_STATUSES
    limit: int = 500
    cursor: str | None = None
    with_vectors: bool = False


def _export_filter(req: ExportRequest) -> Any:
    conds: list[ColumnElement[bool]] = [memories.c.status.in_(req.statuses)]
    for name, value in req.owners:
        assert name in OWNER_FIELDS
        conds.append(memories.c[name] == value)
    if req.scope:
        conds.append(memories.c.scope == req.scope)
    if req.kind:
        conds.append(memories.c.kind == req.kind)
    return and_(*conds)


def export_page(conn: Connection, req: ExportRequest) -> dict[str, Any]:
    """One page of exported memories in write order, each with its outgoing links
    (to rows that are not being forgotten) and, when asked, its vector.

    The first page (no cursor) also carries ``total``: how many rows match now.
    """
    where = _export_filter(req)
    conds = [where]
    if req.cursor:
        (position,) = decode_cursor("export", req.cursor, 1)
        seq = cursor_seq(position)
        conds.append(memories.c.seq > seq)
    rows = conn.execute(
        select(memories).where(and_(*conds)).order_by(memories.c.seq).limit(req.limit + 1)
    ).all()
    more = len(rows) > req.limit
    rows = rows[: req.limit]
    ids = [r.id for r in rows]
    outgoing = _links_from(conn, ids)
    vecs = _vectors(conn, [r.seq for r in rows]) if req.with_vectors else {}
    out = []
    for row in rows:
        item = to_public(row)
        item["links"] = outgoing.get(row.id, [])
        if req.with_vectors:
            item["vector"] = vecs.get(row.seq)
        out.append(item)
    result: dict[str, Any] = {
        "memories": out,
        "next_cursor": encode_cursor("export", [rows[-1].seq]) if more else None,
    }
    if req.cursor is None:
        result["total"] = conn.execute(select(func.count()).select_from(memories).where(where)).scalar_one()
    return result


def _links_from(conn: Connection, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Outgoing links of ``ids`` whose target still holds its text."""
    if not ids:
        return {}
    target = memories.alias("target")
    rows = conn.execute(
        select(memory_links.c.src_id, memory_links.c.dst_id, memory_links.c.kind,
               memory_links.c.created_at)
        .join(target, target.c.id == memory_links.c.dst_id)
        .where(memory_links.c.src_id.in_(ids), target.c.status.not_in(["deleting", "forgotten"]))
        .order_by(memory_links.c.id)
    )
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for src, dst, kind, created_at in rows:
        found[src].append({"kind": kind, "to": dst, "created_at": created_at})
    return found


def _vectors(conn: Connection, seqs: list[int]) -> dict[int, dict[str, Any]]:
    """Stored vectors of ``seqs`` that still describe the row's content."""
    if not seqs:
        return {}
    rows = conn.execute(
        select(memory_vectors.c.memory_seq, memory_vectors.c.model, memory_vectors.c.dim,
               memory_vectors.c.vector, memory_vectors.c.content_hash)
        .join(memories, memories.c.seq == memory_vectors.c.memory_seq)
        .where(memory_vectors.c.memory_seq.in_(seqs),
               memory_vectors.c.content_hash == memories.c.content_hash)
    )
    # content_hash: what the vector was made from, so an import can tell whether it still
    # describes the record's content (exchange/vectors.py).
    return {seq: {"model": model, "dim": dim, "encoding": "f32le-base64",
                  "data": base64.b64encode(blob).decode(), "content_hash": chash}
            for seq, model, dim, blob, chash in rows}
