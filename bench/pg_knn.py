"""PostgreSQL vector leg: latency and recall of memoryd's filtered KNN (store/postgres/vectors.py).

Builds a store on an embedded PostgreSQL 18 + pgvector 0.8 (the test fixture's
server, tests/postgres.py): N clustered unit vectors (384 dimensions), half of
them one big owner's ("agent:big"), the rest spread over 100 small owners. For
a reader of each kind it times, query by query:

* ``knn()`` as the daemon runs it (the planner picks the HNSW index or an exact
  scan of the reader's rows; iterative index scan on; exact fallback when short);
* the same statement pushed onto the HNSW index (``enable_sort = off``);
* the exact scan (the ORDER BY hidden from the index);

and the recall@10 of the first two against the exact answer. The vectors are
synthetic (64 noisy clusters), a harder set for HNSW than sentence embeddings:
the recall figures are a floor, not what bench/recall.py would see.

    PYTHONPATH=src .venv/bin/python bench/pg_knn.py            # N = 20,000
    PYTHONPATH=src .venv/bin/python bench/pg_knn.py --n 5000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import start_server, stop_server

from memoryd.store.engine import create_store_engine
from memoryd.store.migrate import upgrade
from memoryd.store.postgres import vectors as pgv
from memoryd.store.postgres.vector_type import to_pg_text

DIM, K, QUERIES = 384, 10, 40


def _vectors(n: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((64, DIM)).astype(np.float32)
    v = centres[rng.integers(0, 64, n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build(engine, n: int, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    owners = ["big" if i < n // 2 else f"small{i % 100}" for i in range(n)]
    vecs = _vectors(n, rng)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, status, "
            "importance, importance_raw, valid_from, recorded_at, metadata) "
            "SELECT 'm' || g, 'x', 'h' || g, 'fact', 'agent', (CAST(:o AS text[]))[g], "
            "(CAST(:o AS text[]))[g], 'active', 0.5, 0.5, "
            "'2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{}' "
            "FROM generate_series(1, :n) g"), {"o": owners, "n": n})
        seqs = conn.execute(text("SELECT seq FROM memories ORDER BY seq")).scalars().all()
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO memory_vectors (memory_seq, model, dim, vector, content_hash, "
                              "embedded_at) VALUES (:s, 'bench', 384, CAST(:v AS vector), 'h', 't')"),
                         [{"s": seqs[i], "v": to_pg_text(vecs[i].astype("<f4").tobytes())}
                          for i in range(start, min(n, start + 1000))])
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))
    print(f"built {n} vectors with the HNSW index in {time.perf_counter() - t0:.1f} s")


def run(engine, reader: str, rng: np.random.Generator) -> None:  # type: ignore[no-untyped-def]
    times: dict[str, list[float]] = {"knn": [], "hnsw": [], "exact": []}
    recall: dict[str, list[float]] = {"knn": [], "hnsw": []}
    for q in _vectors(QUERIES, rng):
        got = {}
        for how in ("exact", "hnsw", "knn"):
            with engine.begin() as conn:
                if how == "hnsw":
                    conn.exec_driver_sql("SET LOCAL enable_sort = off")
                t = time.perf_counter()
                if how == "exact":
                    conn.exec_driver_sql("SET LOCAL enable_indexscan = off")
                hits = pgv.knn(conn, q, k=K, scope_keys=[f"agent:{reader}"], statuses=["active"], kind=None)
                times[how].append((time.perf_counter() - t) * 1000)
            got[how] = {s for s, _ in hits}
        for how in ("knn", "hnsw"):
            recall[how].append(len(got[how] & got["exact"]) / max(1, len(got["exact"])))
    line = ", ".join(f"{how} p50 {statistics.median(ms):.2f} ms" for how, ms in times.items())
    rec = ", ".join(f"{how} recall@{K} {statistics.mean(r):.3f}" for how, r in recall.items())
    print(f"reader agent:{reader}: {line}; {rec}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Baseline: the exact scan of the same reader's rows (recall@10 against its answer).")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--ef", type=int, nargs="+", default=[pgv.MIN_EF_SEARCH],
                        help="minimum hnsw.ef_search values to compare")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    server = start_server()
    try:
        with server.database("bench") as url:
            engine = create_store_engine(url)
            upgrade(engine)
            build(engine, args.n, rng)
            for ef in args.ef:
                pgv.MIN_EF_SEARCH = ef
                print(f"hnsw.ef_search at least {ef}:")
                for reader in ("big", "small3"):
                    run(engine, reader, rng)
            engine.dispose()
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
