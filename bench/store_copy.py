"""``memoryd store copy`` of a 10,000-memory SQLite store (with vectors) to PostgreSQL, timed.

Builds the source through the real write path: a ``memoryd run`` daemon
(``--embedder none``) takes N developer notes over its socket with
``memory.write_many``, spread over agents, projects and users (so the store
holds its audit chain, its jobs and idempotency-free rows as a daemon writes
them); with the daemon stopped, every memory gets a 384-dimensional unit vector
through ``store.vectors.upsert`` (the embed pass's write path: the vec0 index
behind the ``memory_vectors`` view). Then ``memoryd store copy`` runs as a
subprocess into a fresh database on an embedded PostgreSQL 18 + pgvector 0.8
(tests/postgres.py), and the figures are its wall time, rows per second, and
its verification (rows per table equal, the audit chain verifying on the target).

    PYTHONPATH=src .venv/bin/python bench/store_copy.py            # N = 10,000
    PYTHONPATH=src .venv/bin/python bench/store_copy.py --quick    # N = 1,000
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import start_server, stop_server

from _harness import Daemon, banner, dev_notes, parser, print_table, save, workdir

DIM = 384


def owner(i: int) -> dict[str, str]:
    """Memory ``i``'s scope and owner: ten agents, five projects and a user, in turn."""
    return [{"agent_id": f"agent{i % 10}"}, {"scope": "project", "project": f"proj{i % 5}"},
            {"scope": "user", "user_id": "u1"}][i % 3]


def build_source(root: Path, n: int) -> str:
    """A SQLite store of ``n`` memories written by a daemon, each with a vector; its URL."""
    from sqlalchemy import select

    from memoryd.store import vectors
    from memoryd.store.engine import create_store_engine
    from memoryd.store.schema import memories

    daemon = Daemon(root, embedder="none", label="source")
    daemon.start()
    notes = dev_notes(n)
    t0 = time.perf_counter()
    with daemon.client() as c:
        for start in range(0, n, 500):
            items = [{"content": text, "kind": "fact", **owner(start + j)}
                     for j, text in enumerate(notes[start:start + 500])]
            c.call("memory.write_many", {"items": items})
    print(f"wrote {n} memories over the socket in {time.perf_counter() - t0:.1f} s")
    daemon.stop()
    url = f"sqlite:///{daemon.data_dir / 'memoryd.db'}"
    engine = create_store_engine(url)
    rng = np.random.default_rng(0)
    try:
        with engine.connect() as conn:
            seqs = conn.execute(select(memories.c.seq, memories.c.content_hash)
                                .order_by(memories.c.seq)).all()
        t0 = time.perf_counter()
        for start in range(0, len(seqs), 1000):
            chunk = seqs[start:start + 1000]
            vecs = rng.standard_normal((len(chunk), DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            with engine.begin() as conn:
                vectors.upsert(conn, [{"memory_seq": s, "model": "bench", "dim": DIM,
                                       "vector": vectors.to_blob(v), "content_hash": h,
                                       "embedded_at": "2026-01-01T00:00:00.000000Z"}
                                      for (s, h), v in zip(chunk, vecs, strict=True)])
        print(f"stored {len(seqs)} vectors in {time.perf_counter() - t0:.1f} s")
    finally:
        engine.dispose()
    return url


def run_copy(source: str, target: str, batch_size: int) -> tuple[float, dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "memoryd", "store", "copy", "--from", source, "--to", target,
                           "--json", "--batch-size", str(batch_size)],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"store copy exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout), proc.stderr


def main() -> None:
    p = parser(__doc__.splitlines()[0],
               baseline="none: absolute wall time and rows/s, checked by the copy's own verification.")
    p.add_argument("--n", type=int, default=None, help="memories (default 10,000; 1,000 with --quick)")
    p.add_argument("--batch-size", type=int, default=1000)
    args = p.parse_args()
    n = args.n or (1000 if args.quick else 10_000)
    banner("store_copy", f"memoryd store copy of a {n}-memory SQLite store to PostgreSQL", args.quick)
    with workdir("copy", args.keep) as root:
        source = build_source(root, n)
        server = start_server()
        try:
            with server.database("copy") as target:
                wall, summary, stderr = run_copy(source, target, args.batch_size)
        finally:
            stop_server(server)
    rows = sum(t["source"] for t in summary["tables"].values())
    print_table("rows per table", ["table", "source", "target", "copy s"],
                [[name, t["source"], t["target"], t["seconds"]] for name, t in summary["tables"].items()])
    print_table("copy", ["memories", "rows (all tables)", "wall s", "copy s", "index + sequences s",
                         "rows/s", "verified"],
                [[summary["tables"]["memories"]["source"], rows, wall, summary["seconds"],
                  summary["finish_seconds"], rows / summary["seconds"], summary["verified"]]], digits=1)
    print("progress lines (stderr):\n  " + "\n  ".join(stderr.strip().splitlines()[-6:]))
    save("store_copy", {"n": n, "batch_size": args.batch_size, "wall_s": wall, "rows": rows,
                        "summary": summary}, args.quick)


if __name__ == "__main__":
    main()
