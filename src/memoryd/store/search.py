"""Lexical search: FTS5 / BM25 under the shared scope and time predicates."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, literal_column, or_, select, table, text

from memoryd.store.schema import memories
from memoryd.store.scope import Reader, visible

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 64

fts = table("memories_fts", literal_column("rowid"))


@dataclass
class SearchRequest:
    """A validated memory.search request."""

    query: str
    k: int = 10
    reader: Reader = field(default_factory=Reader)
    scope: str | None = None
    kind: str | None = None
    mode: str = "hybrid"
    as_of: str | None = None
    valid_at: str | None = None
    include_candidates: bool = False


def fts_match(query: str) -> str | None:
    """A safe FTS5 MATCH expression for user text, or None if it has no words.

    Every word is quoted, so FTS operators in user text (AND, NEAR, *, ^, :)
    are literal and no quote can break the expression. Words are OR-ed (BM25
    ranks rows matching more of them first); a query wrapped in double quotes
    is an exact phrase.
    """
    stripped = query.strip()
    words = _WORD.findall(stripped)[:MAX_TERMS]
    if not words:
        return None
    quoted = [f'"{w}"' for w in words]
    if len(stripped) >= 2 and stripped[0] == stripped[-1] == '"':
        return '"' + " ".join(words) + '"'
    return " OR ".join(quoted)


def row_filter(req: SearchRequest, now: str) -> ColumnElement[Any]:
    """Scope, status, time and kind conditions shared by every search leg."""
    conds: list[ColumnElement[Any]] = [visible(memories, req.reader, req.scope)]
    if req.as_of:
        # What the store believed at as_of: recorded by then, not yet retired.
        statuses = ["active", "superseded", "archived"]
        if req.include_candidates:
            statuses.append("candidate")
        conds += [
            memories.c.status.in_(statuses),
            memories.c.recorded_at <= req.as_of,
            or_(memories.c.retired_at.is_(None), memories.c.retired_at > req.as_of),
        ]
    else:
        conds.append(memories.c.status.in_(
            ["active", "candidate"] if req.include_candidates else ["active"]))
        conds.append(or_(memories.c.expires_at.is_(None), memories.c.expires_at > now))
    if req.valid_at:
        conds += [
            memories.c.valid_from <= req.valid_at,
            or_(memories.c.valid_to.is_(None), memories.c.valid_to > req.valid_at),
        ]
    if req.kind:
        conds.append(memories.c.kind == req.kind)
    return and_(*conds)


def lexical(conn: Connection, req: SearchRequest, now: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows matching the query by FTS5, best BM25 first, with ``score`` (higher is better)."""
    match = fts_match(req.query)
    if match is None:
        return []
    rank = func.bm25(literal_column("memories_fts"))
    stmt = (
        select(memories, (-rank).label("score"))
        .select_from(fts.join(memories, memories.c.seq == literal_column("memories_fts.rowid")))
        .where(text("memories_fts MATCH :match").bindparams(match=match), row_filter(req, now))
        .order_by(rank)
        .limit(limit or req.k)
    )
    return [dict(r._mapping) for r in conn.execute(stmt)]
