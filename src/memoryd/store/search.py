"""memory.search: a lexical and a vector leg fused by RRF — how ranking works, on any backend.

The legs themselves are the backend's (store/backend.py): FTS5/BM25 and
sqlite-vec on SQLite (store/sqlite/), tsvector/ts_rank_cd and pgvector HNSW on
PostgreSQL (store/postgres/). Both legs filter by the same scope pairs
(store/scope.py, store/search_request.py) inside their candidate queries;
the vector leg over-fetches until it has ``k`` rows that also pass the time
filters, or says it is partial. Ranking:

* each leg ranks its candidates; weighted reciprocal rank fusion gives
  ``rrf = Σ w_leg / (2 + rank)`` over the legs that found the row, with
  w = 1 for the lexical leg and 1.5 for the vector leg. w was chosen on
  tests/data/recall.json (85 paraphrase questions, 35 keyword questions) over
  c ∈ {1, 2, 5, 10, 20, 60} × w ∈ {1 … 3} (with c=5 then: the one setting
  whose hybrid beat the vector leg on paraphrases at both recall@5 and
  recall@10 while matching the lexical leg on keyword questions). c=2 came
  with QUERY_STOPWORDS, on the tuning half of tests/data/conversations/
  (bench/recall.py --set conversations --sweep): with the question words out
  of the lexical query, c=2 lifted every figure there, then the held-out half
  and the notes sets were checked once;
* two small boosts multiply it: importance ``1 + 0.2 × (importance − 0.5)``
  (0.9 … 1.1) and recency ``1 + 0.1 × 0.5^(age_days / 30)`` (1.0 … 1.1);
* a time boost: when the query names a time ("last week", "in May",
  text/timeexpr.py), rows whose ``occurred_at`` (else ``recorded_at``) falls
  inside it are multiplied by TIME_BOOST. A boost, never a filter: a row
  dated wrongly (or a question about a plan made earlier) still ranks.

What the vector leg compares: a memory's vector, which for a conversation
turn (kind ``conversation`` with a ``session_id``) is the turn's own text
followed by the turn said before it in its session, "B (replying to A)"
(passes/embed.py, store/turns.py). A reply ("Yes, it went great") is then
found by what it answers. Chosen on the tuning half of
tests/data/conversations/ (bench/recall_conv_offline.py, an offline replica of
this ranking) over the turn alone, the turn before first, before and after,
and mixes of the two encodings; the lexical leg indexes the turn alone.

Lexical-only results score the backend's text score (``-bm25`` on SQLite,
``ts_rank_cd`` on PostgreSQL) and vector-only results ``1 − cosine
distance``, so a score is comparable within one answer, not across modes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, String, bindparam, literal_column, select

from memoryd.clock import parse_rfc3339, to_rfc3339
from memoryd.store import prepared, vectors
from memoryd.store.backends import backend_for
from memoryd.store.ranking import learned
from memoryd.store.schema import jobs, memories
from memoryd.store.scope import scope_keys
from memoryd.store.search_request import (
    CANDIDATE,
    CANDIDATE_NAMES,
    MAX_TERMS,
    QUERY_STOPWORDS,
    SearchRequest,
    filter_shape,
    query_terms,
    row_filter,
    statuses_for,
)
from memoryd.store.sqlite.lexical import (
    LEX_MAX_FETCH,
    LEX_MIN_FETCH,
    LEX_OVERFETCH,
    fts_match,
    lexical_statement,
)
from memoryd.text.timeexpr import TimeWindow, parse_time

#: Names other modules, tests and benchmarks import from here (their homes are
#: store/search_request.py and store/sqlite/lexical.py).
__all__ = ["CANDIDATE", "LEX_MAX_FETCH", "LEX_MIN_FETCH", "LEX_OVERFETCH", "MAX_TERMS", "QUERY_STOPWORDS",
           "SearchRequest", "candidates", "fts_match", "lexical_statement", "row_filter", "statuses_for"]

RRF_K = 2  # weighted RRF's constant; see the module docstring for how it was chosen
LEG_WEIGHTS = {"lexical": 1.0, "vector": 1.5}
IMPORTANCE_WEIGHT = 0.2
RECENCY_WEIGHT = 0.1
RECENCY_HALF_LIFE_DAYS = 30.0
#: Hybrid score factor for a row inside a time window the query names.
TIME_BOOST = 1.5


@dataclass
class SearchOutcome:
    results: list[dict[str, Any]]
    mode_used: str
    notices: list[str]
    #: A hybrid search's fused candidates (hydrated, best first), kept when the caller asked
    #: for ``rerank_candidates``: the reranker's input (memoryd/rerank/), taken after the
    #: search's snapshot closes. None otherwise.
    candidates: list[dict[str, Any]] | None = None


def lexical(conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
    """The backend's lexical leg: rows matching the query's words that pass the request's
    filters, best first, with ``bm25`` (its text score, higher is better)."""
    return backend_for(conn).lexical(conn, req, now, limit)


def vector(conn: Connection, req: SearchRequest, now: str, query_vec: np.ndarray,
           limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Nearest rows by cosine distance (``distance``), and whether the leg is partial.

    vec0 applies scope, status and kind inside the scan; rows that then fail
    the time filters are replaced by fetching further until ``limit`` rows
    pass or the index is exhausted (never a fixed cut filtered in silence).
    """
    keys = scope_keys(req.reader, req.scope)
    max_knn = backend_for(conn).max_knn
    fetch = max(limit * 2, 20)
    while True:
        hits = vectors.knn(conn, query_vec, k=fetch, scope_keys=keys,
                           statuses=statuses_for(req), kind=req.kind)
        if not hits:
            return [], False
        distance = dict(hits)
        found = candidates(conn, req, now, list(distance))
        for row in found:
            row["distance"] = distance[row["seq"]]
        found.sort(key=lambda r: r["distance"])
        exhausted = len(hits) < fetch
        if len(found) >= limit or exhausted:
            return found[:limit], False
        if fetch >= max_knn:
            return found[:limit], True
        fetch = min(fetch * 4, max_knn)


def _boosts(row: dict[str, Any], ref: datetime) -> tuple[float, float]:
    importance = 1.0 + IMPORTANCE_WEIGHT * (float(row["importance"]) - 0.5)
    age_days = max(0.0, (ref - parse_rfc3339(row["recorded_at"])).total_seconds() / 86400.0)
    recency = 1.0 + RECENCY_WEIGHT * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    return importance, recency


def in_windows(row: dict[str, Any], windows: Sequence[TimeWindow]) -> bool:
    """Whether the row happened (``occurred_at``, else ``recorded_at``) inside any of the windows."""
    if not windows:
        return False
    when = parse_rfc3339(row.get("occurred_at") or row["recorded_at"])
    return any(w.contains(when) for w in windows)


def time_notices(windows: Sequence[TimeWindow], applied: bool) -> list[str]:
    """One notice per time expression read from the query, saying how it was used."""
    how = "boost" if applied else "not applied: the time boost is a hybrid-mode stage"
    return [f"time: '{w.phrase}' read as {w.describe()} ({how})" for w in windows]


def fuse(lexical_rows: Sequence[dict[str, Any]], vector_rows: Sequence[dict[str, Any]], k: int,
         ref: datetime, explain: bool, windows: Sequence[TimeWindow] = ()) -> list[dict[str, Any]]:
    """Reciprocal rank fusion of the two legs with the importance, recency and time boosts."""
    merged: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    for leg, rows in (("lexical", lexical_rows), ("vector", vector_rows)):
        for rank, row in enumerate(rows, start=1):
            seq = row["seq"]
            merged.setdefault(seq, row)
            st = stages.setdefault(seq, {"rrf": 0.0})
            st["rrf"] += LEG_WEIGHTS[leg] / (RRF_K + rank)
            st[f"{leg}_rank"] = rank
            st[f"{leg}_score"] = row["bm25"] if leg == "lexical" else 1.0 - row["distance"]
    out = []
    for seq, row in merged.items():
        st = stages[seq]
        importance, recency = _boosts(row, ref)
        st.update(importance_boost=importance, recency_boost=recency)
        item = dict(row)
        item["score"] = st["rrf"] * importance * recency
        if windows:
            st["time_boost"] = TIME_BOOST if in_windows(row, windows) else 1.0
            item["score"] *= st["time_boost"]
        if explain:
            item["explain"] = {key: round(v, 6) if isinstance(v, float) else v for key, v in st.items()}
        item["stages"] = st  # what the learned ranking reads (store/ranking/features.py)
        out.append(item)
    out.sort(key=lambda r: r["score"], reverse=True)
    return out[:k]


def pending_embeds(conn: Connection) -> bool:
    """Whether any embed job is open (one probe of the claim index); gates the exact count."""
    stmt = prepared.prepare(conn, "search.pending_embeds", lambda: select(literal_column("1")).where(
        jobs.c["pass"] == "embed", jobs.c.state.in_(["ready", "leased"])).limit(1))
    return bool(prepared.fetch(conn, stmt, {}))


@dataclass
class VectorLeg:
    """A vector leg run ahead, on its own connection: the query vector and, if it ran, its rows."""

    vec: np.ndarray | None
    rows: list[dict[str, Any]] | None = None
    partial: bool = False
    #: Whether an embed job was open, probed on the leg's connection (None: not probed).
    embeds_pending: bool | None = None


def leg_limit(req: SearchRequest) -> int:
    """Candidates each leg brings to the fusion."""
    return max(req.k * 2, 20)


def vector_leg(conn: Connection, req: SearchRequest, now: datetime, vec: np.ndarray) -> VectorLeg:
    """The vector leg alone, for running beside the lexical leg on another connection, with
    the probe for open embed jobs (the leg's own notice), so the lexical thread, which the
    answer waits on, does not run it."""
    rows, partial = vector(conn, req, to_rfc3339(now), vec, leg_limit(req))
    return VectorLeg(vec, rows, partial, pending_embeds(conn))


VectorSource = np.ndarray | Callable[[], "np.ndarray | VectorLeg | None"] | None
Reason = str | Callable[[], "str | None"] | None


def run(conn: Connection, req: SearchRequest, now: datetime, query_vec: VectorSource,
        vector_off_reason: Reason,
        lazy_vec: Callable[[], np.ndarray | None] | None = None,
        rerank_candidates: int = 0, learned_ranking: bool = False) -> SearchOutcome:
    """Answer one search; ``query_vec`` is None when the vector leg cannot run.

    ``query_vec`` may be a callable that waits for work started elsewhere: a
    query embedding, or a whole VectorLeg run on another connection. The
    lexical leg runs first, meanwhile.
    ``vector_off_reason`` (or a callable giving it) says why there is no vector.
    ``lazy_vec`` gives the query vector on demand, for a lexical search that
    found fewer than k rows and fills from the vector leg.
    ``rerank_candidates`` > 0 keeps that many of a hybrid search's fused candidates in
    the outcome's ``candidates`` (they passed both legs' scope filters), for a reranker.
    ``learned_ranking`` orders a hybrid search's whole fused pool by store/ranking/ before
    the top k is cut (and before a reranker sees it).
    """
    now_s = to_rfc3339(now)
    ref = parse_rfc3339(req.as_of) if req.as_of else now
    notices: list[str] = []
    time_ref = parse_rfc3339(req.time_ref) if req.time_ref else ref
    windows = parse_time(req.query, time_ref)
    if query_terms(req.query) is None:
        notices.append("the query has no searchable words for the lexical leg")
    want = leg_limit(req)
    lex_rows = lexical(conn, req, now_s, want) if req.mode in ("hybrid", "lexical") else None
    got = query_vec() if callable(query_vec) else query_vec
    ahead = got if isinstance(got, VectorLeg) else None
    qvec: np.ndarray | None = got.vec if isinstance(got, VectorLeg) else got
    use_vector = req.mode in ("hybrid", "vector") and qvec is not None
    use_lexical = req.mode in ("hybrid", "lexical") or not use_vector
    if req.mode != "lexical" and qvec is None:
        reason = vector_off_reason() if callable(vector_off_reason) else vector_off_reason
        notices.append(f"vector leg skipped ({reason}); results are lexical only")
    if use_lexical and lex_rows is None:
        lex_rows = lexical(conn, req, now_s, want)
    lex_rows = lex_rows or []

    vec_rows: list[dict[str, Any]] = []
    if use_vector:
        assert qvec is not None
        if ahead is not None and ahead.rows is not None:
            vec_rows, partial = ahead.rows, ahead.partial
        else:
            vec_rows, partial = vector(conn, req, now_s, qvec, want)
        if partial:
            notices.append(
                f"vector leg partial: fewer than {want} rows passed the time filters among the "
                f"{backend_for(conn).max_knn} nearest"
            )
        embeds_pending = ahead.embeds_pending if ahead is not None else None
        if embeds_pending is None:  # not probed on the vector leg's thread
            embeds_pending = pending_embeds(conn)
        if embeds_pending:
            missing = vectors.count_unembedded(conn, row_filter(req, now_s))
            if missing:
                notices.append(f"{missing} matching memories are not embedded yet; "
                               "the vector leg could not see them")

    ordered = False
    if use_vector and use_lexical:
        mode_used = "hybrid"
        # The whole pool is read and ordered only when the learned ranking can order it (it
        # holds a turn); any other pool keeps its fused order, so only its top k is read.
        ordered = learned_ranking and learned.applies([*lex_rows, *vec_rows])
        pool = len(lex_rows) + len(vec_rows) if ordered else req.k
        rows = fuse(lex_rows, vec_rows, max(pool, rerank_candidates), ref, req.explain, windows)
    elif use_vector:
        mode_used = "vector"
        rows = _single(vec_rows, req, lambda r: 1.0 - r["distance"], "vector")
        if len(rows) < req.k:
            rows += _fill(rows, lexical(conn, req, now_s, want), req, "lexical", notices)
    else:
        mode_used = "lexical"
        rows = _single(lex_rows, req, lambda r: r["bm25"], "lexical")
        if len(rows) < req.k and req.mode == "lexical" and query_terms(req.query) is not None:
            fill_vec = qvec if qvec is not None else (lazy_vec() if lazy_vec else None)
            if fill_vec is not None:
                rows += _fill(rows, vector(conn, req, now_s, fill_vec, want)[0], req, "vector", notices)
    notices += time_notices(windows, applied=mode_used == "hybrid")
    results = hydrate(conn, rows)
    if mode_used == "hybrid" and ordered:
        results = learned.order(req.query, results, req.k, windows, req.explain)
    if mode_used == "hybrid" and rerank_candidates > 0:
        results = results[:max(req.k, rerank_candidates)]
        return SearchOutcome(results[:req.k], mode_used, notices, candidates=results)
    return SearchOutcome(results=results[:req.k], mode_used=mode_used, notices=notices)


_MEMORY_NAMES = tuple(c.name for c in memories.c)


def hydrate(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer's rows with every column, read in the search's own snapshot."""
    if not rows:
        return rows
    backend = backend_for(conn)
    stmt = prepared.prepare(conn, "search.hydrate", lambda: backend.by_seq(tuple(memories.c), "seqs"))
    full = {}
    for values in prepared.fetch(conn, stmt, {"seqs": backend.seq_values([row["seq"] for row in rows])}):
        row = dict(zip(_MEMORY_NAMES, values, strict=True))
        # On the driver there is no type processing: JSON (text on SQLite, decoded by psycopg
        # on PostgreSQL) and booleans are decoded here.
        if isinstance(row["metadata"], str | bytes):
            row["metadata"] = json.loads(row["metadata"])
        row["derived"] = bool(row["derived"])
        full[row["seq"]] = row
    return [{**full[row["seq"]], **row} for row in rows if row["seq"] in full]


def _fill(rows: list[dict[str, Any]], other: list[dict[str, Any]], req: SearchRequest, leg: str,
          notices: list[str]) -> list[dict[str, Any]]:
    """Rows of the other leg, ranked after (and scored below) the ones found, up to k."""
    have = {r["seq"] for r in rows}
    floor = min((r["score"] for r in rows), default=1.0)
    extra: list[dict[str, Any]] = []
    for rank, row in enumerate((r for r in other if r["seq"] not in have), start=1):
        if len(rows) + len(extra) >= req.k:
            break
        item = dict(row)
        item["score"] = floor * 0.5 / rank if floor > 0 else -float(rank)
        if req.explain:
            item["explain"] = {f"{leg}_rank": rank, "filled_from": leg}
        extra.append(item)
    if extra:
        notices.append(f"{len(extra)} result(s) filled from the {leg} leg (the {req.mode} leg found "
                       f"{len(rows)} of k={req.k})")
    return extra


def _single(rows: list[dict[str, Any]], req: SearchRequest, score: Any, leg: str) -> list[dict[str, Any]]:
    out = []
    for rank, row in enumerate(rows[: req.k], start=1):
        item = dict(row)
        item["score"] = score(row)
        if req.explain:
            item["explain"] = {f"{leg}_rank": rank, f"{leg}_score": round(score(row), 6)}
        out.append(item)
    return out


def candidates(conn: Connection, req: SearchRequest, now: str, seqs: Sequence[int]) -> list[dict[str, Any]]:
    """The CANDIDATE columns of those of ``seqs`` that pass the request's filters.

    One keyed lookup per seq. The statement is compiled once per filter shape
    (reader, scope, statuses, as_of, valid_at, kind) and run on the driver: a
    search's legs would otherwise spend more in SQLAlchemy than in the database.
    The set of seqs is one bound parameter (the backend's seq-set form), so the
    statement does not change with the number of candidates.
    """
    if not seqs:
        return []
    backend = backend_for(conn)
    stmt = prepared.prepare(conn, ("search.candidates", filter_shape(req)), lambda: backend.by_seq(
        CANDIDATE, "seqs").where(row_filter(req, bindparam("now", "", type_=String))))
    rows = prepared.fetch(conn, stmt, {"seqs": backend.seq_values(seqs), "now": now})
    return [dict(zip(CANDIDATE_NAMES, row, strict=True)) for row in rows]
