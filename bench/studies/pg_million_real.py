"""pgvector's HNSW at a million real vectors: one graph against a graph of one seq range.

Run by hand on a store ``bench/pg_search.py --vectors real --keep-store DIR``
kept (its cluster in DIR/data): a million sentences of
bench/studies/ann_million_real.py with their real all-MiniLM-L6-v2 vectors and
the daemon's HNSW index over all of them (store/postgres/vectors.py: m 16,
ef_construction 200). bench/pg_search.py measures the daemon's filtered KNN
there; this study asks where its recall goes, with no reader filter at all:

* the store's one graph: ``ORDER BY vector <=> q LIMIT 10`` over the million,
  against the exact top 10 (the ORDER BY hidden from the index by ``+ 0``);
* a graph of one seq range (``--range-rows``, 100,000): a partial HNSW index
  ``WHERE memory_seq <= N`` built with the daemon's parameters (or ``--with``),
  searched and compared within that range, then dropped.

Each at several ``hnsw.ef_search`` (``--ef``), parallel workers off, p50 per
query in process. bench/search.py's questions (``--queries``), encoded here.

    .venv/bin/python bench/studies/pg_million_real.py --store /work/pgkeep1m_real
    .venv/bin/python bench/studies/pg_million_real.py --store DIR --with "m = 32, ef_construction = 200"
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _harness as h
import pg_search as ps
import search as sb
from memoryd.store.postgres.vector_type import to_pg_text

PROBE_INDEX = "study_range_hnsw"


def recall(conn: Any, vecs: list[np.ndarray], where: str, ef: int) -> dict[str, Any]:
    """Mean share of the exact top 10 the HNSW search returns, and its p50 ms."""
    ann = f"SELECT memory_seq FROM memory_vectors {where} ORDER BY vector <=> %s::vector LIMIT 10"
    exact = f"SELECT memory_seq FROM memory_vectors {where} ORDER BY (vector <=> %s::vector) + 0 LIMIT 10"
    conn.execute(f"SET hnsw.ef_search = {int(ef)}")

    def seqs(sql: str, vec: np.ndarray) -> list[int]:
        return [int(r[0]) for r in conn.execute(sql, (to_pg_text(vec.tobytes()),))]

    found, times = 0.0, []
    for vec in vecs:
        truth = set(seqs(exact, vec))
        t0 = time.perf_counter()
        got = seqs(ann, vec)
        times.append(time.perf_counter() - t0)
        found += len(truth & set(got)) / max(1, len(truth))
    return {"ef_search": ef, "recall_at_10": found / len(vecs), "p50_ms": float(np.median(times)) * 1000}


def sweep(label: str, efs: list[int], one: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [one(ef) for ef in efs]
    h.print_table(label, ["ef_search", "recall@10", "p50 ms"],
                  [[r["ef_search"], f"{r['recall_at_10']:.3f}", f"{r['p50_ms']:.1f}"] for r in rows])
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, required=True,
                   help="a folder bench/pg_search.py --vectors real --keep-store left")
    p.add_argument("--queries", type=int, default=40, help="bench/search.py's questions to ask")
    p.add_argument("--ef", default="40,200,1000", help="hnsw.ef_search values, comma-separated")
    p.add_argument("--range-rows", type=int, default=100_000,
                   help="rows of the partial index's seq range (0: skip it)")
    p.add_argument("--no-one-graph", action="store_true", help="skip the store's own index")
    p.add_argument("--with", dest="with_", default=None,
                   help="the partial index's storage parameters (default: the daemon's)")
    args = p.parse_args()
    kept = ps.read_kept(args.store)
    if kept is None or kept.get("vectors") != "real":
        p.error(f"--store: {args.store} holds no store kept by bench/pg_search.py --vectors real")
    from memoryd.store.postgres.vectors import HNSW_INDEX, HNSW_WITH

    efs = [int(x) for x in args.ef.split(",") if x.strip()]
    encoder = sb.load_encoder()
    vecs = [encoder.encode([q], normalize_embeddings=True)[0].astype("<f4")
            for q in sb.queries(args.queries, seed=100)]
    out: dict[str, Any] = {"store": {k: v for k, v in kept.items() if k != "build"}, "queries": len(vecs)}
    server = ps.start_kept_server(args.store)
    try:
        import psycopg

        with psycopg.connect(ps.dsn_of(server.url(kept["database"])), autocommit=True) as conn:
            conn.execute("SET max_parallel_workers_per_gather = 0")
            rows = kept["size"]
            if not args.no_one_graph:
                out["one_graph"] = sweep(f"one graph of {rows:,} (the daemon's index), no filter", efs,
                                         lambda ef: recall(conn, vecs, "", ef))
            if args.range_rows:
                with_ = args.with_ or HNSW_WITH
                conn.execute("SET maintenance_work_mem = '2GB'")
                t0 = time.perf_counter()
                conn.execute(f"CREATE INDEX {PROBE_INDEX} ON memory_vectors USING hnsw "
                             f"(vector vector_cosine_ops) WITH ({with_}) "
                             f"WHERE memory_seq <= {int(args.range_rows)}")
                build_s = time.perf_counter() - t0
                # The store's own index is dropped for the sweep, in a transaction rolled back
                # after it: the planner would otherwise take it when the partial index's
                # parameters make that one look dearer (m 32).
                try:
                    with conn.transaction(force_rollback=True):
                        conn.execute(f"DROP INDEX {HNSW_INDEX}")
                        where = f"WHERE memory_seq <= {int(args.range_rows)}"
                        plan = " ".join(r[0] for r in conn.execute(
                            f"EXPLAIN SELECT memory_seq FROM memory_vectors {where} "
                            "ORDER BY vector <=> %s::vector LIMIT 10", (to_pg_text(vecs[0].tobytes()),)))
                        if PROBE_INDEX not in plan:
                            raise SystemExit(f"the range search does not use the partial index: "
                                             f"{plan[:300]}")
                        out["range"] = {"rows": args.range_rows, "with": with_, "build_s": build_s,
                                        "sweep": sweep(f"a graph of seq <= {args.range_rows:,} ({with_}; "
                                                       f"built in {build_s:.0f} s), no filter", efs,
                                                       lambda ef: recall(conn, vecs, where, ef))}
                finally:
                    conn.execute(f"DROP INDEX IF EXISTS {PROBE_INDEX}")
    finally:
        print(f"server stopped: {ps.stop_kept_server(server)}")
    path = Path(__file__).resolve().parents[1] / "results" / "pg_million_real.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
