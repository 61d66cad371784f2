"""Moving a store (issue 21, item 3): `memoryd import` with vectors kept against re-embedding.

An export of N memories (bench/_harness.py dev_notes, realistic lengths) is
written straight to a file, each record with a 384-dimensional vector named
``all-MiniLM-L6-v2`` (the bundled model's name and dimension) and the content
hash it describes: random unit vectors, since only the time to store them is
measured here. Three fresh daemons on the same machine, in the same run, each
with the bundled embedder:

(a) **raw**: the same contents through plain ``memory.write_many`` (batches of
    500, no idempotency key, no ``restore``, no vector): the write path's group
    fast path, the cheapest way into the store; embed jobs just queue;
(b) **kept**: ``memoryd import FILE`` (the CLI, as a user runs it, file parsing
    and validation included). The vectors are the embedder's, so each row is
    stored with its vector and no embed job: searchable when the command exits
    (checked: every row has a vector, no embed job is open);
(c) **re-embedded**: the same file without vectors: ``memoryd import``, then
    the daemon's embed drain with the bundled model until every row has a
    vector (what every import did before). With ``--drain-sample M`` (default
    all rows) only the first M rows' drain is timed and the rest extrapolated at
    that rate (labelled as such).

Memories/s = N ÷ seconds until every row is searchable by vector (for (a),
until it is written: it has no vectors; (a) is the floor of what any import
could cost on this machine).

    .venv/bin/python bench/import.py                 # 10,000 memories
    .venv/bin/python bench/import.py --sizes 10000 100000 --drain-sample 2000
    .venv/bin/python bench/import.py --quick         # 1,000
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _harness import (
    Daemon,
    banner,
    dev_notes,
    parser,
    print_table,
    queue_open,
    save,
    workdir,
)
from memoryd.store.memories import content_hash

MODEL, DIM = "all-MiniLM-L6-v2", 384
CONFIG = {"governor_enabled": False, "model_idle_s": 3600.0}


def write_export(path: Path, texts: list[str], with_vectors: bool, seed: int = 11) -> int:
    """An export file of ``texts`` (agent a1), with random unit vectors when asked; its size."""
    rng = np.random.default_rng(seed)
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
                vec = rng.standard_normal(DIM).astype("<f4")
                vec /= np.linalg.norm(vec)
                record["vector"] = {"model": MODEL, "dim": DIM, "encoding": "f32le-base64",
                                    "data": base64.b64encode(vec.tobytes()).decode(),
                                    "content_hash": content_hash(text)}
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
        out.write(json.dumps({"record": "end", "count": len(texts)}) + "\n")
    return path.stat().st_size


def run_import(daemon: Daemon, path: Path) -> tuple[float, dict[str, Any]]:
    """``memoryd import --json FILE`` against ``daemon``: (seconds, summary)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memoryd", "import", "--json",
                           "--socket", str(daemon.socket), str(path)],
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"import failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


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


def one_size(root: Path, n: int, drain_sample: int | None) -> dict[str, Any]:
    texts = dev_notes(n, seed=21)
    with_vectors = root / f"with-vectors-{n}.jsonl"
    without = root / f"without-{n}.jsonl"
    size_with = write_export(with_vectors, texts, True)
    size_without = write_export(without, texts, False)
    out: dict[str, Any] = {"n": n, "file_bytes_with_vectors": size_with, "file_bytes_without": size_without}

    with Daemon(_dir(root / f"raw{n}"), embedder="bundled", config=CONFIG, label="raw") as d:
        out["raw_write_many_s"] = raw_write_many(d, texts)

    with Daemon(_dir(root / f"kept{n}"), embedder="bundled", config=CONFIG, label="kept") as d:
        seconds, summary = run_import(d, with_vectors)
        status = d.call("daemon.status")
        out["kept"] = {"import_s": seconds, "vectors_kept": summary["vectors_kept"],
                       "written": summary["written"], "vectors_after": vectors_stored(d),
                       "embed_open_after": queue_open(status, "embed")}

    with Daemon(_dir(root / f"re{n}"), embedder="bundled", config=CONFIG, label="reembed") as d:
        seconds, summary = run_import(d, without)
        t_import = time.time()
        # Rows embedded while the import ran, then the drain of the next ``sample`` rows, counted
        # in the store (daemon.status's queue counts are capped on a large queue).
        before = vectors_stored(d)
        sample = min(n - before, drain_sample or n)
        while vectors_stored(d) < before + sample:
            time.sleep(0.5)
        drain_s = time.time() - t_import
        rate = sample / drain_s
        out["reembed"] = {"import_s": seconds, "vectors_kept": summary["vectors_kept"],
                          "embedded_during_import": before, "drain_sample": sample,
                          "drain_s_measured": drain_s, "drain_per_s": rate,
                          "searchable_s": seconds + (n - before) / rate,
                          "extrapolated": before + sample < n}
    return out


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    p.add_argument("--drain-sample", type=int, default=None,
                   help="time the embed drain of this many rows and extrapolate the rest")
    args = p.parse_args()
    sizes = [1000] if args.quick else args.sizes
    banner("import", "memoryd import with vectors kept vs re-embedded, against raw write_many", args.quick)
    results = []
    with workdir("import", args.keep) as root:
        for n in sizes:
            results.append(one_size(root, n, args.drain_sample))
    rows = []
    for r in results:
        n = r["n"]
        kept, re = r["kept"], r["reembed"]
        rows.append([n, "raw write_many (no vectors, no restore)", r["raw_write_many_s"],
                     n / r["raw_write_many_s"], "-"])
        rows.append([n, f"import, vectors kept ({kept['vectors_kept']} kept, {kept['vectors_after']} stored, "
                        f"{kept['embed_open_after']} embed open)", kept["import_s"], n / kept["import_s"],
                     kept["import_s"] / r["raw_write_many_s"]])
        label = "extrapolated" if re["extrapolated"] else "measured"
        rows.append([n, f"import + embed drain ({re['drain_per_s']:.1f}/s, {label})", re["searchable_s"],
                     n / re["searchable_s"], re["searchable_s"] / r["raw_write_many_s"]])
        rows.append([n, "  of which the import alone", re["import_s"], n / re["import_s"],
                     re["import_s"] / r["raw_write_many_s"]])
    print_table("until searchable (raw: until written)",
                ["N", "path", "seconds", "memories/s", "x raw"], rows)
    for r in results:
        print(f"N={r['n']}: file {r['file_bytes_with_vectors'] / 1e6:.1f} MB with vectors, "
              f"{r['file_bytes_without'] / 1e6:.1f} MB without")
    save("import", {"sizes": results}, args.quick)


if __name__ == "__main__":
    main()
