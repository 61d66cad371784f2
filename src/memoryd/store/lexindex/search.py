"""The lexical leg from the tantivy shards, on either backend: their best rows that the reader may
see, checked against the request's other filters in the store, best first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog
from sqlalchemy import Connection

from memoryd.store.lexindex.index_set import LexSet
from memoryd.store.scope import scope_keys
from memoryd.store.search_request import SearchRequest, query_terms, statuses_for

log = structlog.get_logger(__name__)

#: The leg checks the best max(limit x LEX_OVERFETCH, LEX_MIN_FETCH) matches against the
#: filters first, and fetches more only when too few pass.
LEX_OVERFETCH = 10
LEX_MIN_FETCH = 200
LEX_MAX_FETCH = 12_800

#: The rows of some seqs that pass the request's filters (in any order), as candidate dicts.
CheckRows = Callable[[Sequence[int]], list[dict[str, Any]]]


def from_index(conn: Connection, index: LexSet, req: SearchRequest, limit: int,
               check: CheckRows) -> list[dict[str, Any]] | None:
    """The best ``limit`` rows from the shards (scope and kind applied inside each shard's
    search, the other filters by ``check`` in the store), with ``bm25``; more are fetched when
    too few pass. None when the index cannot answer this search: the store's own leg does."""
    terms = query_terms(req.query)
    if terms is None or terms.phrase:
        return None  # the shards keep no positions: a quoted phrase is the store's
    keys = scope_keys(req.reader, req.scope)
    statuses = statuses_for(req)
    fetch = max(limit * LEX_OVERFETCH, LEX_MIN_FETCH)
    while fetch <= LEX_MAX_FETCH:
        try:
            hits = index.top(conn, terms.words, keys=keys, statuses=statuses, kind=req.kind, fetch=fetch)
        except BaseException as exc:  # the store still answers, by its own leg
            # tantivy's panics reach Python as pyo3's PanicException, a BaseException.
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            log.warning("lex.search_failed", error=f"{type(exc).__name__}: {exc}",
                        fix="answered by the store's full-text search")
            return None
        if hits is None:
            return None
        rank = {seq: i for i, (seq, _) in enumerate(hits)}
        found = check(list(rank))
        found.sort(key=lambda r: rank[r["seq"]])
        for r in found:
            r["bm25"] = hits[rank[r["seq"]]][1]
        if len(found) >= limit or len(hits) < fetch:
            return found[:limit]
        fetch *= 8
    return None
