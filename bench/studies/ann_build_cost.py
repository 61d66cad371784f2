"""What an HNSW graph costs to build, real vectors against the random ones the benches store.

bench/search.py and bench/import.py write random unit vectors, and the
daemon's graphs took far longer to build from them at M 32 than at M 16. This
study builds hnswlib graphs with the daemon's ef_construction
(store/annindex/graph.py) on one thread from the same number of real
all-MiniLM-L6-v2 vectors (those bench/studies/ann_candidates.py cached) and
of random unit vectors, at M 16 and the daemon's M, and prints the CPU
seconds of each build.

    .venv/bin/python bench/studies/ann_candidates.py --n 20000 --encode-only   # the cache
    .venv/bin/python bench/studies/ann_build_cost.py --n 20000
"""

from __future__ import annotations

import argparse
import glob
import time
from pathlib import Path

import hnswlib
import numpy as np

from memoryd.store.annindex.graph import EF_CONSTRUCTION, M

BENCH = Path(__file__).resolve().parents[1]


def build_cpu_s(data: np.ndarray, m: int) -> float:
    index = hnswlib.Index(space="cosine", dim=data.shape[1])
    index.init_index(max_elements=len(data), M=m, ef_construction=EF_CONSTRUCTION)
    index.set_num_threads(1)
    t0 = time.process_time()
    index.add_items(data)
    return time.process_time() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=str(BENCH / "results" / "ann_study_cache"))
    p.add_argument("--n", type=int, default=20_000, help="vectors per build (default 20,000)")
    args = p.parse_args()
    files = sorted(glob.glob(f"{args.cache}/base-*.npy"))
    if not files:
        raise SystemExit(f"no cached vectors in {args.cache}: run bench/studies/ann_candidates.py "
                         "--encode-only first")
    real = np.concatenate([np.load(f) for f in files]).astype(np.float32)[:args.n]
    rnd = np.random.default_rng(0).standard_normal(real.shape).astype(np.float32)
    rnd /= np.linalg.norm(rnd, axis=1, keepdims=True)
    print(f"{len(real):,} vectors a build, ef_construction {EF_CONSTRUCTION}, one thread")
    for name, data in (("real", real), ("random", rnd)):
        for m in sorted({16, M}):
            print(f"  {name:6} M {m:2}: {build_cpu_s(data, m):6.1f} s of CPU", flush=True)


if __name__ == "__main__":
    main()
