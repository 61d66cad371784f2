"""The lexical leg on PostgreSQL: the generated ``memories.content_tsv`` (migration 0008), its GIN
index, ``@@`` and ``ts_rank_cd``; or, in a store large enough to have one, the tantivy shards
beside it (store/lexindex/): ``ts_rank_cd`` ranks every match first, over a second for common
words at a million memories.

The query is built from bound values only: each word goes through
``plainto_tsquery`` (or the whole phrase through ``phraseto_tsquery``) as a
parameter, and the word queries are OR-ed with tsquery's ``||``, as the SQLite
leg ORs FTS5 terms. User text is never spliced into SQL or into tsquery syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, Float, bindparam, func, literal_column, select
from sqlalchemy.dialects.postgresql import TSVECTOR

from memoryd.store.lexindex import index_set
from memoryd.store.lexindex.search import from_index
from memoryd.store.schema import memories
from memoryd.store.search_request import CANDIDATE, QueryTerms, SearchRequest, query_terms, row_filter

#: The text search configuration of ``content_tsv`` (migration 0008 writes the same name).
TS_CONFIG = "english"

content_tsv: ColumnElement[Any] = literal_column("memories.content_tsv", type_=TSVECTOR)
_config: ColumnElement[Any] = literal_column(f"'{TS_CONFIG}'::regconfig")


def tsquery(terms: QueryTerms) -> tuple[ColumnElement[Any], dict[str, str]]:
    """The tsquery expression for ``terms`` and its bound values."""
    if terms.phrase:
        return func.phraseto_tsquery(_config, bindparam("w0")), {"w0": " ".join(terms.words)}
    parts = [func.plainto_tsquery(_config, bindparam(f"w{i}")) for i in range(len(terms.words))]
    expr: ColumnElement[Any] = parts[0]
    for part in parts[1:]:
        expr = expr.op("||")(part)
    return expr, {f"w{i}": w for i, w in enumerate(terms.words)}


def lexical(conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
    """Rows whose lexemes match any query word and that pass the request's filters, best
    ``ts_rank_cd`` first (as ``bm25``: higher is better), in one statement: the planner
    combines the GIN index with the scope index, and the filters apply before the LIMIT."""
    terms = query_terms(req.query)
    if terms is None:
        return []
    index = index_set.attached(conn.engine)
    if index is not None and index.ready.is_set():
        def check(seqs: Sequence[int]) -> list[dict[str, Any]]:
            stmt = select(*CANDIDATE).where(memories.c.seq.in_(list(seqs)), row_filter(req, now))
            return [dict(r._mapping) for r in conn.execute(stmt)]

        found = from_index(conn, index, req, limit, check)
        if found is not None:
            return found
    query, params = tsquery(terms)
    rank = func.ts_rank_cd(content_tsv, query, type_=Float).label("bm25")
    stmt = (
        select(*CANDIDATE, rank)
        .where(content_tsv.op("@@")(query), row_filter(req, now))
        .order_by(rank.desc(), memories.c.seq)
        .limit(limit)
    )
    return [dict(r._mapping) for r in conn.execute(stmt, params)]
