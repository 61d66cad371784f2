"""What the learned ranking and a wider candidate pool cost per search (issue 23, items 1 and 2):
a study, run by hand.

On a bench/search.py store (``build_store``: dev notes, random unit vectors, ten agents, two
users and org rows) whose rows are then made conversation turns (kind ``conversation``, a
session per 15 rows, 40 s apart), so that every pool is one the learned ranking orders (its
worst case; a pool without turns is only hydrated whole), in process, query by query:

* ``stage``: with both legs' rows in hand, fuse + hydrate the top 10 (the order before)
  against fuse + hydrate the whole pool + ``learned.order`` (the order now);
* ``pool``: the legs 20, 50 and 100 rows deep (pools of at most 40, 100, 200), each fused,
  hydrated and ordered, the depths interleaved. The legs run one after the other here, with
  exact vector scans; the daemon runs them side by side.

    .venv/bin/python bench/studies/ranking_cost.py --sizes 10000,100000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

from sqlalchemy import text  # noqa: E402

import search as B  # noqa: E402  (bench/search.py)
from memoryd.clock import to_rfc3339, utcnow  # noqa: E402
from memoryd.store import search as S  # noqa: E402
from memoryd.store.engine import create_store_engine, read_only  # noqa: E402
from memoryd.store.ranking import learned  # noqa: E402
from memoryd.store.scope import Reader  # noqa: E402

DEPTHS = (20, 50, 100)


def study(n: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="rcost", dir="/tmp"))
    try:
        B.build_store(root, n, 7)
        engine = create_store_engine(f"sqlite:///{root / 'memoryd.db'}")
        with engine.begin() as conn:
            conn.execute(text("UPDATE memories SET kind = 'conversation', session_id = 's' || (seq / 15), "
                              "occurred_at = strftime('%Y-%m-%dT%H:%M:%SZ', '2024-01-01', "
                              "'+' || (seq * 40) || ' seconds')"))
        rng = np.random.default_rng(1)
        reader = Reader(agent_id=B.READER["agent_id"], user_id=B.READER["user_id"])
        now = utcnow()
        now_s = to_rfc3339(now)
        before: list[float] = []
        after: list[float] = []
        by_depth: dict[int, list[float]] = {d: [] for d in DEPTHS}
        sizes: dict[int, list[int]] = {d: [] for d in DEPTHS}
        with read_only(engine) as conn:
            for _ in range(rounds):
                for i, q in enumerate(B.queries(40, 3)):
                    v = rng.standard_normal(B.DIM).astype(np.float32)
                    v /= np.linalg.norm(v)
                    req = S.SearchRequest(query=q, k=10, reader=reader)
                    lex = S.lexical(conn, req, now_s, 20)
                    vec, _ = S.vector(conn, req, now_s, v, 20)
                    t0 = time.perf_counter()
                    S.hydrate(conn, S.fuse(lex, vec, 10, now, False))
                    t1 = time.perf_counter()
                    learned.order(q, S.hydrate(conn, S.fuse(lex, vec, len(lex) + len(vec), now, False)), 10)
                    t2 = time.perf_counter()
                    before.append((t1 - t0) * 1000)
                    after.append((t2 - t1) * 1000)
                    for d in DEPTHS[i % 3:] + DEPTHS[:i % 3]:
                        t0 = time.perf_counter()
                        lex_d = S.lexical(conn, req, now_s, d)
                        vec_d, _ = S.vector(conn, req, now_s, v, d)
                        rows = S.hydrate(conn, S.fuse(lex_d, vec_d, len(lex_d) + len(vec_d), now, False))
                        learned.order(q, rows, 10)
                        by_depth[d].append((time.perf_counter() - t0) * 1000)
                        sizes[d].append(len(rows))
        engine.dispose()
        print(f"{n:,} memories, {len(before)} queries")
        print(f"  stage: fuse + hydrate top 10 p50 {statistics.median(before):.2f} ms; fuse + hydrate pool "
              f"+ learned order p50 {statistics.median(after):.2f} ms (added "
              f"{statistics.median(after) - statistics.median(before):+.2f} ms)")
        for d in DEPTHS:
            print(f"  pool: legs {d} deep (pool {np.mean(sizes[d]):.0f}): "
                  f"p50 {statistics.median(by_depth[d]):.1f} ms, p90 {np.percentile(by_depth[d], 90):.1f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        study(n, args.rounds)


if __name__ == "__main__":
    main()
