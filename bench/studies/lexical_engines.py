"""Can tantivy be memoryd's second lexical index? (issue 21, item 2): a study.

Run by hand, not by CI. FTS5 ranks every match of a query by BM25 (about 5-10
us a matching row at a million memories), so a common word costs ~100-200 ms
before anything else happens. This study measures tantivy (tantivy-py 0.27,
``.venv/bin/python -m pip install tantivy``; not a memoryd dependency) beside
FTS5 on the same texts, in the same process, against the four rules of
DESIGN.md "Indexes beside the store of record":

* build: the texts of a kept bench store (``--db``, opened read-only through
  memoryd.store.driver; else bench/_harness.dev_notes with bench/search.py's
  owners), indexed with fields ``seq`` (u64, indexed + fast), ``scope_key``
  (raw string ``scope:owner``), ``status`` (raw) and ``content`` (text, not
  stored, analyzer: simple tokenizer, lowercase, ascii_fold, English
  stemmer); build time, files' size, RSS, segments;
* latency: top-200 BM25 for bench/search.py's queries (query_terms(): the
  words minus QUERY_STOPWORDS, OR-ed), (a) unscoped, (b) scoped inside the
  query (the reader's three scope keys and status 'active' as non-scoring
  must-clauses), interleaved query by query with FTS5's raw ranked MATCH of
  the daemon's own expression (``ORDER BY bm25 LIMIT 200``), in rounds;
  ranking agreement: the overlap of tantivy's top 10/20 with FTS5's, plain and
  tie-aware (a tantivy hit counts when FTS5 scores it at least as high as its
  own 10th/20th), unscoped and scoped (FTS5's top 200 filtered by scope, what
  the daemon's first fetch returns);
* the same at 100k (the first 100k texts; FTS5 in a temp database built from
  them with memoryd's tokenizer), to compare with today's 100k figures;
* erasure: a marker word put into one text before the build; after the
  document is deleted by seq: does the marker stay in the index (term
  dictionary via terms_with_prefix/doc_freq, raw bytes of every file) after
  commit, garbage_collect_files() and wait_merging_threads()? tantivy-py 0.27's
  IndexWriter has no merge() and no merge-policy setting, so the alternative
  measured is sharding by seq range: a forget rebuilds the one shard holding
  the row (rebuild time) and a search queries every shard (latency);
* crash: a child process adds and commits batches; it is killed with SIGKILL
  at random moments; the index must reopen with a whole number of batches, a
  new writer must open (the lock goes with the process), and the last seq it
  holds is read back from the fast field (what a catch-up would start from).

    .venv/bin/python bench/studies/lexical_engines.py
    .venv/bin/python bench/studies/lexical_engines.py --n 200000 --skip-100k --shard-rows 0

Results: bench/results/lexical_engines.json (not committed).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import _harness as h  # noqa: E402
from memoryd.store.driver import connect  # noqa: E402
from memoryd.store.search_request import query_terms  # noqa: E402
from memoryd.store.sqlite.lexical import fts_match  # noqa: E402
from search import READER, owner_of, queries  # noqa: E402

DEFAULT_DB = "/tmp/mdb-search1000000-z1sg9ng2/data/memoryd.db"
MARKER = "zqxjmarker"
FETCH = 200
TOKENIZER = "memoryd_en"
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
#: The reader of bench/search.py (agent-00, user-0) sees these scope keys.
READER_KEYS = (f"agent:{READER['agent_id']}", f"user:{READER['user_id']}", "org:")


# -- texts ---------------------------------------------------------------------------
def load_texts(db: str | None, n: int) -> list[tuple[int, str, str, str]]:
    """(seq, content, scope_key, status) of the first ``n`` memories, by seq."""
    if db and Path(db).exists():
        conn = connect(db)
        conn.execute("PRAGMA query_only = ON")
        rows = conn.execute(
            "SELECT seq, content, scope || ':' || owner, status FROM memories "
            "WHERE content IS NOT NULL ORDER BY seq LIMIT ?", (n,)).fetchall()
        conn.close()
        return [(int(s), c, k, st) for s, c, k, st in rows]
    out = []
    for i, text in enumerate(h.dev_notes(n)):
        scope, owner, _ = owner_of(i)
        out.append((i + 1, text, f"{scope}:{owner}", "active"))
    return out


Row = tuple[int, str, str, str]


def with_marker(texts: list[Row], at: int) -> tuple[list[Row], int]:
    """The texts with MARKER appended to row ``at``'s content (for tantivy only); its seq."""
    seq, content, key, status = texts[at]
    out = list(texts)
    out[at] = (seq, f"{content} {MARKER}", key, status)
    return out, seq


# -- tantivy ---------------------------------------------------------------------------
def analyzer() -> Any:
    import tantivy

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def schema(index_option: str = "position") -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("seq", stored=False, indexed=True, fast=True)
    sb.add_text_field("scope_key", tokenizer_name="raw")
    sb.add_text_field("status", tokenizer_name="raw")
    # scope_key|status in one raw term: scope and status as one should-clause of (keys x statuses).
    sb.add_text_field("vis", tokenizer_name="raw")
    sb.add_text_field("content", stored=False, tokenizer_name=TOKENIZER, index_option=index_option)
    return sb.build()


def open_index(path: Path, index_option: str = "position") -> Any:
    import tantivy

    if (path / "meta.json").exists():
        index = tantivy.Index.open(str(path))  # its own schema (index_option included)
    else:
        index = tantivy.Index(schema(index_option), path=str(path), reuse=True)
    index.register_tokenizer(TOKENIZER, analyzer())
    return index


def doc(seq: int, content: str, key: str, status: str) -> Any:
    """A tantivy document (seq added as u64 explicitly: a Python int in kwargs becomes i64)."""
    import tantivy

    d = tantivy.Document()
    d.add_unsigned("seq", seq)
    d.add_text("scope_key", key)
    d.add_text("status", status)
    d.add_text("vis", f"{key}|{status}")
    d.add_text("content", content)
    return d


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(path: Path, texts: Sequence[tuple[int, str, str, str]], *, index_option: str = "position",
          heap: int = 256_000_000, threads: int = 2) -> dict[str, Any]:
    """Index ``texts`` into a fresh directory; time, size, RSS, segments."""

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    index = open_index(path, index_option)
    writer = index.writer(heap_size=heap, num_threads=threads)
    peak = rss0
    for i, (seq, content, key, status) in enumerate(texts):
        writer.add_document(doc(seq, content, key, status))
        if i % 50_000 == 0:
            peak = max(peak, proc.memory_info().rss)
    t_add = time.perf_counter() - t0
    writer.commit()
    t_commit = time.perf_counter() - t0
    writer.wait_merging_threads()
    wall = time.perf_counter() - t0
    peak = max(peak, proc.memory_info().rss)
    index.reload()
    segs = index.searcher().num_segments
    return {"docs": len(texts), "index_option": index_option, "heap_bytes": heap, "threads": threads,
            "add_s": t_add, "commit_s": t_commit, "wall_s": wall, "cpu_s": time.process_time() - cpu0,
            "docs_per_s": len(texts) / wall if wall else 0.0, "bytes": dir_bytes(path),
            "rss_growth_bytes": peak - rss0, "segments": segs}


class Tantivy:
    """One tantivy index searched the way a lexical leg would search it."""

    def __init__(self, path: Path) -> None:
        self.index = open_index(path)
        self.index.reload()
        self.schema = self.index.schema
        self.an = analyzer()

    def text_query(self, query: str) -> Any:
        import tantivy

        terms = query_terms(query)
        if terms is None:
            return None
        tokens: list[str] = []
        for w in terms.words:
            tokens += [t for t in self.an.analyze(w) if t not in tokens]
        should = tantivy.Occur.Should
        return tantivy.Query.boolean_query(
            [(should, tantivy.Query.term_query(self.schema, "content", t)) for t in tokens])

    def scoped(self, text_q: Any, keys: Sequence[str]) -> Any:
        import tantivy

        Q = tantivy.Query
        should = tantivy.Occur.Should
        scope = Q.boolean_query([(should, Q.term_query(self.schema, "scope_key", k)) for k in keys])
        # Scope and status filter without scoring (const 0): a must-clause's own idf would reorder rows.
        return Q.boolean_query([
            (tantivy.Occur.Must, text_q),
            (tantivy.Occur.Must, Q.const_score_query(scope, 0.0)),
            (tantivy.Occur.Must, Q.const_score_query(Q.term_query(self.schema, "status", "active"), 0.0)),
        ])

    def vis_scoped(self, text_q: Any, keys: Sequence[str], statuses: Sequence[str] = ("active",)) -> Any:
        """Scope and status as one filter: the 'vis' terms of the reader's keys x the statuses."""
        import tantivy

        Q = tantivy.Query
        should = tantivy.Occur.Should
        vis = Q.boolean_query([(should, Q.term_query(self.schema, "vis", f"{k}|{st}"))
                               for k in keys for st in statuses])
        must = tantivy.Occur.Must
        return Q.boolean_query([(must, text_q), (must, Q.const_score_query(vis, 0.0))])

    def status_only(self, text_q: Any) -> Any:
        import tantivy

        Q = tantivy.Query
        return Q.boolean_query([
            (tantivy.Occur.Must, text_q),
            (tantivy.Occur.Must, Q.const_score_query(Q.term_query(self.schema, "status", "active"), 0.0))])

    def top(self, q: Any, limit: int = FETCH) -> list[tuple[int, float]]:
        """(seq, score) best first: the search, then the seqs from the fast field."""
        searcher = self.index.searcher()
        hits = searcher.search(q, limit=limit, count=False).hits
        seqs = searcher.fast_field_values("seq", [a for _, a in hits])
        return [(int(s), float(score)) for (score, _), s in zip(hits, seqs, strict=True)]


class ShardSet:
    """The index split into shards; a search asks each shard it may see and merges by score.

    A shard with a key (owner shards: one scope key, at most N rows) is asked only when the
    reader sees that key, with status filtered inside; a shard without one (seq-range shards)
    is always asked, with scope and status filtered inside."""

    def __init__(self, shards: Sequence[tuple[str | None, Path]]) -> None:
        self.shards = [(key, Tantivy(p)) for key, p in shards]

    def top(self, query: str, keys: Sequence[str], limit: int = FETCH) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        for key, s in self.shards:
            if key is not None and key not in keys:
                continue
            q = s.text_query(query)
            if q is None:
                return []
            out += s.top(s.status_only(q) if key is not None else s.vis_scoped(q, keys), limit)
        out.sort(key=lambda x: -x[1])
        return out[:limit]


def build_shards(tmp: Path, label: str, texts: Sequence[Row], rows: int,
                 by_owner: bool) -> tuple[ShardSet, dict[str, Any]]:
    """Seq-range shards of ``rows`` (by_owner: within each scope key); build time and size."""
    groups: dict[str | None, list[Row]] = {}
    for t in texts:
        groups.setdefault(t[2] if by_owner else None, []).append(t)
    t0 = time.perf_counter()
    shards: list[tuple[str | None, Path]] = []
    for key, group in groups.items():
        for i in range(0, len(group), rows):
            p = tmp / f"shard_{label}_{'owner' if by_owner else 'seq'}_{len(shards)}"
            build(p, group[i:i + rows], heap=64_000_000, threads=1)
            shards.append((key, p))
    info = {"count": len(shards), "rows_each_max": rows, "by_owner": by_owner,
            "build_wall_s": time.perf_counter() - t0, "bytes": sum(dir_bytes(p) for _, p in shards)}
    return ShardSet(shards), info


# -- FTS5 ------------------------------------------------------------------------------
class Fts:
    """FTS5's raw ranked MATCH (the daemon's inner statement of the lexical leg)."""

    SQL = ("SELECT rowid, bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH ? "
           "ORDER BY bm25(memories_fts) LIMIT ?")

    def __init__(self, db: str) -> None:
        self.conn = connect(db)
        self.conn.execute("PRAGMA query_only = ON")

    def top(self, query: str, limit: int = FETCH) -> list[tuple[int, float]]:
        match = fts_match(query)
        if match is None:
            return []
        return [(int(r), -float(s)) for r, s in self.conn.execute(self.SQL, (match, limit))]


def build_fts(path: Path, texts: Sequence[tuple[int, str, str, str]]) -> float:
    """A temp database with memoryd's FTS5 table over ``texts`` (rowid = seq); seconds."""
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    conn = connect(str(path))
    conn.execute(f"CREATE VIRTUAL TABLE memories_fts USING fts5(content, tokenize='{FTS_TOKENIZER}')")
    conn.executemany("INSERT INTO memories_fts(rowid, content) VALUES (?, ?)",
                     ((s, c) for s, c, _, _ in texts))
    conn.commit()
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
    conn.commit()
    conn.close()
    return time.perf_counter() - t0


# -- latency and agreement --------------------------------------------------------------
def overlap(a: Sequence[tuple[int, float]], b: Sequence[tuple[int, float]], k: int) -> tuple[float, float]:
    """(plain, tie-aware) share of a's top k that is in b's top k. Tie-aware: an item of a counts
    when b scores it at least as high as b's k-th (template texts tie a lot in BM25)."""
    top_a = [s for s, _ in a[:k]]
    top_b = {s for s, _ in b[:k]}
    if not top_a:
        return float("nan"), float("nan")
    plain = sum(1 for s in top_a if s in top_b) / min(k, len(top_a))
    if len(b) < k:
        return plain, plain
    cut = b[k - 1][1]
    score_b = dict(b)
    tie = sum(1 for s in top_a if score_b.get(s, float("-inf")) >= cut - 1e-9) / min(k, len(top_a))
    return plain, tie


def latency_run(tv: Tantivy, fts: Fts, qs: Sequence[str], rounds: int, keys_of: dict[int, str],
                shards: dict[str, ShardSet] | None = None) -> dict[str, Any]:
    """The series interleaved query by query, the order rotating; then agreement on the last round."""
    shards = shards or {}
    names = ["tantivy", "tantivy_scoped", "tantivy_vis", "fts5", *shards]
    times: dict[str, list[float]] = {n: [] for n in names}
    per_round: list[dict[str, float]] = []
    agree: dict[str, list[float]] = {n: [] for n in ("top10", "top10_tie", "top20", "top20_tie",
                                                    "scoped_top10", "scoped_top10_tie",
                                                    *(f"{n}_vs_single_top10" for n in shards))}
    matched: list[int] = []
    keys = set(READER_KEYS)
    for r in range(rounds):
        rt: dict[str, list[float]] = {n: [] for n in names}
        for i, q in enumerate(qs):
            order = names[i % len(names):] + names[:i % len(names)]
            got: dict[str, list[tuple[int, float]]] = {}
            for n in order:
                t0 = time.perf_counter()
                if n == "fts5":
                    got[n] = fts.top(q)
                elif n == "tantivy":
                    tq = tv.text_query(q)
                    got[n] = tv.top(tq) if tq is not None else []
                elif n == "tantivy_scoped":
                    tq = tv.text_query(q)
                    got[n] = tv.top(tv.scoped(tq, READER_KEYS)) if tq is not None else []
                elif n == "tantivy_vis":
                    tq = tv.text_query(q)
                    got[n] = tv.top(tv.vis_scoped(tq, READER_KEYS)) if tq is not None else []
                else:
                    got[n] = shards[n].top(q, READER_KEYS)
                dt = time.perf_counter() - t0
                times[n].append(dt)
                rt[n].append(dt)
            if r == rounds - 1:
                p10, t10 = overlap(got["tantivy"], got["fts5"], 10)
                p20, t20 = overlap(got["tantivy"], got["fts5"], 20)
                fts_scoped = [x for x in got["fts5"] if keys_of.get(x[0]) in keys]
                s10, st10 = overlap(got["tantivy_scoped"], fts_scoped, 10)
                for name, v in (("top10", p10), ("top10_tie", t10), ("top20", p20), ("top20_tie", t20),
                                ("scoped_top10", s10), ("scoped_top10_tie", st10)):
                    agree[name].append(v)
                for n in shards:  # the shards' own IDF against the single index's
                    agree[f"{n}_vs_single_top10"].append(overlap(got[n], got["tantivy_scoped"], 10)[0])
        per_round.append({n: h.percentile([x * 1000 for x in v], 50) for n, v in rt.items()})
        print(f"    round {r + 1}: " + ", ".join(f"{n} p50 {v:.1f} ms" for n, v in per_round[-1].items())
              + f"  (load {os.getloadavg()[0]:.1f})")
    for q in qs:
        tq = tv.text_query(q)
        matched.append(tv.index.searcher().search(tq, limit=1, count=True).count if tq is not None else 0)
    ms = {n: {"p50_ms": h.percentile([x * 1000 for x in v], 50),
              "p95_ms": h.percentile([x * 1000 for x in v], 95), "n": len(v)} for n, v in times.items()}
    clean = {n: [x for x in v if x == x] for n, v in agree.items()}
    return {"latency": ms, "rounds_p50_ms": per_round,
            "agreement_mean": {n: (sum(v) / len(v) if v else float("nan")) for n, v in clean.items()},
            "matches_per_query": {"p50": h.percentile(matched, 50), "max": max(matched) if matched else 0}}


# -- erasure ----------------------------------------------------------------------------------
def marker_state(path: Path) -> dict[str, Any]:
    """Where the marker still is: the term dictionary (through the API) and the files' bytes."""
    import tantivy

    index = open_index(path)
    index.reload()
    searcher = index.searcher()
    q = tantivy.Query.term_query(index.schema, "content", MARKER)
    # Forward or reversed: an FST may lay a word's bytes out either way (or scattered: then only the
    # term dictionary read through the API shows it).
    needles = (MARKER.encode(), MARKER[::-1].encode())
    files = [f.name for f in path.iterdir() if f.is_file() and any(n in f.read_bytes() for n in needles)]
    return {"hits": searcher.search(q, limit=5, count=True).count,
            "terms_with_prefix": searcher.terms_with_prefix("content", MARKER[:6]),
            "doc_freq": searcher.doc_freq("content", MARKER),
            "files_with_bytes": files, "segments": searcher.num_segments, "files": len(list(path.iterdir()))}


def erasure(path: Path, seq: int) -> dict[str, Any]:
    """Delete the marker's document by seq; the marker's traces after each step."""
    import tantivy

    out: dict[str, Any] = {"before": marker_state(path)}
    index = open_index(path)
    writer = index.writer(heap_size=64_000_000, num_threads=1)
    t0 = time.perf_counter()
    # By query: delete_documents_by_term("seq", int) builds an i64 term and deletes nothing on a u64 field.
    writer.delete_documents_by_query(tantivy.Query.term_query(index.schema, "seq", seq))
    writer.commit()
    out["delete_commit_ms"] = (time.perf_counter() - t0) * 1000
    out["after_commit"] = marker_state(path)
    writer.garbage_collect_files()
    out["after_gc"] = marker_state(path)
    writer.wait_merging_threads()
    out["after_wait_merging"] = marker_state(path)
    out["writer_methods"] = [m for m in dir(writer) if not m.startswith("_")]
    return out


def erasure_variants(tmp: Path, texts: list[tuple[int, str, str, str]]) -> dict[str, Any]:
    """Small indexes: a one-segment index of 10k ('recent'), and one with no positions ('freq')."""
    out: dict[str, Any] = {}
    small, seq = with_marker(texts[:10_000], 1234)
    for name, opt in (("recent_10k_position", "position"), ("recent_10k_freq", "freq")):
        p = tmp / name
        out[name] = {"build": build(p, small, index_option=opt, heap=64_000_000, threads=1)}
        out[name]["erasure"] = erasure(p, seq)
    # Many small commits: does the default merge policy ever merge the deleted row's segment away?
    p = tmp / "many_commits"
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir()
    import tantivy

    index = open_index(p)
    w = index.writer(heap_size=64_000_000, num_threads=1)
    for i, (s, c, k, st) in enumerate(small):
        w.add_document(doc(s, c, k, st))
        if i % 500 == 499:
            w.commit()
    w.commit()
    w.wait_merging_threads()
    w = index.writer(heap_size=64_000_000, num_threads=1)
    w.delete_documents_by_query(tantivy.Query.term_query(index.schema, "seq", seq))
    w.commit()
    for j in range(40):  # more commits of new rows after the delete: merges run meanwhile
        for s, c, k, st in texts[10_000 + j * 250:10_000 + (j + 1) * 250]:
            w.add_document(doc(s, c, k, st))
        w.commit()
    w.garbage_collect_files()
    w.wait_merging_threads()
    out["many_commits_then_40_more"] = marker_state(p)
    return out


def shard_rebuild(tmp: Path, texts: list[tuple[int, str, str, str]], size: int) -> dict[str, Any]:
    """What a forget costs when it rebuilds the shard holding the row: a ``size``-row build."""
    runs = []
    for r in range(2):
        b = build(tmp / f"rebuild_{r}", texts[:size], heap=64_000_000, threads=1)
        runs.append(b["wall_s"])
        shutil.rmtree(tmp / f"rebuild_{r}", ignore_errors=True)
    return {"rows": size, "wall_s": runs}


# -- crash ---------------------------------------------------------------------------------
_CHILD = r"""
import sys, time
sys.path.insert(0, {bench!r}); sys.path.insert(0, {study!r})
import tantivy
import lexical_engines as le
from pathlib import Path
idx = le.open_index(Path({path!r}))
w = idx.writer(heap_size=32_000_000, num_threads=1)
seq = {start}
print("ready", flush=True)
while True:
    for _ in range({batch}):
        seq += 1
        w.add_document(le.doc(seq, f"crash test row {{seq}} about the billing-api deploy", "agent:agent-00",
                              "active"))
    w.commit()
"""


def crash(tmp: Path, kills: int, batch: int) -> dict[str, Any]:
    """Kill a committing writer with SIGKILL ``kills`` times; reopen each time."""
    import tantivy

    path = tmp / "crash"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    rng = random.Random(3)
    results = []
    start = 0
    for _ in range(kills):
        code = _CHILD.format(bench=str(BENCH), study=str(Path(__file__).parent), path=str(path),
                             start=start, batch=batch)
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.readline()
        time.sleep(rng.uniform(0.3, 3.0))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        entry: dict[str, Any] = {}
        try:
            index = open_index(path)
            index.reload()
            s = index.searcher()
            entry["num_docs"] = s.num_docs
            entry["whole_batches"] = s.num_docs % batch == 0
            top = s.search(tantivy.Query.all_query(), limit=1, order_by_field="seq").hits
            entry["last_seq"] = int(top[0][0]) if top else 0
            entry["last_seq_is_num_docs"] = entry["last_seq"] == s.num_docs
            w = index.writer(heap_size=32_000_000, num_threads=1)  # the lock went with the killed process
            w.commit()
            w.wait_merging_threads()
            entry["writer_reopened"] = True
            start = entry["last_seq"]  # catch-up resumes after the last seq the index holds
        except Exception as exc:
            entry["error"] = repr(exc)
        entry["files"] = len(list(path.iterdir()))
        results.append(entry)
    return {"batch": batch, "kills": results,
            "all_ok": all(e.get("whole_batches") and e.get("writer_reopened")
                          and e.get("last_seq_is_num_docs") for e in results)}


# -- main ----------------------------------------------------------------------------------
def scale(label: str, tmp: Path, texts: list[Row], fts_db: str, qs: Sequence[str], rounds: int,
          shard_rows: int, owner_shard_rows: int, erase: bool) -> dict[str, Any]:
    print(f"\n== {label}: {len(texts):,} texts")
    marked, marker_seq = with_marker(texts, len(texts) * 7 // 9)
    path = tmp / f"tantivy_{label}"
    out: dict[str, Any] = {"rows": len(texts)}
    out["build"] = build(path, marked)
    print(f"  build: {out['build']['wall_s']:.1f} s, {out['build']['bytes'] / 1e6:.0f} MB, "
          f"RSS +{out['build']['rss_growth_bytes'] / 1e6:.0f} MB, {out['build']['segments']} segments")
    sets: dict[str, ShardSet] = {}
    for name, rows, by_owner in (("seq_shards", shard_rows, False), ("owner_shards", owner_shard_rows, True)):
        if rows:
            sets[name], out[name] = build_shards(tmp, label, marked, rows, by_owner)
            print(f"  {name}: {out[name]['count']} shards built in {out[name]['build_wall_s']:.1f} s")
    tv = Tantivy(path)
    fts = Fts(fts_db)
    keys_of = {s: k for s, _, k, _ in texts}
    gc.collect()
    out["rss_after_open_bytes"] = psutil.Process().memory_info().rss
    out["search"] = latency_run(tv, fts, qs, rounds, keys_of, sets)
    if sets:
        out["shard_rebuild"] = shard_rebuild(tmp, marked, max(shard_rows, owner_shard_rows))
    del tv
    if erase:
        out["erasure"] = erasure(path, marker_seq)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", default=DEFAULT_DB, help="a kept bench store (else texts from dev_notes)")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shard-rows", type=int, default=50_000,
                   help="also measure seq-range shards of this many rows at the full size (0: not)")
    p.add_argument("--owner-shard-rows", type=int, default=50_000,
                   help="also measure per-scope-key shards of at most this many rows (0: not)")
    p.add_argument("--skip-100k", action="store_true")
    p.add_argument("--kills", type=int, default=6)
    p.add_argument("--tmp", default=None, help="work directory (default: a new one under /tmp, removed)")
    args = p.parse_args()

    import tantivy

    h.banner("lexical_engines", "tantivy beside FTS5: build, top-200 BM25, scope inside, erasure, crash",
             False)
    print(f"tantivy-py {tantivy.__version__ if hasattr(tantivy, '__version__') else '?'}")
    tmp = Path(args.tmp) if args.tmp else Path(tempfile.mkdtemp(prefix="lexical-engines-"))
    tmp.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"loadavg_start": os.getloadavg()}
    try:
        t0 = time.perf_counter()
        texts = load_texts(args.db, args.n)
        from_db = bool(args.db and Path(args.db).exists())
        data["texts"] = {"rows": len(texts), "from": args.db if from_db else "dev_notes",
                         "load_s": time.perf_counter() - t0}
        qs = queries(args.queries, seed=11)
        data["queries"] = len(qs)
        if from_db and len(texts) >= 1_000_000:
            fts_db = args.db
        else:
            fts_db = str(tmp / "fts_full.db")
            data["texts"]["fts_build_s"] = build_fts(Path(fts_db), texts)
        data["full"] = scale(f"{len(texts) // 1000}k", tmp, texts, fts_db, qs, args.rounds,
                             args.shard_rows, args.owner_shard_rows, True)
        if not args.skip_100k and len(texts) > 100_000:
            sub = texts[:100_000]
            fts100 = tmp / "fts_100k.db"
            data["fts_100k_build_s"] = build_fts(fts100, sub)
            data["100k"] = scale("100k", tmp, sub, str(fts100), qs, args.rounds, 0, 0, False)
        data["erasure_variants"] = erasure_variants(tmp, texts)
        data["crash"] = crash(tmp, args.kills, 500)
        data["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        data["loadavg_end"] = os.getloadavg()
        report(data)
        h.save("lexical_engines", data, False)
    finally:
        if not args.tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def report(data: dict[str, Any]) -> None:
    rows = []
    for label in ("full", "100k"):
        s = data.get(label)
        if not s:
            continue
        lat = s["search"]["latency"]
        for name, v in lat.items():
            rows.append([f"{s['rows']:,}", name, v["p50_ms"], v["p95_ms"], v["n"]])
    h.print_table("top-200 latency (interleaved)", ["rows", "series", "p50 ms", "p95 ms", "n"], rows)
    rows = []
    for label in ("full", "100k"):
        s = data.get(label)
        if s:
            a = s["search"]["agreement_mean"]
            rows.append([f"{s['rows']:,}", a["top10"], a["top10_tie"], a["top20"], a["top20_tie"],
                         a["scoped_top10"], a["scoped_top10_tie"]])
    h.print_table("agreement with FTS5 bm25 (mean share of tantivy's top k in FTS5's)",
                  ["rows", "top10", "top10 tie", "top20", "top20 tie", "scoped10", "scoped10 tie"], rows)
    rows = []
    for label in ("full", "100k"):
        s = data.get(label)
        if s:
            b = s["build"]
            rows.append([f"{s['rows']:,}", b["wall_s"], b["cpu_s"], b["bytes"] / 1e6,
                         b["rss_growth_bytes"] / 1e6, b["segments"]])
    h.print_table("build", ["rows", "wall s", "cpu s", "MB on disk", "RSS growth MB", "segments"], rows)
    e = data["full"].get("erasure", {})
    rows = []
    for step in ("before", "after_commit", "after_gc", "after_wait_merging"):
        if step in e:
            st = e[step]
            rows.append([step, st["hits"], st["doc_freq"], str(st["terms_with_prefix"]),
                         ",".join(st["files_with_bytes"]) or "-", st["segments"]])
    for name, v in data.get("erasure_variants", {}).items():
        st = v["erasure"]["after_wait_merging"] if "erasure" in v else v
        rows.append([name, st["hits"], st["doc_freq"], str(st["terms_with_prefix"]),
                     ",".join(st["files_with_bytes"]) or "-", st["segments"]])
    h.print_table("erasure of the marker's document",
                  ["step", "hits", "doc_freq", "terms", "files with bytes", "segments"], rows)
    c = data["crash"]
    print(f"\ncrash: {len(c['kills'])} SIGKILLs, all reopened whole: {c['all_ok']}: {c['kills']}")
    agree = data["full"]["search"]["agreement_mean"]
    for name in ("seq_shards", "owner_shards"):
        if name in data["full"]:
            print(f"{name}: {data['full'][name]}; top-10 overlap with the single index (scoped): "
                  f"{agree.get(name + '_vs_single_top10', float('nan')):.2f}")
    if "shard_rebuild" in data["full"]:
        print(f"rebuild of one shard: {data['full']['shard_rebuild']}")


if __name__ == "__main__":
    main()
