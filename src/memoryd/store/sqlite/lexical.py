"""The lexical leg on SQLite: FTS5 (external content over ``memories``) ranked by BM25."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, literal_column, select, table, text

from memoryd.store.schema import memories
from memoryd.store.search_request import CANDIDATE, SearchRequest, candidates, query_terms, row_filter

#: The lexical leg checks the best max(limit x LEX_OVERFETCH, LEX_MIN_FETCH) full-text matches
#: against the filters first, and fetches more only when too few pass.
LEX_OVERFETCH = 10
LEX_MIN_FETCH = 200
LEX_MAX_FETCH = 12_800

fts = table("memories_fts", literal_column("rowid"))

_RANKED = ("SELECT rowid, bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? "
           "ORDER BY bm25(memories_fts) LIMIT ?")


def fts_match(query: str) -> str | None:
    """A safe FTS5 MATCH expression for user text, or None if it has no words.

    Every word is quoted, so FTS operators in user text (AND, NEAR, *, ^, :)
    are literal and no quote can break the expression. Words other than
    stop-words are OR-ed (BM25 ranks rows matching more of them first); a
    query wrapped in double quotes is an exact phrase.
    """
    terms = query_terms(query)
    if terms is None:
        return None
    if terms.phrase:
        return '"' + " ".join(terms.words) + '"'
    return " OR ".join(f'"{w}"' for w in terms.words)


def lexical(conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
    """Rows matching the query by FTS5, best BM25 first, with ``bm25`` (higher is better).

    FTS5 ranks its matches alone first (the cost of the bare MATCH), and the
    best ``fetch`` of them are checked against scope, status and time with one
    lookup by key. When fewer than ``limit`` pass, it fetches more (eight
    times as many each round) until enough pass or the matches run out; past
    LEX_MAX_FETCH it runs the exhaustive join instead. Never a fixed cut
    filtered in silence.
    """
    match = fts_match(req.query)
    if match is None:
        return []
    fetch = max(limit * LEX_OVERFETCH, LEX_MIN_FETCH)
    while fetch <= LEX_MAX_FETCH:
        hits = conn.exec_driver_sql(_RANKED, (match, fetch)).all()
        rank = {int(seq): float(r) for seq, r in hits}
        found = candidates(conn, req, now, list(rank))
        for row in found:
            row["bm25"] = -rank[row["seq"]]
        found.sort(key=lambda r: -r["bm25"])
        if len(found) >= limit or len(hits) < fetch:
            return found[:limit]
        fetch *= 8
    stmt = lexical_statement(req, now, limit)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def lexical_statement(req: SearchRequest, now: str, limit: int) -> Any:
    """The exhaustive lexical leg's SQL: every match joined to its row (None when the query has no words)."""
    match = fts_match(req.query)
    if match is None:
        return None
    # Full-text matches first, once, as a materialised set: otherwise SQLite may
    # walk the reader's rows by the scope index and re-run the MATCH per row,
    # which is quadratic in a crowded store.
    hits = (
        select(literal_column("rowid").label("seq"),
               func.bm25(literal_column("memories_fts")).label("rank"))
        .select_from(fts)
        .where(text("memories_fts MATCH :match").bindparams(match=match))
        .cte("hits")
        .prefix_with("MATERIALIZED")
    )
    stmt = (
        select(*CANDIDATE, (-hits.c.rank).label("bm25"))
        .select_from(hits.join(memories, memories.c.seq == hits.c.seq))
        .where(row_filter(req, now))
        .order_by(hits.c.rank)
        .limit(limit)
    )
    return stmt
