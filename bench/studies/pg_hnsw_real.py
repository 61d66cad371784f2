"""pgvector's HNSW as the daemon builds and searches it, on real all-MiniLM-L6-v2 vectors: recall@10.

bench/pg_search.py stores random unit vectors (bench/search.py's store), on
which HNSW finds almost nothing of the exact top 10 (recall@10 0.03 at 1M):
random 384-d points are the worst case for any graph index. This study asks
the question on real vectors instead, at the size that has been encoded: the
vectors bench/studies/ann_candidates.py cached (read only) under
bench/results/ann_study_cache/ (conversation turns and dev notes; 200 of its
queries). For each owner layout of bench/search.py (``spread``: the reader
sees a quarter of the rows; ``one``: every row is the reader's) it loads them
into an embedded PostgreSQL 18 + pgvector 0.8, builds the daemon's HNSW index
(store/postgres/vectors.create_index) and times the daemon's KNN statement
(k = 40, iterative scan, as bench/pg_search.py captures it) at several
``hnsw.ef_search`` values, with recall@10 against an exact scan. HNSW builds
are not deterministic: rerun before reading a difference of a few points.

    .venv/bin/python bench/studies/pg_hnsw_real.py
    .venv/bin/python bench/studies/pg_hnsw_real.py --ef 40,200,400
"""

from __future__ import annotations

import argparse
import glob
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import start_server, stop_server

import pg_search as P
import search as sb

BENCH = Path(__file__).resolve().parents[1]
STAMP = "2026-01-01T00:00:00.000000Z"


def load(url: str, base: np.ndarray, with_: str = "") -> float:
    """The rows (owners by search.owner_of) and vectors; the HNSW build's seconds.

    ``with_``: the index's storage parameters (``m = 32, ef_construction = 200``) in place of
    the daemon's index (store/postgres/vectors.create_index)."""
    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine
    from memoryd.store.postgres import vectors as pgv

    engine = create_store_engine(url)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            pgv.drop_index(conn)
        raw = engine.raw_connection()
        try:
            pg = raw.driver_connection
            cols = "id, content, content_hash, kind, scope, owner, status, importance, importance_raw, " \
                   "valid_from, recorded_at, metadata, agent_id, user_id"
            with pg.cursor() as cur, cur.copy(f"COPY memories ({cols}) FROM STDIN") as cp:
                for i in range(len(base)):
                    scope, owner, f = sb.owner_of(i)
                    cp.write_row((f"m{i}", f"x{i}", f"h{i}", "fact", scope, owner, "active", 0.5, 0.5,
                                  STAMP, STAMP, "{}", f.get("agent_id"), f.get("user_id")))
            pg.commit()
            seqs = np.array([r[0] for r in pg.execute("SELECT seq FROM memories ORDER BY seq")])
            with pg.cursor() as cur, cur.copy(
                    f"COPY memory_vectors ({', '.join(P.VECTOR_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as cp:
                cp.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
                cp.write(P._vector_copy_rows(seqs, base, STAMP))
                cp.write(struct.pack(">h", -1))
            pg.commit()
        finally:
            raw.close()
        t0 = time.perf_counter()
        with engine.begin() as conn:
            conn.exec_driver_sql(f"SET LOCAL maintenance_work_mem = '{P.MAINTENANCE_WORK_MEM}'")
            conn.exec_driver_sql("SET LOCAL max_parallel_maintenance_workers = 1")
            pgv.create_index(conn, with_ or pgv.HNSW_WITH)
        build_s = time.perf_counter() - t0
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM (ANALYZE) memories")
            conn.exec_driver_sql("VACUUM (ANALYZE) memory_vectors")
        return build_s
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=str(BENCH / "results" / "ann_study_cache"))
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--ef", default="40,100,200,400,1000")
    p.add_argument("--with", dest="with_", default="",
                   help="the HNSW index's storage parameters, e.g. 'm = 32, ef_construction = 200' "
                        "(default: the daemon's index)")
    p.add_argument("--owners", default="spread,one", help="owner layouts, comma-separated")
    args = p.parse_args()
    base_files = sorted(glob.glob(f"{args.cache}/base-*.npy"))
    query_files = sorted(glob.glob(f"{args.cache}/queries-*.npy"))
    if not base_files or not query_files:
        raise SystemExit(f"no cached vectors in {args.cache}: run bench/studies/ann_candidates.py "
                         "--encode-only first")
    base = np.concatenate([np.load(f) for f in base_files]).astype(np.float32)
    pool = np.load(query_files[0]).astype(np.float32)
    picked = pool[np.random.default_rng(0).choice(len(pool), min(args.queries, len(pool)), replace=False)]
    names = [f"q{i}" for i in range(len(picked))]
    encode = dict(zip(names, picked, strict=True))
    efs = [int(x) for x in args.ef.split(",")]
    print(f"{len(base):,} real vectors, {len(names)} queries; ef_search {efs}")
    server = start_server()
    try:
        P.configure_server(server, "2GB")
        for owners in args.owners.split(","):
            sb.ONE_OWNER = owners == "one"
            with server.database("hr") as url:
                build_s = load(url, base, args.with_)
                raw = P.RawPg(url)
                try:
                    rows = P.ef_sweep(raw, names, encode, efs)
                finally:
                    raw.close()
            print(f"\n{owners} owners: HNSW build {build_s:.1f} s ({args.with_ or 'the daemon index'})")
            for r in rows:
                print(f"  ef_search {r['ef_search']:>4}: p50 {r['p50_ms']:6.2f} ms, "
                      f"p95 {r['p95_ms']:6.2f} ms, recall@10 {r['recall_at_10']:.3f}")
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
