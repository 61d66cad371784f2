"""Moving a store (issue 21, item 3): `memoryd import` with vectors kept, until searchable.

An export of N memories (bench/_harness.py dev_notes, realistic lengths) is
written straight to a file, each record with a 384-dimensional vector named
``all-MiniLM-L6-v2`` (the bundled model's name and dimension) and the content
hash it describes: random unit vectors by default, or with ``--vectors real``
the sentences of bench/studies/ann_million_real.py with their real vectors
(bench/_corpus.py). HNSW takes random vectors slower than real ones, so the
index's catch-up differs between the two. Fresh daemons on the same machine, in
the same run, each with the bundled embedder:

(a) **raw** (not with ``--no-raw``): the same contents through plain
    ``memory.write_many`` (batches of 500, no idempotency key, no ``restore``,
    no vector): the write path's group fast path, the cheapest way into the
    store; embed jobs just queue;
(b) **kept**: ``memoryd import --progress FILE`` (the CLI, as a user runs it:
    streaming, file parsing and validation included). Each row is stored with
    its vector and no embed job. Measured: seconds until the command exits
    (memories/s), then until it is **searchable**: daemon.status's
    ``vector_index`` is ready with ``behind`` 0 (the HNSW graphs beside a SQLite
    store hold every imported vector), then a hybrid search (the embedder
    loaded before the import) must answer imported rows, and is timed; the
    client's and the daemon's peak RSS while importing (sampled every 0.2 s),
    both processes' CPU seconds, and (not with ``--no-rerun``) a second run of
    the same import (every line answered from its idempotency key: the row and
    vector counts after it must still be N);
(b') **kept, no graphs** (``--index-control``): the same import into a daemon
    with ``vector_index = false`` (searches scan vec0 exactly), to tell the
    import's own CPU from the HNSW graphs' (a graph takes each vector in the
    daemon's index thread while the import runs, ~1.1 ms of CPU per random
    384-dimensional vector at M 16, ef_construction 100);
(c) **re-embedded** (``--reembed``): the same file without vectors, then the
    daemon's embed drain until every row has a vector (what every import did
    before). With ``--drain-sample M`` only the first M rows' drain is timed
    and the rest extrapolated at that rate (labelled as such).

    .venv/bin/python bench/import.py                 # 10,000 memories
    .venv/bin/python bench/import.py --sizes 10000 100000 --repeat 2 --index-control
    .venv/bin/python bench/import.py --sizes 100000 --repeat 0 --index-control   # the control only
    .venv/bin/python bench/import.py --quick         # 1,000
    .venv/bin/python bench/import.py --sizes 1000000 --vectors real --no-raw --no-rerun

The machine is shared: wall-clock figures swing with its load (the banner
prints the load average); the CPU seconds per memory of the client and the
daemon are the steadier figure.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _corpus import KINDS, Corpus
from _harness import (
    Daemon,
    banner,
    cpu_seconds,
    parser,
    print_table,
    queue_open,
    save,
    wait_lexical_index,
    workdir,
)
from memoryd.store.memories import content_hash

MODEL, DIM = "all-MiniLM-L6-v2", 384
VECTOR_CHUNK = 10_000
CONFIG = {"governor_enabled": False, "model_idle_s": 3600.0}


def write_export(path: Path, corpus: Corpus, with_vectors: bool) -> int:
    """An export file of the corpus's texts (agent a1), with its vectors when asked; its size."""
    texts = corpus.texts
    vectors = (row for chunk in corpus.vector_chunks(VECTOR_CHUNK) for row in chunk)
    with path.open("w") as out:
        out.write(json.dumps({"record": "header", "format": "memoryd-export", "format_version": 1,
                              "memoryd_version": "bench", "exported_at": "2026-01-01T00:00:00.000000Z",
                              "filters": {}, "with_vectors": with_vectors, "total": len(texts)}) + "\n")
        for i, text in enumerate(texts):
            record: dict[str, Any] = {
                "record": "memory", "id": f"mem_bench{i:010d}", "content": text, "kind": "fact",
                "scope": "agent", "agent_id": "a1", "status": "active", "importance": 0.5,
                "recorded_at": "2026-01-01T00:00:00.000000Z", "metadata": {}, "links": []}
            if with_vectors:
                vec = np.asarray(next(vectors), dtype="<f4")
                record["vector"] = {"model": MODEL, "dim": DIM, "encoding": "f32le-base64",
                                    "data": base64.b64encode(vec.tobytes()).decode(),
                                    "content_hash": content_hash(text)}
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
        out.write(json.dumps({"record": "end", "count": len(texts)}) + "\n")
    return path.stat().st_size


class Sampler:
    """Peak RSS of some processes, read every ``every_s`` on a thread of its own."""

    def __init__(self, every_s: float = 0.2):
        import threading

        self.every_s = every_s
        self.pids: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            for name, pid in list(self.pids.items()):
                try:
                    rss = psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
                self.peak[name] = max(self.peak.get(name, 0), rss)
            self._stop.wait(self.every_s)


def run_import(daemon: Daemon, path: Path, extra: list[str] | None = None) -> dict[str, Any]:
    """``memoryd import --json --progress FILE`` against ``daemon``: seconds, summary, progress
    lines seen, peak RSS and CPU seconds of the client and of the daemon while it ran."""
    cpu0 = cpu_seconds(daemon.pid)
    with Sampler() as sampler:
        sampler.pids["daemon"] = daemon.pid
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "memoryd", "import", "--json", "--progress",
                                 "--socket", str(daemon.socket), *(extra or []), str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sampler.pids["client"] = proc.pid
        import psutil

        client = psutil.Process(proc.pid)
        client_cpu = 0.0
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                t = client.cpu_times()
                client_cpu = t.user + t.system
            time.sleep(0.2)
        out, err = proc.communicate()
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}): {err[-2000:]}")
    progress = [line for line in err.splitlines() if line.startswith("import: ")]
    return {"import_s": seconds, "summary": json.loads(out), "progress_lines": len(progress),
            "last_progress": progress[-1] if progress else None,
            "client_rss_peak": sampler.peak.get("client", 0),
            "daemon_rss_peak": sampler.peak.get("daemon", 0),
            "client_cpu_s": client_cpu, "daemon_cpu_s": cpu_seconds(daemon.pid) - cpu0}


def wait_searchable(daemon: Daemon, n: int, timeout_s: float = 3600.0,
                    index_on: bool = True) -> dict[str, Any]:
    """Wait until daemon.status says the vector index is ready and holds every logged vector
    (behind 0), and the lexical index too when the store is large enough to have one, then time
    a hybrid search that must answer imported rows. ``index_on`` False:
    the daemon keeps no graphs (vector_index false), its searches scan vec0 exactly."""
    t0 = time.perf_counter()
    index: dict[str, Any] = {}
    while index_on and time.perf_counter() - t0 < timeout_s:
        index = daemon.call("daemon.status").get("vector_index") or {}
        if index.get("ready") and index.get("behind") == 0:
            break
        time.sleep(0.5)
    if index_on and not (index.get("ready") and index.get("behind") == 0):
        raise SystemExit(f"the vector index did not catch up in {timeout_s:.0f} s: {index}")
    # A store past lexical_index_min_rows: its lexical index (tantivy shards) caught up too.
    lexical = wait_lexical_index(daemon, timeout_s) if index_on else None
    waited = time.perf_counter() - t0
    s0 = time.perf_counter()
    hits = daemon.call("memory.search", {"query": "deploy postgres staging", "agent_id": "a1", "k": 10})
    search_ms = (time.perf_counter() - s0) * 1000
    if not hits["results"]:
        raise SystemExit("a hybrid search found none of the imported rows")
    return {"index_wait_s": waited, "index": index, "lexical_index": lexical, "search_ms": search_ms,
            "mode_used": hits["mode_used"], "hits": len(hits["results"]), "n": n}


def warm_embedder(daemon: Daemon, timeout_s: float = 300.0) -> None:
    """Load the embedder before the import (a search embeds its query), so that the search
    after it times the store, not the model's first load."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if daemon.call("memory.search", {"query": "warm up", "agent_id": "a1", "mode": "vector"}
                       )["mode_used"] == "vector":
            return
        time.sleep(0.5)
    raise SystemExit("the embedder did not load")


def vectors_stored(daemon: Daemon) -> int:
    """Rows with a vector, read from the daemon's SQLite file."""
    import sqlite3

    with sqlite3.connect(daemon.data_dir / "memoryd.db") as conn:
        return int(conn.execute("SELECT count(*) FROM memory_vectors_meta").fetchone()[0])


def raw_write_many(daemon: Daemon, texts: list[str]) -> float:
    """Plain memory.write_many of ``texts`` in batches of 500: seconds."""
    t0 = time.perf_counter()
    with daemon.client() as c:
        for at in range(0, len(texts), 500):
            c.call("memory.write_many", {"items": [{"content": t, "agent_id": "a1", "kind": "fact"}
                                                   for t in texts[at:at + 500]]})
    return time.perf_counter() - t0


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def kept_run(root: Path, n: int, path: Path, label: str, index_on: bool = True,
             rerun: bool = True) -> dict[str, Any]:
    """One import with vectors kept into a fresh daemon, until searchable (``index_on`` False:
    a daemon without the HNSW graphs, to tell the import's own cost from the index's), then
    (``rerun``) the same import again."""
    config = CONFIG if index_on else {**CONFIG, "vector_index": False}
    with Daemon(_dir(root / label), embedder="bundled", config=config, label="kept") as d:
        warm_embedder(d)
        run = run_import(d, path)
        searchable = wait_searchable(d, n, index_on=index_on)
        status = d.call("daemon.status")
        summary = run.pop("summary")
        run.update({"vectors_kept": summary["vectors_kept"], "written": summary["written"],
                    "vectors_after": vectors_stored(d), "embed_open_after": queue_open(status, "embed"),
                    "searchable_s": run["import_s"] + searchable["index_wait_s"], **searchable})
        if not index_on or not rerun:
            return run
        # Run again: every line answers from its idempotency key, nothing is written twice.
        again = run_import(d, path)
        run["rerun_s"] = again["import_s"]
        run["rerun_written"] = again["summary"]["written"]
        run["rows_after_rerun"] = int(d.call("daemon.status")["memories"].get("active", 0))
        run["vectors_after_rerun"] = vectors_stored(d)
    return run


def reembed_run(root: Path, n: int, path: Path, drain_sample: int | None) -> dict[str, Any]:
    with Daemon(_dir(root / f"re{n}"), embedder="bundled", config=CONFIG, label="reembed") as d:
        seconds = run_import(d, path)["import_s"]
        t_import = time.time()
        # Rows embedded while the import ran, then the drain of the next ``sample`` rows, counted
        # in the store (daemon.status's queue counts are capped on a large queue).
        before = vectors_stored(d)
        sample = min(n - before, drain_sample or n)
        while vectors_stored(d) < before + sample:
            time.sleep(0.5)
        drain_s = time.time() - t_import
        rate = sample / drain_s
        return {"import_s": seconds, "embedded_during_import": before, "drain_sample": sample,
                "drain_s_measured": drain_s, "drain_per_s": rate,
                "searchable_s": seconds + (n - before) / rate, "extrapolated": before + sample < n}


def one_size(root: Path, n: int, args: Any) -> dict[str, Any]:
    repeat, reembed, drain_sample, index_control = (args.repeat, args.reembed, args.drain_sample,
                                                    args.index_control)
    corpus = Corpus(n, 11, args.vectors, text_seed=21)
    texts = corpus.texts
    with_vectors = root / f"with-vectors-{n}.jsonl"
    t0 = time.perf_counter()
    out: dict[str, Any] = {"n": n, "vectors": args.vectors,
                           "file_bytes_with_vectors": write_export(with_vectors, corpus, True),
                           "raw_write_many_s": [], "kept": []}
    print(f"N={n}: export file written in {time.perf_counter() - t0:.0f} s", flush=True)
    for r in range(repeat):
        if not args.no_raw:
            with Daemon(_dir(root / f"raw{n}-{r}"), embedder="bundled", config=CONFIG, label="raw") as d:
                out["raw_write_many_s"].append(raw_write_many(d, texts))
        out["kept"].append(kept_run(root, n, with_vectors, f"kept{n}-{r}", rerun=not args.no_rerun))
        raw = f"; raw {out['raw_write_many_s'][-1]:.1f} s" if out["raw_write_many_s"] else ""
        print(f"N={n} run {r + 1}: import {out['kept'][-1]['import_s']:.1f} s, searchable "
              f"{out['kept'][-1]['searchable_s']:.1f} s{raw}", flush=True)
    if index_control:
        out["no_index"] = kept_run(root, n, with_vectors, f"noindex{n}", index_on=False)
        print(f"N={n} without the vector index: import {out['no_index']['import_s']:.1f} s", flush=True)
    if reembed:
        without = root / f"without-{n}.jsonl"
        out["file_bytes_without"] = write_export(without, corpus, False)
        out["reembed"] = reembed_run(root, n, without, drain_sample)
    return out


def _span(values: list[float], fmt: str = "{:.1f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if len(values) == 1 or fmt.format(lo) == fmt.format(hi) else \
        f"{fmt.format(lo)}-{fmt.format(hi)}"


def _kept_rows(n: int, kept: list[dict[str, Any]], raw: list[float]) -> list[list[Any]]:
    rows: list[list[Any]] = []

    def by_raw(key: str) -> str:
        if not raw:  # --no-raw
            return "-"
        return _span([k[key] / s for k, s in zip(kept, raw, strict=True)], "{:.2f}")

    if raw:
        rows.append([n, "raw write_many (no vectors, no restore)", _span(raw),
                     _span([n / s for s in raw], "{:,.0f}"), "-"])
    rows.append([n, "import, vectors kept: until the command exits", _span([k["import_s"] for k in kept]),
                 _span([n / k["import_s"] for k in kept], "{:,.0f}"), by_raw("import_s")])
    rows.append([n, "  until searchable (vector index ready, behind 0)",
                 _span([k["searchable_s"] for k in kept]),
                 _span([n / k["searchable_s"] for k in kept], "{:,.0f}"), by_raw("searchable_s")])
    reruns = [k["rerun_s"] for k in kept if "rerun_s" in k]
    if reruns:
        rows.append([n, "  run again (nothing written)", _span(reruns),
                     _span([n / s for s in reruns], "{:,.0f}"), "-"])
    return rows


def main() -> None:
    p = parser(__doc__.split("\n\n")[0],
               baseline='plain memory.write_many of the same contents (no vectors, no restore), same run.')
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per size (fresh daemons each): ranges; 0 with --index-control: that run only")
    p.add_argument("--reembed", action="store_true", help="also time an import without vectors + embed drain")
    p.add_argument("--index-control", action="store_true",
                   help="also import into a daemon without the HNSW graphs (vector_index false)")
    p.add_argument("--vectors", choices=KINDS, default="random",
                   help="random: developer notes with random unit vectors; real: the sentences of "
                        "bench/studies/ann_million_real.py with their real all-MiniLM-L6-v2 vectors "
                        "(bench/_corpus.py; encoded first into that study's cache)")
    p.add_argument("--no-raw", action="store_true",
                   help="skip the raw write_many run (no x raw column; saves its time at a million)")
    p.add_argument("--no-rerun", action="store_true",
                   help="skip the second run of each import (the idempotent replay)")
    p.add_argument("--drain-sample", type=int, default=None,
                   help="time the embed drain of this many rows and extrapolate the rest")
    args = p.parse_args()
    sizes = [1000] if args.quick else args.sizes
    banner("import", "memoryd import with vectors kept, until searchable, against raw write_many", args.quick)
    results = []
    with workdir("import", args.keep) as root:
        for n in sizes:
            results.append(one_size(root, n, args))
    rows = []
    for r in results:
        n, kept, raw = r["n"], r["kept"], r["raw_write_many_s"]
        if kept:  # --repeat 0: only the control run below
            rows += _kept_rows(n, kept, raw)
        if "no_index" in r:
            k = r["no_index"]
            rows.append([n, "import into a daemon without the HNSW graphs (exact vec0 scans)",
                         f"{k['import_s']:.1f}", f"{n / k['import_s']:,.0f}", "-"])
        if "reembed" in r:
            re = r["reembed"]
            label = "extrapolated" if re["extrapolated"] else "measured"
            rows.append([n, f"import without vectors + embed drain ({re['drain_per_s']:.1f}/s, {label})",
                         f"{re['searchable_s']:.1f}", f"{n / re['searchable_s']:,.0f}", "-"])
    print_table("memories/s (ranges over --repeat runs; x raw = against the raw run of the same repeat)",
                ["N", "path", "seconds", "memories/s", "x raw"], rows)
    mem_rows = []
    for r in results:
        runs = [("on", k) for k in r["kept"]] + ([("off", r["no_index"])] if "no_index" in r else [])
        for graphs, k in runs:
            n = r["n"]
            mem_rows.append([n, graphs, f"{k['client_rss_peak'] / 1e6:.0f}",
                             f"{k['daemon_rss_peak'] / 1e6:.0f}",
                             f"{k['client_cpu_s']:.1f} ({k['client_cpu_s'] / n * 1e3:.2f})",
                             f"{k['daemon_cpu_s']:.1f} ({k['daemon_cpu_s'] / n * 1e3:.2f})",
                             k["vectors_kept"],
                             k["vectors_after"], k["embed_open_after"],
                             f"{k.get('rows_after_rerun', '-')}/{k.get('vectors_after_rerun', '-')}",
                             f"{k['search_ms']:.1f} ({k['mode_used']})", k["progress_lines"]])
    print_table("each import with vectors kept (CPU while the import ran: seconds, and ms per memory)",
                ["N", "graphs", "client RSS MB", "daemon RSS MB", "client CPU s", "daemon CPU s", "kept",
                 "stored", "embed open", "rows/vectors after rerun", "search ms", "progress lines"], mem_rows)
    for r in results:
        last = (r["kept"] or [r.get("no_index", {})])[-1].get("last_progress")
        print(f"N={r['n']}: file {r['file_bytes_with_vectors'] / 1e6:.1f} MB with vectors; "
              f"last progress line: {last}")
    save("import", {"sizes": results}, args.quick)


if __name__ == "__main__":
    main()
