"""Search latency at 10k and 100k memories, beside the raw cost of the same SQL.

For each store size the benchmark builds a SQLite store directly (migrated
by memoryd.store.migrate, rows inserted through SQLAlchemy on an engine from
create_store_engine, the FTS index rebuilt from the rows, and stored unit
vectors written through vectors.upsert into the vec0 index, as the embed pass
writes them), starts a real daemon on it (bundled embedder), and measures over
the socket. The vectors are random unit vectors beside developer notes, or with
``--vectors real`` real all-MiniLM-L6-v2 vectors beside the sentences they were
made from (bench/_corpus.py); random vectors are HNSW's worst case, so the
recall they give is a floor. It measures:

* hybrid, lexical and vector search p50/p95 with the query vector cached;
* hybrid and vector with distinct, never-seen queries (the query embedding
  included), and the in-process embedding time of those queries;
* in the same run, interleaved query by query (in an order that rotates from
  one query to the next) and in three rounds (``--rounds``), the raw FTS5 MATCH query
  (the daemon's own MATCH expression and first fetch size) and the raw
  sqlite-vec KNN query (the daemon's first fetch, one statement: the visible
  owners' rows of vector_owners, each owner's bucket partition searched with
  owner_id and status filtered inside the scan, k = 40, merged), issued
  directly through memoryd.store.driver with sqlite_vec loaded.

The benchmark first lowers its own priority to the daemon's (config ``nice``,
10 by default, and the idle IO class; _harness.match_daemon_priority, as
bench/write.py and bench/embed.py do): raw queries at normal priority would win
every contested CPU slice on a shared machine and flatter the baseline.

It prints hybrid p50 ÷ (raw FTS p50 + raw KNN p50) (target ≤ 1.5) over all
rounds' samples and round by round (on a shared machine the ratio of one
60-query pass moved between 1.37 and 1.65 from one run to the next, with the
same code), and the absolute hybrid p50 at 100k (target < 30 ms) and at 1M (< 50 ms).
Owners are spread the way a busy machine's are: ten agents, two users and
org rows; the reader is one agent and one user, so it sees about a fifth of
the store.

    .venv/bin/python bench/search.py            # 10k and 100k
    .venv/bin/python bench/search.py --quick    # 2k and 10k, fewer queries
    .venv/bin/python bench/search.py --sizes 1000000 --rounds 1 --owners one --vectors real
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

import _harness as h
from _corpus import KINDS, Corpus
from memoryd.store.search import LEX_MIN_FETCH, LEX_OVERFETCH

DIM = 384
READER = {"agent_id": "agent-00", "user_id": "user-0"}
K = 10
KNN_FETCH = 40  # the daemon's first vector fetch for k=10: max(2 * max(2k, 10), 20)
LEX_LIMIT = 20  # the daemon's lexical limit for k=10: max(2k, 10)
# The daemon's first full-text fetch for that limit (memoryd.store.search.lexical).
LEX_FETCH = max(LEX_LIMIT * LEX_OVERFETCH, LEX_MIN_FETCH)
SLOW_LEXICAL_S = 10.0  # one lexical search slower than this: skip the lexical/hybrid series
SERIES_BUDGET_S = 90.0  # stop a series early (>= 5 samples) if one search is pathologically slow

_SUBJECTS = ["the billing-api deploy", "the nightly ETL job", "our Postgres replica",
             "the auth token refresh", "the search indexer", "the payments worker",
             "the feature flag rollout", "the CI cache",
             "the staging cluster", "the webhook retries", "the admin UI build", "the ledger export",
             "the Kafka consumer", "the Redis cache", "the helm chart", "the mobile release"]
_ASKS = ["why does {s} fail with {e}", "how do we fix {e} in {s}", "who owns {s} and its alerts",
         "what port does {s} use on {host}", "which version of {lib} does {s} pin",
         "how to roll back {s} after {e}", "where is the runbook for {s}", "what did we decide about {s}",
         "is {s} still affected by {e}", "which command restarts {s} on {host}"]
_ERRORS = ["a deadlock", "OOMKilled", "connection reset by peer", "an expired certificate", "429s",
           "a flaky snapshot", "too many open files", "a context deadline", "ECONNREFUSED", "a schema drift"]
_HOSTS = ["db1.internal", "cache-02", "staging-eu", "ci-runner-7", "bastion.prod", "localhost"]
_LIBS = ["SQLAlchemy", "pydantic", "httpx", "React Query", "tokio", "gRPC", "Celery", "Alembic", "boto3"]


def queries(n: int, seed: int) -> list[str]:
    """``n`` distinct developer questions (distinct so the daemon's query-vector cache misses)."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        q = rng.choice(_ASKS).format(s=rng.choice(_SUBJECTS), e=rng.choice(_ERRORS),
                                     host=rng.choice(_HOSTS), lib=rng.choice(_LIBS))
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


#: ``--owners one``: every row is the reader's agent's (the worst case for one owner's index).
ONE_OWNER = False


def owner_of(i: int) -> tuple[str, str, dict[str, Any]]:
    """(scope, owner, owner fields) for row ``i``: 80% agents, 10% users, 10% org."""
    if ONE_OWNER:
        return "agent", "agent-00", {"agent_id": "agent-00"}
    slot = i % 20
    if slot < 16:
        agent = f"agent-{slot % 10:02d}"
        return "agent", agent, {"agent_id": agent}
    if slot < 18:
        user = f"user-{slot % 2}"
        return "user", user, {"user_id": user}
    return "org", "", {}


# -- building the store --------------------------------------------------------------
def build_store(data_dir: Path, n: int, seed: int, vector_kind: str = "random") -> dict[str, Any]:
    """A migrated store with ``n`` memories, FTS rows and stored unit vectors (bench/_corpus.py:
    random ones with developer notes, or real ones with the study's sentences)."""
    from sqlalchemy import insert, text

    from memoryd.clock import to_rfc3339, utcnow
    from memoryd.store import migrate, vectors
    from memoryd.store.engine import create_store_engine
    from memoryd.store.ids import new_memory_id
    from memoryd.store.schema import memories

    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = create_store_engine(f"sqlite:///{data_dir / 'memoryd.db'}")
    t0 = time.perf_counter()
    migrate.upgrade(engine)
    stamp = to_rfc3339(utcnow())
    corpus = Corpus(n, seed, vector_kind)
    texts = corpus.texts
    batch = 5000
    with engine.begin() as conn:
        for start in range(0, n, batch):
            rows = []
            for i in range(start, min(n, start + batch)):
                scope, owner, fields = owner_of(i)
                rows.append({
                    "id": new_memory_id(), "content": texts[i],
                    "content_hash": hashlib.sha256(texts[i].encode()).hexdigest(), "kind": "fact",
                    "scope": scope, "owner": owner, "status": "active", "importance": 0.5,
                    "importance_raw": 0.5, "valid_from": stamp, "recorded_at": stamp, "metadata": {},
                    "derived": False, "agent_id": None, "user_id": None, **fields,
                })
            conn.execute(insert(memories), rows)
        # Bulk load: build the FTS index from the rows in one pass (idempotent whether or
        # not the insert trigger already indexed them).
        conn.execute(text("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')"))
        seqs = [r[0] for r in conn.execute(text("SELECT seq FROM memories ORDER BY seq"))]
        for start, vecs in zip(range(0, n, batch), corpus.vector_chunks(batch), strict=True):
            chunk = seqs[start:start + batch]
            vrows = [{"memory_seq": s, "model": "all-MiniLM-L6-v2", "dim": DIM, "vector": v.tobytes(),
                      "content_hash": "bench", "embedded_at": stamp}
                     for s, v in zip(chunk, vecs, strict=True)]
            # As the embed pass stores them: into memory_vectors, whose trigger files each
            # vector in the vec0 index under its owner (migration 0007).
            vectors.upsert(conn, vrows)
    engine.dispose()
    db = data_dir / "memoryd.db"
    return {"n": n, "build_s": time.perf_counter() - t0, "db_bytes": db.stat().st_size,
            "vectors": vector_kind, "text": h.text_stats(texts)}


# -- raw SQL, in this process ------------------------------------------------------------
class Raw:
    """The daemon's two index queries, issued directly (same driver, sqlite-vec loaded)."""

    def __init__(self, db: Path):
        from memoryd.store import driver

        self.conn = driver.connect(str(db))  # sqlite-vec loaded
        self.keys = [f"agent:{READER['agent_id']}", f"user:{READER['user_id']}", "org:"]

    def fts(self, query: str) -> int:
        from memoryd.store.search import fts_match

        match = fts_match(query)
        rows = self.conn.execute(
            "SELECT rowid, bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? "
            "ORDER BY bm25(memories_fts) LIMIT ?", (match, LEX_FETCH)).fetchall()
        return len(rows)

    def knn(self, vec: np.ndarray) -> int:
        return len(self.knn_seqs(vec))

    def knn_seqs(self, vec: np.ndarray) -> list[int]:
        """The daemon's KNN (store/sqlite/vectors.knn): one statement, the visible owners' rows
        of vector_owners as the outer loop, each owner's bucket searched with owner_id and
        status filtered inside the scan, merged and cut to k."""
        from memoryd.store.sqlite.vectors import knn_query

        sql, params = knn_query(vec, k=KNN_FETCH, scope_keys=self.keys, statuses=["active"], kind=None)
        return [seq for seq, _ in self.conn.execute(sql, params).fetchall()]

    def lexical_fts_first(self, query: str) -> int:
        """Prototype: the daemon's lexical leg (join, scope, status, expiry) with FTS5 as the
        outer loop (CROSS JOIN), for comparison with the shipped join order."""
        from memoryd.store.search import fts_match

        rows = self.conn.execute(
            "SELECT m.*, -bm25(memories_fts) FROM memories_fts CROSS JOIN memories m "
            "ON m.seq = memories_fts.rowid WHERE memories_fts MATCH ? "
            "AND ((m.scope = 'agent' AND m.owner = ?) OR (m.scope = 'user' AND m.owner = ?) "
            "OR (m.scope = 'org' AND m.owner = '')) AND m.status IN ('active') "
            "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY bm25(memories_fts) LIMIT ?",
            (fts_match(query), READER["agent_id"], READER["user_id"], "2000-01-01", LEX_LIMIT)).fetchall()
        return len(rows)

    def lexical_cte(self, query: str) -> int:
        """Prototype: the same leg with the FTS matches in a MATERIALIZED CTE (expressible in
        SQLAlchemy Core: ``.cte("hits").prefix_with("MATERIALIZED")``), then joined to memories."""
        from memoryd.store.search import fts_match

        rows = self.conn.execute(
            "WITH hits AS MATERIALIZED (SELECT rowid AS seq, bm25(memories_fts) AS rank "
            "FROM memories_fts WHERE memories_fts MATCH ?) "
            "SELECT m.*, -hits.rank FROM hits JOIN memories m ON m.seq = hits.seq "
            "WHERE ((m.scope = 'agent' AND m.owner = ?) OR (m.scope = 'user' AND m.owner = ?) "
            "OR (m.scope = 'org' AND m.owner = '')) AND m.status IN ('active') "
            "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY hits.rank LIMIT ?",
            (fts_match(query), READER["agent_id"], READER["user_id"], "2000-01-01", LEX_LIMIT)).fetchall()
        return len(rows)

    def close(self) -> None:
        self.conn.close()


def load_encoder() -> Any:
    from sentence_transformers import SentenceTransformer

    from memoryd.models.embedder import bundled_model_path, quiet_offline_env

    quiet_offline_env()
    return SentenceTransformer(bundled_model_path(), device="cpu")


# -- measuring ------------------------------------------------------------------------------
def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(seconds: list[float]) -> dict[str, Any]:
    """The harness's latency summary plus p95."""
    out: dict[str, Any] = h.latency_summary(seconds)
    out["p95_ms"] = h.percentile([x * 1000 for x in seconds], 95)
    return out


def series(name: str, items: list[Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """Time ``fn`` over ``items``; stop early (keeping >= 5 samples) past the budget."""
    samples: list[float] = []
    started = time.perf_counter()
    for item in items:
        samples.append(timed(lambda item=item: fn(item)))
        if len(samples) >= 5 and time.perf_counter() - started > SERIES_BUDGET_S:
            print(f"  ({name}: stopped after {len(samples)} of {len(items)} queries, "
                  f"{time.perf_counter() - started:.0f} s)")
            break
    out = summary(samples)
    out["of"] = len(items)
    return out


def probe_lexical(daemon: h.Daemon, query: str, timeout_s: float) -> float | None:
    """Seconds one lexical search takes, or None past ``timeout_s``."""
    from memoryd.service.client import Client

    with Client(daemon.socket, timeout_s=timeout_s) as c:
        t0 = time.perf_counter()
        try:
            c.call("memory.search", {"query": query, "mode": "lexical", "k": K, **READER})
        except TimeoutError:
            return None
        return time.perf_counter() - t0


def measure(daemon: h.Daemon, db: Path, encoder: Any, n_queries: int, seed: int,
            skip_lexical: bool = False, rounds: int = 3) -> dict[str, Any]:
    set_a = queries(n_queries, seed)  # hybrid, never seen before
    set_b = queries(2 * n_queries, seed + 1)  # vector, never seen before (distinct from set_a)
    set_b = [q for q in set_b if q not in set(set_a)][:n_queries]
    raw = Raw(db)
    client = daemon.client()

    def search(query: str, mode: str) -> dict[str, Any]:
        res: dict[str, Any] = client.call("memory.search", {"query": query, "mode": mode, "k": K, **READER})
        if res["mode_used"] != mode:
            raise SystemExit(f"{mode} search answered {res['mode_used']}: {res['notices']}")
        return res

    out: dict[str, Any] = {}
    out["ping"] = series("ping", list(range(n_queries)), lambda _: client.call("daemon.ping"))
    encode = {q: encoder.encode([q], normalize_embeddings=True)[0] for q in set_a[:3]}  # warm
    t_embed = []
    for q in set_a + set_b:
        t0 = time.perf_counter()
        encode[q] = encoder.encode([q], normalize_embeddings=True, convert_to_numpy=True)[0]
        t_embed.append(time.perf_counter() - t0)
    out["query_embedding_in_process"] = summary(t_embed)
    out["vector_uncached"] = series("vector uncached", set_b, lambda q: search(q, "vector"))
    if skip_lexical:
        # Warm the daemon's query-vector cache for set_a (the cached series below use it).
        for q in set_a:
            search(q, "vector")
    else:
        out["hybrid_uncached"] = series("hybrid uncached", set_a, lambda q: search(q, "hybrid"))

    # Cached and raw, interleaved query by query so drift in machine load hits all alike.
    calls: dict[str, Callable[[str], Any]] = {
        "raw_fts": raw.fts, "raw_knn": lambda q: raw.knn(encode[q]),
        "hybrid": lambda q: search(q, "hybrid"), "lexical": lambda q: search(q, "lexical"),
        "vector": lambda q: search(q, "vector"),
    }
    names = tuple(n for n in calls if not (skip_lexical and n in ("hybrid", "lexical")))
    samples: dict[str, list[float]] = {name: [] for name in names}
    per_round: list[dict[str, float]] = []
    started = time.perf_counter()
    for rnd in range(rounds):
        this_round: dict[str, list[float]] = {name: [] for name in names}
        for done, q in enumerate(set_a, start=1):
            # The order rotates from query to query (and from round to round): the first daemon
            # call after a pause (the raw queries run here meanwhile) measured ~0.9 ms slower at
            # 10k, whichever mode it was, and with a fixed order that cost always fell on the
            # same series.
            shift = (done + rnd) % len(names)
            for name in names[shift:] + names[:shift]:
                this_round[name].append(timed(lambda name=name, q=q: calls[name](q)))
            if done >= 5 and time.perf_counter() - started > 2 * SERIES_BUDGET_S:
                print(f"  (interleaved series stopped in round {rnd + 1} after {done} of "
                      f"{len(set_a)} queries)")
                break
        for name in names:
            samples[name] += this_round[name]
        per_round.append({name: h.percentile(v, 50) * 1000 for name, v in this_round.items()})
        if time.perf_counter() - started > 2 * SERIES_BUDGET_S:
            break
    for name in names:
        out[name] = summary(samples[name])
    out["rounds"] = per_round
    out["vector_recall_at_10"] = vector_recall(client, raw, set_a, encode)
    out["daemon_rss_mb"] = round(psutil.Process(daemon.pid).memory_info().rss / 2**20, 1)
    client.close()
    raw.close()
    return out


def vector_recall(client: Any, raw: Raw, qs: list[str], encode: dict[str, np.ndarray]) -> float:
    """Mean share of the exact top 10 (the shipped vec0 scan, in process) that the daemon's
    vector mode returns in its top 10, over ``qs``."""
    total = 0.0
    for q in qs:
        got = client.call("memory.search", {"query": q, "mode": "vector", "k": K, **READER})["results"]
        ids = [r["id"] for r in got]
        marks = ",".join("?" * len(ids))
        seqs = {r[0] for r in raw.conn.execute(f"SELECT seq FROM memories WHERE id IN ({marks})", ids)}
        truth = raw.knn_seqs(encode[q])[:K]
        total += len(seqs & set(truth)) / max(1, len(truth))
    return total / max(1, len(qs))


def report(size: int, m: dict[str, Any]) -> dict[str, Any]:
    raw_sum = m["raw_fts"]["p50_ms"] + m["raw_knn"]["p50_ms"]
    embed = m["query_embedding_in_process"]["p50_ms"]
    nan = float("nan")
    hybrid = m.get("hybrid", {}).get("p50_ms", nan)
    derived = {
        "raw_fts_plus_knn_p50_ms": raw_sum,
        "ratio_hybrid_p50_over_raw": h.ratio(hybrid, raw_sum),
        "ratio_hybrid_uncached_p50_over_raw_plus_embed": h.ratio(
            m.get("hybrid_uncached", {}).get("p50_ms", nan), raw_sum + embed),
        "ratio_vector_p50_over_raw_knn": h.ratio(m["vector"]["p50_ms"], m["raw_knn"]["p50_ms"]),
        # New query minus cached query on the vector leg: what embedding costs the daemon
        # (through its model worker), free of lexical-leg noise.
        "daemon_query_embedding_p50_ms": m["vector_uncached"]["p50_ms"] - m["vector"]["p50_ms"],
    }
    rows = []
    labels = {
        "ping": "daemon.ping (socket round trip)",
        "raw_fts": f"raw FTS5 MATCH (top {LEX_FETCH})",
        "raw_knn": "raw vec0 KNN (k=40 per partition)",
        "query_embedding_in_process": "query embedding, in process",
        "lexical": "memory.search lexical", "vector": "memory.search vector (cached vec)",
        "hybrid": "memory.search hybrid (cached vec)",
        "vector_uncached": "memory.search vector (new query)",
        "hybrid_uncached": "memory.search hybrid (new query)",
    }
    for key, label in labels.items():
        if key in m:
            s = m[key]
            rows.append([label, s["n"], s["p50_ms"], s["p95_ms"], s["max_ms"]])
    if "lexical_probe_s" in m:
        probe = m["lexical_probe_s"]
        rows.append(["memory.search lexical: one probe (s!)", 1,
                     probe * 1000 if probe is not None else nan, nan, nan])
    h.print_table(f"{size:,} memories: latency (ms)", ["what", "n", "p50", "p95", "max"], rows)
    print(f"  hybrid p50 / (raw FTS p50 + raw KNN p50) = {hybrid:.2f} / {raw_sum:.2f} = "
          f"{derived['ratio_hybrid_p50_over_raw']:.2f}  (target <= 1.5; p50s of all rounds' samples)")
    rounds = [r for r in m.get("rounds", []) if "hybrid" in r]
    if len(rounds) > 1:
        per = [h.ratio(r["hybrid"], r["raw_fts"] + r["raw_knn"]) for r in rounds]
        derived["ratio_hybrid_p50_over_raw_per_round"] = per
        derived["hybrid_p50_ms_per_round"] = [r["hybrid"] for r in rounds]
        hybrids = ", ".join(f"{r['hybrid']:.1f}" for r in rounds)
        print(f"  the same ratio round by round: {', '.join(f'{x:.2f}' for x in per)}; hybrid p50 "
              f"{hybrids} ms")
    print(f"  vector p50 / raw KNN p50 = {derived['ratio_vector_p50_over_raw_knn']:.2f}; "
          f"query embedding as the daemon sees it ~ {derived['daemon_query_embedding_p50_ms']:.1f} ms "
          f"(in process {embed:.1f} ms)")
    # The targets: < 30 ms at 100k; at a million, issue 21's < 50 ms (p95 < 100, a new query < 80).
    target = {100_000: "< 30 ms", 1_000_000: "< 50 ms"}.get(size)
    if target:
        print(f"  hybrid p50 at {size:,}: {hybrid:.1f} ms (target {target})")
    return derived


# -- prototypes (in process, daemon stopped): where the remaining time at 100k goes ----------------
_STOP_TEXT = """a about an and are as at be by can could do does did for from how i if in into is it its
me my of on or our should so that the their them then there these they this to up was we what when where
which who why will with would you your after before still"""
_STOP = frozenset(_STOP_TEXT.split())


def content_query(query: str) -> str:
    """The query with stop-words dropped (what the lexical leg would match with a stop list)."""
    import re

    words = [w for w in re.findall(r"\w+", query) if w.lower() not in _STOP]
    return " ".join(words) or query


def prototypes(db: Path, encoder: Any, qs: list[str]) -> dict[str, Any]:
    """Time alternative index queries on the same store: a stop-word-free MATCH, the lexical
    leg as FTS CROSS JOIN memories and as a MATERIALIZED CTE, and binary-quantised vectors
    rescored exactly (the shipped KNN, owners bucketed into partitions
    since migration 0007, is the reference)."""
    from sqlalchemy import text

    from memoryd.store.engine import create_store_engine

    engine = create_store_engine(f"sqlite:///{db}")
    t0 = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(text(
            "CREATE VIRTUAL TABLE proto_vec_bit USING vec0(memory_seq integer primary key, "
            "embedding bit[384], scope_key text, status text, kind text)"))
        conn.execute(text(
            "INSERT INTO proto_vec_bit(memory_seq, embedding, scope_key, status, kind) "
            "SELECT v.memory_seq, vec_quantize_binary(v.vector), m.scope || ':' || m.owner, m.status, m.kind "
            "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq"))
    engine.dispose()
    build_s = time.perf_counter() - t0
    raw = Raw(db)
    c = raw.conn
    keys = raw.keys
    vecs = {q: encoder.encode([q], normalize_embeddings=True)[0].astype("<f4") for q in qs}

    def exact(q: str) -> list[int]:
        return raw.knn_seqs(vecs[q])  # the shipped KNN

    def binary(q: str) -> list[int]:
        cand = [r[0] for r in c.execute(
            "SELECT memory_seq FROM proto_vec_bit WHERE embedding MATCH vec_quantize_binary(?) AND k = ? "
            "AND scope_key IN (?, ?, ?) AND status IN ('active')",
            (vecs[q].tobytes(), 10 * KNN_FETCH, *keys))]
        marks = ",".join("?" * len(cand))
        return [r[0] for r in c.execute(
            f"SELECT memory_seq FROM memory_vectors WHERE memory_seq IN ({marks}) "
            "ORDER BY vec_distance_cosine(vector, ?) LIMIT ?", (*cand, vecs[q].tobytes(), KNN_FETCH))]

    out: dict[str, Any] = {"build_s": build_s}
    calls = {"raw_fts": raw.fts, "raw_fts_stopwords_removed": lambda q: raw.fts(content_query(q)),
             "lexical_fts_first": raw.lexical_fts_first, "lexical_cte": raw.lexical_cte,
             "raw_knn": exact, "knn_binary_rescored_x10": binary}
    samples: dict[str, list[float]] = {n: [] for n in calls}
    for q in qs:
        for name, fn in calls.items():
            samples[name].append(timed(lambda fn=fn, q=q: fn(q)))
    for name in calls:
        out[name] = summary(samples[name])
    truth = {q: exact(q) for q in qs}
    out["knn_binary_rescored_x10"]["overlap_at_40"] = (
        sum(len(set(binary(q)) & set(truth[q])) for q in qs) / (KNN_FETCH * len(qs)))
    raw.close()
    return out


def print_prototypes(size: int, p: dict[str, Any]) -> None:
    rows = [[name, p[name]["n"], p[name]["p50_ms"], p[name]["p95_ms"]]
            for name in ("raw_fts", "raw_fts_stopwords_removed", "lexical_fts_first", "lexical_cte",
                         "raw_knn", "knn_binary_rescored_x10")]
    h.print_table(f"{size:,} memories: prototypes, in process (ms)", ["query", "n", "p50", "p95"], rows)
    print(f"  binary + exact rescoring of 400: top-40 overlap with the shipped KNN "
          f"{p['knn_binary_rescored_x10']['overlap_at_40']:.0%} (random vectors: a "
          "pessimistic stand-in for real embeddings)")


def wait_vector_leg(daemon: h.Daemon, timeout_s: float = 300.0) -> None:
    """Until a vector search as this bench's reader answers as one (the embedder has loaded)."""
    h.wait_vector_leg(daemon, timeout_s, **READER)


#: ``--daemon-config KEY=VALUE``: keys given to the daemon on top of the bench's own.
DAEMON_CONFIG: dict[str, Any] = {}


def config_pair(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with VALUE read as JSON (1024, 0.5, true) or else as a string."""
    import json

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def start_daemon(root: Path, data_dir: Path, label: str) -> h.Daemon:
    """A daemon on the built store, once its vector leg answers (the model is loaded)."""
    # model_idle_s: a graph build can outlast the model worker's idle exit (300 s), after which
    # the first vector search answered lexically while the model loaded again.
    daemon = h.Daemon(root, embedder="bundled", data_dir=data_dir, label=label,
                      config={"governor_enabled": False, "model_idle_s": 7200.0, **DAEMON_CONFIG})
    daemon.start()
    wait_indexes(daemon)
    return daemon


def wait_indexes(daemon: h.Daemon) -> None:
    """Until the vector leg answers, then the HNSW graphs and the lexical index are ready and
    caught up (each is built or loaded on a thread after start; until then the store's own search
    answers). Sets ``index_ready_s``, ``vector_index`` and ``lexical_index`` on ``daemon``."""
    warm = time.perf_counter()
    wait_vector_leg(daemon)
    while True:
        vi = daemon.call("daemon.status").get("vector_index")
        if vi is None or (vi["ready"] and vi["behind"] == 0):
            break
        if vi.get("error"):
            raise SystemExit(f"the vector index failed: {vi['error']}")
        time.sleep(1.0)
    daemon.index_ready_s = time.perf_counter() - warm  # type: ignore[attr-defined]
    daemon.vector_index = vi  # type: ignore[attr-defined]
    # The lexical index (store/lexindex/index_set.py) of a store past lexical_index_min_rows, the same.
    daemon.lexical_index = h.wait_lexical_index(daemon)  # type: ignore[attr-defined]


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline='the raw FTS5 MATCH and vec0 KNN of the same queries on the same store, same run.')
    p.add_argument("--sizes", default=None, help="comma-separated store sizes (default 10000,100000)")
    p.add_argument("--queries", type=int, default=None, help="distinct queries per series")
    p.add_argument("--probe-timeout", type=float, default=300.0,
                   help="seconds one lexical probe search may take before the store size is judged "
                        "pathological (its lexical and hybrid series are then skipped)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of the interleaved cached and raw series (each asks every query "
                        "once per series); the ratio is printed over all rounds and round by round")
    p.add_argument("--prototypes", action="store_true",
                   help="also time alternative index queries in process (stop-word-free MATCH, "
                        "the lexical leg as FTS CROSS JOIN memories and as a MATERIALIZED CTE, "
                        "binary quantisation with exact rescoring)")
    p.add_argument("--prototypes-only", action="store_true",
                   help="build the stores and time only the in-process prototypes (no daemon)")
    p.add_argument("--owners", choices=("spread", "one"), default="spread",
                   help="spread: ten agents, two users and org rows (the reader sees about a fifth); "
                        "one: every row is the reader's agent's (the worst case for one owner)")
    p.add_argument("--vectors", choices=KINDS, default="random",
                   help="random: developer notes with random unit vectors (HNSW's worst case); real: "
                        "the sentences of bench/studies/ann_million_real.py with their real "
                        "all-MiniLM-L6-v2 vectors from its cache (encode them first, see "
                        "bench/_corpus.py); with --reuse, names what the kept store holds")
    p.add_argument("--reuse", default=None, metavar="DIR",
                   help="measure the store in DIR/data (a folder an earlier --keep run left) instead "
                        "of building one; one size only")
    p.add_argument("--daemon-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a config key for the daemon (repeatable), e.g. vector_index_ef=1024; VALUE "
                        "is read as JSON, else as a string")
    p.add_argument("--name", default="search", help="results file name (bench/results/NAME.json)")
    args = p.parse_args()
    global ONE_OWNER
    ONE_OWNER = args.owners == "one"
    try:
        DAEMON_CONFIG.update(config_pair(x) for x in args.daemon_config)
    except ValueError as e:
        p.error(f"--daemon-config: {e}")
    if args.reuse and (not args.sizes or "," in args.sizes):
        p.error("--reuse measures one store: give its size with --sizes N")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1 (got {args.rounds})")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        [2000, 10000] if args.quick else [10000, 100000])
    n_queries = args.queries or (20 if args.quick else 60)
    prio = h.match_daemon_priority()
    h.banner("search", f"search latency at {', '.join(f'{s:,}' for s in sizes)} memories vs raw FTS5 and "
             "vec0 queries", args.quick)
    print(f"priority: this benchmark and its raw queries run at the daemon's ({prio}); the daemon "
          "inherits it")
    print("loading the embedder in this process (query vectors for the raw KNN)...")
    encoder = load_encoder()
    results: dict[str, Any] = {"sizes": {}, "queries_per_series": n_queries, "reader": READER,
                               "owners": args.owners, "vectors": args.vectors,
                               "daemon_config": DAEMON_CONFIG}
    for i, size in enumerate(sizes):
        with h.workdir(f"search{size}", keep=args.keep) as root:
            data_dir = root / "data"
            if args.reuse:
                data_dir = Path(args.reuse) / "data"
                db_file = data_dir / "memoryd.db"
                built = {"n": size, "build_s": float("nan"), "db_bytes": db_file.stat().st_size,
                         "vectors": args.vectors, "reused": str(data_dir)}
            else:
                built = build_store(data_dir, size, seed=11 + i, vector_kind=args.vectors)
            made = f"reused {args.reuse}" if args.reuse else f"built in {built['build_s']:.1f} s"
            print(f"\na {size:,}-memory store ({args.vectors} vectors), {made} "
                  f"({built['db_bytes'] / 2**20:.0f} MiB)")
            if args.prototypes_only:
                proto = prototypes(data_dir / "memoryd.db", encoder, queries(n_queries, 100 + i))
                print_prototypes(size, proto)
                results["sizes"][str(size)] = {"store": built, "prototypes": proto}
                continue
            daemon = start_daemon(root, data_dir, f"d{size}")
            try:
                status = daemon.call("daemon.status")
                probe = probe_lexical(daemon, queries(1, seed=7)[0], args.probe_timeout)
                slow = probe is None or probe > SLOW_LEXICAL_S
                if slow:
                    took = f"> {args.probe_timeout:.0f}" if probe is None else f"{probe:.1f}"
                    print(f"  one lexical search took {took} s: the lexical and hybrid series are "
                          "skipped at this size (the daemon is restarted: the probe may still run)")
                    daemon.stop()
                    daemon = start_daemon(root, data_dir, f"e{size}")
                m = measure(daemon, data_dir / "memoryd.db", encoder, n_queries, seed=100 + i,
                            skip_lexical=slow, rounds=args.rounds)
            finally:
                daemon.stop()
            m["lexical_probe_s"] = probe
            m["vector_index"] = getattr(daemon, "vector_index", None)
            m["index_ready_s"] = getattr(daemon, "index_ready_s", None)
            m["lexical_index"] = getattr(daemon, "lexical_index", None)
            print(f"  vector recall@10 against the exact scan: {m['vector_recall_at_10']:.3f}; "
                  f"daemon RSS {m['daemon_rss_mb']:.0f} MiB; vector index ready "
                  f"{m['index_ready_s']:.0f} s after start ({m['vector_index']}); lexical index: "
                  f"{m['lexical_index']}")
            m["store"] = built
            m["daemon_memories"] = status["memories"]
            m["derived"] = report(size, m)
            if args.prototypes:
                m["prototypes"] = prototypes(data_dir / "memoryd.db", encoder, queries(n_queries, 100 + i))
                print_prototypes(size, m["prototypes"])
            results["sizes"][str(size)] = m
    h.save(args.name, results, args.quick)


if __name__ == "__main__":
    main()
