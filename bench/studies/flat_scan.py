"""Quantized flat scans of one owner's vectors, beside the daemon's HNSW graphs (issue 21): a study.

Run by hand, not by CI. One owner holding a million random vectors is the one
case of issue 21 whose hybrid search misses 50 ms: the daemon searches its ten
graphs of 100,000 at ef 1,024 and the vector leg alone takes 84 ms p50
(bench/search.py --sizes 1000000 --owners one, docs/operations.md). On random
384-d vectors HNSW has no neighbourhood to follow, so a search at that beam
computes about as many distances as a scan of every row. This study measures
what a scan costs when it reads fewer bytes a row: for each size in
``--sizes``, over the same unit vectors and queries,

* ``numpy f32``: ``X @ q`` on the float32 rows and ``argpartition``, exact;
* faiss-cpu ``IndexFlatIP`` (float32), exact;
* faiss-cpu ``IndexScalarQuantizer`` with 8-bit and float16 codes, whose top
  ``--fetch`` candidates are ranked again by their float32 dot products (what
  the daemon would return), at 1 and 2 faiss threads (faiss splits a search
  by query, so one query runs on one thread either way);
* the float16 scan split in two halves of the rows, searched at once on two
  Python threads (faiss lets go of Python's lock) and merged before the rerank:
  what scanning one owner's rows in parts on the machine's two cores gives;
* memoryd's own flat owner (store/annindex/flat.py, what the daemon does past
  ``vector_index_flat_rows``): signed 8-bit codes in a slice a core, each
  slice's best ranked again by float16 vectors;

each with recall@10 against the exact top 10 (numpy, in blocks), p50 / p95 of
single-query searches (the daemon searches one query at a time) and the bytes a
row takes in the index.

Vectors: ``random`` (the default; standard normal rows, normalised, as the
benches' random stores are) or ``real``: all-MiniLM-L6-v2 sentence vectors from
bench/_corpus.py's cache (its first ``--queries`` vectors are the queries, the
``n`` after them the rows; encode them first, see bench/_corpus.py).

faiss-cpu is a memoryd dependency since the flat owners (2026-12-07); without
it only the numpy scan runs, and the output says so.

    .venv/bin/python bench/studies/flat_scan.py                       # 100k and 1M random
    .venv/bin/python bench/studies/flat_scan.py --sizes 1000000 --vectors real
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ann_million_real import exact_topk, recall_ids

import _corpus

DIM = _corpus.DIM
K = 10

Search = Callable[[np.ndarray], np.ndarray]


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def load_vectors(kind: str, n: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, queries) of unit vectors."""
    if kind == "random":
        rng = np.random.default_rng(seed)
        return unit_rows(rng, n), unit_rows(rng, queries)
    # The benches' real vectors, read (and refused when not encoded yet) as their stores read them.
    corpus = _corpus.Corpus(n + queries, seed, "real")
    vecs = next(corpus.vector_chunks(n + queries))
    return vecs[queries:], vecs[:queries]


def numpy_scan(rows: np.ndarray) -> Search:
    def search(q: np.ndarray) -> np.ndarray:
        scores = rows @ q
        top = np.argpartition(-scores, K - 1)[:K]
        return top[np.argsort(-scores[top])]
    return search


def reranked(rows: np.ndarray, candidates: Callable[[np.ndarray], np.ndarray]) -> Search:
    """The candidates ranked again by their float32 dot products: the top K."""
    def search(q: np.ndarray) -> np.ndarray:
        cand = candidates(q)
        cand = cand[cand >= 0]
        return cand[np.argsort(-(rows[cand] @ q))][:K]
    return search


def faiss_methods(rows: np.ndarray, fetch: int, threads: list[int]) -> list[tuple[str, Any, Search]]:
    """(label, setup, search) for each faiss index; ``setup`` sets the thread count."""
    import faiss  # type: ignore[import-not-found]

    def scalar_index(part: np.ndarray, qtype: Any) -> Any:
        """A scalar-quantized inner-product index of ``part``, trained on its first 100,000 rows."""
        index = faiss.IndexScalarQuantizer(DIM, qtype, faiss.METRIC_INNER_PRODUCT)
        index.train(part[:100_000])
        index.add(part)
        return index

    methods: list[tuple[str, Any, Search]] = []
    built: list[tuple[str, Any, int]] = []
    flat = faiss.IndexFlatIP(DIM)
    flat.add(rows)
    built.append(("faiss flat f32", flat, K))
    for label, qtype in (("faiss SQ8", faiss.ScalarQuantizer.QT_8bit),
                         ("faiss SQ fp16", faiss.ScalarQuantizer.QT_fp16)):
        built.append((f"{label}, top {fetch} reranked", scalar_index(rows, qtype), fetch))
    middle = len(rows) // 2
    halves = [(lo, scalar_index(rows[lo:hi], faiss.ScalarQuantizer.QT_fp16))
              for lo, hi in ((0, middle), (middle, len(rows)))]
    pool = ThreadPoolExecutor(max_workers=2)

    def half_candidates(part: tuple[int, Any], q: np.ndarray) -> np.ndarray:
        ids = np.asarray(part[1].search(q[None, :], fetch)[1][0])
        return ids[ids >= 0] + part[0]  # faiss pads a short answer with -1

    def halves_candidates(q: np.ndarray) -> np.ndarray:
        return np.concatenate(list(pool.map(lambda part: half_candidates(part, q), halves)))

    for label, index, k in built:
        def candidates(q: np.ndarray, index: Any = index, k: int = k) -> np.ndarray:
            return np.asarray(index.search(q[None, :], k)[1][0])
        search = candidates if k == K else reranked(rows, candidates)
        for n_threads in threads:
            methods.append((f"{label}, {n_threads} thread{'s' if n_threads > 1 else ''}",
                            (faiss.omp_set_num_threads, n_threads, index), search))
    methods.append((f"faiss SQ fp16, two halves on two threads, top {fetch} reranked",
                    (faiss.omp_set_num_threads, 1, halves[0][1]), reranked(rows, halves_candidates)))
    methods.append(memoryd_flat(rows, faiss.omp_set_num_threads))
    return methods


def memoryd_flat(rows: np.ndarray, set_threads: Callable[[int], None]) -> tuple[str, Any, Search]:
    """What the daemon does for an owner past vector_index_flat_rows (store/annindex/flat.py):
    8-bit codes in a slice a core, searched side by side, each slice's best ranked again by
    float16, returned in float16's order (not reranked here in float32)."""
    from memoryd.store.annindex.flat import FlatOwner
    from memoryd.store.annindex.parts import search_side_by_side

    owner = FlatOwner(1, DIM)
    for start in range(0, len(rows), 50_000):
        owner.add(list(range(start, min(start + 50_000, len(rows)))), rows[start:start + 50_000])

    def search(q: np.ndarray) -> np.ndarray:
        found = [hit for part in search_side_by_side([(part, 0) for part in owner.parts], q, K, None)
                 for hit in part]
        found.sort(key=lambda h: h[1])
        return np.array([label for label, _ in found[:K]], dtype=np.int64)

    part = owner.parts[0]
    row_bytes = SimpleNamespace(code_size=part.code_size + part.fine.itemsize * DIM)
    return (f"memoryd flat owner: 8-bit codes, {len(owner.parts)} slices side by side, float16 rerank",
            (set_threads, 1, row_bytes), search)


def measure(search: Search, queries: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    for q in queries[:3]:
        search(q)  # warm the caches and the thread pool
    times, found = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(search(q))
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "recall_at_10": recall_ids(found, exact)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000", help="comma-separated row counts")
    p.add_argument("--queries", type=int, default=60, help="single-query searches per method")
    p.add_argument("--vectors", choices=_corpus.KINDS, default="random")
    p.add_argument("--fetch", type=int, default=100,
                   help="candidates a quantized scan returns to be ranked again in float32")
    p.add_argument("--threads", default="1,2", help="faiss thread counts to measure")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures here")
    args = p.parse_args()
    if args.fetch < K:
        p.error(f"--fetch must be at least {K}")
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    try:
        import faiss  # noqa: F401
        have_faiss = True
    except ImportError:
        have_faiss = False
        print("faiss-cpu is not importable: only the numpy scan runs (see the docstring)")
    results: dict[str, Any] = {"vectors": args.vectors, "queries": args.queries, "fetch": args.fetch,
                               "sizes": {}}
    for n in sizes:
        rows, queries = load_vectors(args.vectors, n, args.queries, args.seed)
        exact = exact_topk(rows, queries, None)[0]
        print(f"\n{n:,} {args.vectors} unit vectors, {args.queries} queries, single-query p50 / p95 ms")
        print(f"  {'method':<70} {'bytes/row':>9} {'p50':>8} {'p95':>8} {'recall@10':>9}")
        methods: list[tuple[str, Any, Search]] = [("numpy f32 (BLAS matvec), exact", None, numpy_scan(rows))]
        if have_faiss:
            methods += faiss_methods(rows, args.fetch, threads)
        figures: dict[str, Any] = {}
        for label, setup, search in methods:
            row_bytes = DIM * 4
            if setup is not None:
                set_threads, n_threads, index = setup
                set_threads(n_threads)
                row_bytes = int(getattr(index, "code_size", DIM * 4))
            fig = measure(search, queries, exact) | {"bytes_per_row": row_bytes}
            figures[label] = fig
            print(f"  {label:<70} {row_bytes:>9} {fig['p50_ms']:>8.1f} {fig['p95_ms']:>8.1f} "
                  f"{fig['recall_at_10']:>9.3f}", flush=True)
        results["sizes"][str(n)] = figures
        del rows, methods
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
