"""The daemon's HNSW graphs at up to 1,000,000 real all-MiniLM-L6-v2 vectors (issue 21): a study.

Run by hand, not by CI. Issue 21 asks for vector recall@10 >= 0.95 against
exact search on real all-MiniLM-L6-v2 vectors at 1,000,000 memories. This
study measures it with memoryd's own graphs: ``OwnerGraphs`` (src/memoryd/store/
annindex/parts.py), which splits one owner's rows into ``OwnerIndex`` graphs
(graph.py: hnswlib, space "cosine", the module's M and EF_CONSTRUCTION) of at most
``--part-rows`` vectors searched side by side, or with ``--part-rows 0`` one
``OwnerIndex`` for every row (the daemon before the split); rows are added in
``index_set.BUILD_CHUNK`` batches on 2 threads as ``AnnSet.build`` does; and:

* exact top-10 of every query by numpy (float32 matrix products in blocks),
  (a) for one owner holding every row, no filter, and (b) for a reader who sees
  a fixed random 25 % of the rows, the filter running *inside* the graph walk
  as ``AnnSet._kind_filter`` builds it (a Python callable over a code array),
  never a post-filter;
* the build: wall time, RSS growth, the saved file's size;
* recall@10 against exact, and p50/p95 single-query latency, at the daemon's
  search ef (``AnnSet``'s default ``ef``) and at ef 256 and 1024, for (a) and (b).

Base texts are *sentences*, because encoding whole notes runs at 10-60 texts/s
on this machine: the conversation turns of tests/data/conversations/ (as
bench/studies/ann_candidates.py reads them) and bench/_harness.dev_notes()
(10,000 notes per batch, each batch with its own start offset), split on ". ",
"; " and newlines, keeping pieces of at least 4 words, exact duplicates dropped,
up to ``--n`` (default 1,000,000). The stream is deterministic, so the first
``n`` texts are the same for any ``--n``. Queries: ann_candidates.query_texts()
(the conversation set's questions and 500 of bench/search.py's).

Encoding: the bundled model through sentence-transformers (HF_HUB_OFFLINE=1,
normalize_embeddings=True, batch_size 128, each chunk's texts sorted by length
before batching), in chunks of 50,000 cached as .npy under
bench/results/ann_million_cache/ (git-ignored) with manifest.json recording each
chunk's text hash, so a rerun or a larger ``--n`` resumes. Run the encoding
niced: the machine has 2 cores shared with test suites.

    nice -n 10 .venv/bin/python bench/studies/ann_million_real.py --encode-only      # 1M, resumable
    .venv/bin/python bench/studies/ann_million_real.py --n 300000                     # measure 300k
    .venv/bin/python bench/studies/ann_million_real.py --help

Measuring uses the vectors cached so far: with ``--n`` larger than the cache
and ``--no-encode`` it measures at the largest full-chunk size available.
Results: bench/results/ann_million_real.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "studies"))

import ann_candidates as cand  # noqa: E402

import _harness as h  # noqa: E402
from _corpus import (  # noqa: E402
    CACHE,
    CHUNK,
    MANIFEST,
    cached_chunk,
    cached_texts,
    cached_vectors,
    digest,
    load_manifest,
)

RESULTS = BENCH / "results" / "ann_million_real.json"
BATCH = 128
DIM = 384
NOTES_PER_BATCH = 10_000
MIN_WORDS = 4
SPLIT = re.compile(r"\. |; |\n")
K = 10
FILTER_FRACTION = 0.25
FILTER_SEED = 21


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- texts ------------------------------------------------------------------------------------
def sentences(text: str) -> Iterator[str]:
    """The pieces of ``text`` split on ". ", "; " and newlines that have at least MIN_WORDS words."""
    for piece in SPLIT.split(text):
        piece = piece.strip()
        if len(piece.split()) >= MIN_WORDS:
            yield piece


def base_texts(n: int) -> list[str]:
    """The first ``n`` distinct sentences, from the cache's texts file if one holds that many."""
    cached = cached_texts(n)
    if cached is not None:
        return cached
    texts = make_base_texts(n)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = CACHE / "texts.tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(t + "\n" for t in texts)
    os.replace(tmp, CACHE / f"texts-{n}.txt")
    return texts


def make_base_texts(n: int) -> list[str]:
    """The first ``n`` distinct sentences: conversation turns first, then developer notes."""
    seen: set[str] = set()
    out: list[str] = []

    def take(texts: list[str]) -> bool:
        for text in texts:
            for s in sentences(text):
                if s not in seen:
                    seen.add(s)
                    out.append(s)
                    if len(out) >= n:
                        return True
        return False

    turns, _ = cand.conversation_texts()
    if take(turns):
        return out
    start = 0
    while True:
        if take(h.dev_notes(NOTES_PER_BATCH, start=start)):
            return out
        start += NOTES_PER_BATCH


# -- encoding ---------------------------------------------------------------------------------
def encode_sorted(texts: list[str]) -> np.ndarray:
    """Unit vectors of ``texts`` (in their order), encoded in length-sorted batches of BATCH."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    vecs = cand._model().encode([texts[i] for i in order], batch_size=BATCH, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False)
    out = np.empty((len(texts), DIM), dtype=np.float32)
    out[np.asarray(order)] = np.asarray(vecs, dtype=np.float32)
    return out


def save_manifest(manifest: dict[str, Any]) -> None:
    tmp = MANIFEST.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, MANIFEST)


def encode_base(texts: list[str], encode: bool) -> np.ndarray:
    """Vectors of ``texts`` by chunks of CHUNK from the cache, encoding missing chunks if ``encode``.

    Without ``encode`` it stops at the first chunk not cached (full chunks only)."""
    if not encode:
        cached = cached_vectors(texts)
        if len(cached) < len(texts):
            log(f"chunk {len(cached) // CHUNK} not cached: stopping at {len(cached):,} vectors")
        return cached
    CACHE.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest()
    parts: list[np.ndarray] = []
    started = time.perf_counter()
    new = 0
    for i, lo in enumerate(range(0, len(texts), CHUNK)):
        chunk = texts[lo:lo + CHUNK]
        vecs = cached_chunk(manifest, i, chunk)
        if vecs is None:
            t0 = time.perf_counter()
            vecs = encode_sorted(chunk)
            path = CACHE / f"chunk-{i:04d}.npy"
            np.save(path.with_suffix(".tmp.npy"), vecs)
            os.replace(path.with_suffix(".tmp.npy"), path)
            manifest["chunks"][str(i)] = {"hash": digest(chunk), "count": len(chunk),
                                          "seconds": round(time.perf_counter() - t0, 1),
                                          "mean_chars": round(sum(map(len, chunk)) / len(chunk), 1)}
            save_manifest(manifest)
            new += len(chunk)
            rate = new / (time.perf_counter() - started)
            left = (len(texts) - lo - len(chunk)) / rate
            this = len(chunk) / (time.perf_counter() - t0)
            log(f"encoded chunk {i}: {lo + len(chunk):,}/{len(texts):,} ({this:.0f} texts/s this chunk, "
                f"{rate:.0f} overall, ETA {left / 60:.0f} min, load {os.getloadavg()[0]:.1f})")
        parts.append(vecs)
    return np.concatenate(parts) if parts else np.zeros((0, DIM), dtype=np.float32)


def query_vectors(encode: bool) -> tuple[list[str], np.ndarray]:
    texts = cand.query_texts()
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"queries-{digest(texts)}.npy"
    if path.exists():
        return texts, np.load(path)
    if not encode:
        raise SystemExit("query vectors not cached: run without --no-encode")
    vecs = encode_sorted(texts)
    np.save(path, vecs)
    return texts, vecs


# -- measuring --------------------------------------------------------------------------------
def rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def exact_topk(base: np.ndarray, queries: np.ndarray, rows: np.ndarray | None,
               k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """(labels, cosines) of the exact ``k`` nearest of every query among ``rows`` (None: all).

    Float32 matrix products over blocks of queries and of base rows, keeping a running top-k."""
    sub = base if rows is None else base[rows]
    labels = np.zeros((len(queries), k), dtype=np.int64)
    sims_out = np.zeros((len(queries), k), dtype=np.float32)
    qb, bb = 64, 250_000
    for qi in range(0, len(queries), qb):
        q = queries[qi:qi + qb]
        best_i = np.zeros((len(q), 0), dtype=np.int64)
        best_s = np.zeros((len(q), 0), dtype=np.float32)
        for bi in range(0, len(sub), bb):
            sims = q @ sub[bi:bi + bb].T
            kk = min(k, sims.shape[1])
            part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
            best_i = np.concatenate([best_i, part + bi], axis=1)
            best_s = np.concatenate([best_s, np.take_along_axis(sims, part, axis=1)], axis=1)
            keep = np.argsort(-best_s, axis=1, kind="stable")[:, :k]
            best_i = np.take_along_axis(best_i, keep, axis=1)
            best_s = np.take_along_axis(best_s, keep, axis=1)
        labels[qi:qi + len(q)] = best_i if rows is None else rows[best_i]
        sims_out[qi:qi + len(q)] = best_s
    return labels, sims_out


def build_graph(base: np.ndarray, threads: int, part_rows: int) -> tuple[Any, dict[str, Any]]:
    """The daemon's graphs of one owner holding every row, added as AnnSet.build adds
    (BUILD_CHUNK labels a call): OwnerGraphs in parts of ``part_rows``, or with ``part_rows`` 0
    one OwnerIndex (the daemon before parts)."""
    from memoryd.store.annindex.graph import OwnerIndex
    from memoryd.store.annindex.index_set import BUILD_CHUNK
    from memoryd.store.annindex.parts import OwnerGraphs

    gc.collect()
    before = rss()
    load0 = os.getloadavg()[0]
    graph: Any = (OwnerGraphs(1, base.shape[1], part_rows=part_rows) if part_rows
                  else OwnerIndex(1, base.shape[1]))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    last = t0
    for lo in range(0, len(base), BUILD_CHUNK):
        hi = min(lo + BUILD_CHUNK, len(base))
        graph.add(list(range(lo, hi)), base[lo:hi], threads=threads)
        if hi % 50_000 == 0 or hi == len(base):
            now = time.perf_counter()
            rate = hi / (now - t0)
            log(f"  build {hi:,}/{len(base):,} ({rate:.0f} vectors/s overall, "
                f"ETA {(len(base) - hi) / rate / 60:.1f} min, load {os.getloadavg()[0]:.1f})")
            last = now
    build_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0
    del last
    gc.collect()
    grown = rss() - before
    parts = graph.parts if part_rows else [graph]
    with tempfile.TemporaryDirectory(prefix="ann-million-", dir=str(BENCH / "results")) as d:
        t1 = time.perf_counter()
        file_bytes = 0
        for i, part in enumerate(parts):
            path = Path(d) / f"owner-1-{i}.1.hnsw"
            part.save(path)
            file_bytes += path.stat().st_size
            part.path = None  # the file goes with the directory
            part.file_labels = None
        save_s = time.perf_counter() - t1
    info = {"vectors": len(base), "threads": threads, "build_chunk": BUILD_CHUNK,
            "part_rows": part_rows, "parts": len(parts),
            "build_s": round(build_s, 1), "build_cpu_s": round(cpu_s, 1),
            "vectors_per_s": round(len(base) / build_s, 1), "rss_growth_bytes": grown,
            "rss_growth_bytes_per_vector": round(grown / len(base), 1), "file_bytes": file_bytes,
            "file_bytes_per_vector": round(file_bytes / len(base), 1), "save_s": round(save_s, 2),
            "load_at_start": round(load0, 2), "load_at_end": round(os.getloadavg()[0], 2)}
    return graph, info


Found = tuple[list[np.ndarray], list[np.ndarray], list[float]]


def search_all(graph: Any, queries: np.ndarray, ef: int, allowed: Callable[[int], bool] | None) -> Found:
    """Labels, cosines and wall seconds of one single-query search per query, as the daemon searches."""
    found: list[np.ndarray] = []
    cosines: list[np.ndarray] = []
    times: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        hits = graph.search(q, K, ef, allowed)
        times.append(time.perf_counter() - t0)
        found.append(np.array([label for label, _ in hits], dtype=np.int64))
        cosines.append(np.array([1.0 - d for _, d in hits], dtype=np.float32))
    return found, cosines, times


def recall_ids(found: list[np.ndarray], truth: np.ndarray) -> float:
    hits = sum(len(set(f[:K].tolist()) & set(t[:K].tolist())) for f, t in zip(found, truth, strict=True))
    return hits / (len(truth) * K)


def recall_by_distance(cosines: list[np.ndarray], truth_sims: np.ndarray, tol: float = 1e-5) -> float:
    """Share of returned hits at least as close as the exact 10th (ties and near-duplicates count)."""
    hits = sum(int(np.sum(c[:K] >= t[K - 1] - tol)) for c, t in zip(cosines, truth_sims, strict=True))
    return hits / (len(truth_sims) * K)


def ms(times: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(times), q)) * 1000.0, 3)


def daemon_ef() -> int:
    """The daemon's search ef: AnnSet's default ``ef``."""
    from memoryd.store.annindex.index_set import AnnSet

    return int(inspect.signature(AnnSet.__init__).parameters["ef"].default)


def daemon_part_rows() -> int:
    """The daemon's graph size: AnnSet's default ``part_rows``."""
    from memoryd.store.annindex.index_set import AnnSet

    return int(inspect.signature(AnnSet.__init__).parameters["part_rows"].default)


def measure(base: np.ndarray, queries: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    from memoryd.store.annindex import graph as ann

    n = len(base)
    if args.queries:
        queries = queries[:args.queries]
    rng = np.random.default_rng(FILTER_SEED)
    mask = rng.random(n) < FILTER_FRACTION
    rows = np.nonzero(mask)[0]
    # As AnnSet._kind_filter: a code per label in an array, a Python callable comparing it.
    kind_code = np.where(mask, 1, 2).astype(np.uint8)
    want = 1

    def allowed(label: int) -> bool:
        return int(kind_code[label]) == want

    log(f"exact top-{K}: {len(queries)} queries over {n:,} rows (all) and {len(rows):,} (25 % filter)")
    t0 = time.perf_counter()
    truth = {"all": exact_topk(base, queries, None), "25%": exact_topk(base, queries, rows)}
    exact_s = time.perf_counter() - t0
    log(f"exact: {exact_s:.1f} s for both sets ({exact_s / (2 * len(queries)) * 1000:.1f} ms a query)")

    split = f"parts of {args.part_rows:,}" if args.part_rows else "one graph"
    log(f"build: M {ann.M}, ef_construction {ann.EF_CONSTRUCTION}, {args.threads} threads, {split}")
    graph, build = build_graph(base, args.threads, args.part_rows)
    log(f"build: {build['build_s']:.0f} s ({build['vectors_per_s']:.0f}/s), RSS +"
        f"{build['rss_growth_bytes'] / 2**20:.0f} MiB, file {build['file_bytes'] / 2**20:.0f} MiB")

    n_conv = min(len(cand.conversation_texts()[1]), len(queries))
    # How crowded each query's neighbourhood is: the exact 1st and 10th cosines, by query set.
    crowd = {}
    for name, (_, sims) in truth.items():
        for group, sl in (("conversation", slice(0, n_conv)), ("dev", slice(n_conv, None))):
            crowd[f"{name}/{group}"] = {"exact_1st_cos_mean": round(float(sims[sl, 0].mean()), 4),
                                        "exact_10th_cos_mean": round(float(sims[sl, K - 1].mean()), 4),
                                        "1st_minus_10th_mean": round(float((sims[sl, 0] - sims[sl, K - 1])
                                                                           .mean()), 4)}
    log(f"neighbourhoods: {json.dumps(crowd)}")
    d_ef = daemon_ef()
    efs = [int(e) for e in args.efs.split(",")] if args.efs else sorted({256, d_ef, 1024})
    rows_out: list[dict[str, Any]] = []
    for ef in efs:
        for name, filt in (("all", None), ("25%", allowed)):
            search_all(graph, queries[:20], ef, filt)  # warm the caches
            load = os.getloadavg()[0]
            found, cosines, times = search_all(graph, queries, ef, filt)
            labels, sims = truth[name]
            row = {"ef": ef, "daemon_ef": ef == d_ef, "filter": name, "queries": len(queries),
                   "recall@10": round(recall_ids(found, labels), 4),
                   "recall@10_by_distance": round(recall_by_distance(cosines, sims), 4),
                   "recall@10_within_0.001": round(recall_by_distance(cosines, sims, 1e-3), 4),
                   "recall@10_within_0.01": round(recall_by_distance(cosines, sims, 1e-2), 4),
                   "short_results": int(sum(len(f) < K for f in found)),
                   "p50_ms": ms(times, 50), "p95_ms": ms(times, 95), "mean_ms": round(
                       float(np.mean(times)) * 1000, 3), "load": round(load, 2)}
            # By query set: the conversation questions (first) and bench/search.py's.
            for group, sl in (("conversation", slice(0, n_conv)), ("dev", slice(n_conv, None))):
                row[f"recall@10_{group}"] = round(recall_ids(found[sl], labels[sl]), 4)
            rows_out.append(row)
            log(f"  ef {ef:4} {name:>4}: recall@10 {row['recall@10']:.4f} (by distance "
                f"{row['recall@10_by_distance']:.4f}), p50 {row['p50_ms']:.2f} ms, "
                f"p95 {row['p95_ms']:.2f} ms")
    return {"n": n, "queries": len(queries), "M": ann.M, "ef_construction": ann.EF_CONSTRUCTION,
            "part_rows": args.part_rows, "parts": build["parts"],
            "daemon_search_ef": d_ef, "filter_fraction": FILTER_FRACTION, "filter_rows": len(rows),
            "conversation_queries": n_conv, "neighbourhoods": crowd,
            "exact_s": round(exact_s, 1), "build": build, "rows": rows_out}


def table(result: dict[str, Any]) -> None:
    b = result["build"]
    print()
    split = ("one graph (OwnerIndex)" if not result.get("part_rows")
             else f"{result['parts']} graphs of up to {result['part_rows']:,} (OwnerGraphs)")
    print(f"{split}, hnswlib M {result['M']}, ef_construction {result['ef_construction']}, over "
          f"{result['n']:,} real all-MiniLM-L6-v2 sentence vectors, {result['queries']} queries")
    print(f"build {b['build_s']:.0f} s on {b['threads']} threads ({b['vectors_per_s']:.0f} vectors/s), "
          f"RSS +{b['rss_growth_bytes'] / 2**20:.0f} MiB ({b['rss_growth_bytes_per_vector']:.0f} B/vector), "
          f"file {b['file_bytes'] / 2**20:.0f} MiB ({b['file_bytes_per_vector']:.0f} B/vector), "
          f"save {b['save_s']:.1f} s")
    print(f"{'ef':>5} {'filter':>7} {'recall@10':>10} {'by dist':>8} {'±0.001':>7} {'±0.01':>6} {'conv':>6} "
          f"{'dev':>6} {'short':>6} {'p50 ms':>8} {'p95 ms':>8} {'load':>5}")
    for r in result["rows"]:
        mark = "*" if r["daemon_ef"] else " "
        print(f"{r['ef']:>4}{mark} {r['filter']:>7} {r['recall@10']:10.4f} {r['recall@10_by_distance']:8.4f} "
              f"{r['recall@10_within_0.001']:7.4f} {r['recall@10_within_0.01']:6.4f} "
              f"{r['recall@10_conversation']:6.4f} {r['recall@10_dev']:6.4f} {r['short_results']:6} "
              f"{r['p50_ms']:8.2f} {r['p95_ms']:8.2f} {r['load']:5.1f}")
    print("* the daemon's search ef; 'by dist': a hit counts if it is as close as the exact 10th "
          "(±0.001, ±0.01: within that cosine of it); conv/dev: recall@10 of the conversation "
          f"questions ({result['conversation_queries']}) and of bench/search.py's")


def encoding_info(n: int) -> dict[str, Any]:
    """What the manifest says of the chunks under ``n``: encoding seconds and throughput."""
    chunks = load_manifest()["chunks"]
    used = [chunks[str(i)] for i in range((n + CHUNK - 1) // CHUNK) if str(i) in chunks]
    secs = sum(c.get("seconds", 0.0) for c in used)
    count = sum(c["count"] for c in used)
    return {"chunks": len(used), "texts": count, "seconds": round(secs, 1),
            "texts_per_s": round(count / secs, 1) if secs else None, "batch_size": BATCH, "niced": True}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000, help="base sentences (default 1,000,000)")
    p.add_argument("--encode-only", action="store_true",
                   help="encode (and cache) the vectors, measure nothing")
    p.add_argument("--no-encode", action="store_true",
                   help="measure only what is cached (full chunks, up to --n); encode nothing")
    p.add_argument("--efs", type=str, default="",
                   help="search efs, comma-separated (default: 256, the daemon's, 1024)")
    p.add_argument("--queries", type=int, default=0, help="use only the first N queries (0: all)")
    p.add_argument("--threads", type=int, default=2, help="build threads (the daemon's AnnSet: 2)")
    p.add_argument("--part-rows", type=int, default=daemon_part_rows(),
                   help="vectors per graph, as the daemon splits a large owner (default: the daemon's, "
                        "%(default)s); 0: one graph for every row, as before the split")
    p.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    args = p.parse_args()

    # Chunks are whole CHUNK slices of one deterministic stream: an --n between two chunk
    # boundaries reads (or encodes) the whole last chunk and uses its first rows.
    whole = (args.n + CHUNK - 1) // CHUNK * CHUNK
    log(f"texts: building {whole:,} sentences")
    t0 = time.perf_counter()
    texts = base_texts(whole)
    log(f"texts: {len(texts):,} in {time.perf_counter() - t0:.1f} s, mean "
        f"{sum(map(len, texts)) / max(1, len(texts)):.0f} chars")
    _, queries = query_vectors(not args.no_encode)
    base = encode_base(texts, not args.no_encode)[:args.n]
    log(f"vectors: {len(base):,} base, {len(queries):,} queries")
    if args.encode_only or not len(base):
        return
    used = texts[:len(base)]
    del texts
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    result = measure(base, queries, args)
    turns, _ = cand.conversation_texts()
    result.update({
        "requested_n": args.n, "texts": "sentences (split on '. ', '; ', newlines; >= 4 words; distinct) "
        "of tests/data/conversations turns, then bench/_harness.dev_notes()",
        "conversation_sentences": len({s for t in turns for s in sentences(t)}),
        "mean_chars": round(sum(map(len, used)) / len(used), 1),
        "encoding": encoding_info(len(base)), "cpus": os.cpu_count(), "platform": platform.platform(),
        "started": started, "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    table(result)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
