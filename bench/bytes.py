"""Bytes per memory beyond its text, old vector layout against the new, at two spreads of owners.

For each layout the benchmark builds a SQLite store in process with the same
memories and vectors, written as the daemon writes them: each memory through
the write path (memoryd.store.writes.commit_units: the row, its full-text
entry, its audit event), then a stored random unit vector per memory.

* old: migrations up to 0006, the 0005 index: a vec0 partition per (scope,
  owner) pair with sqlite-vec's default 1,024-vector chunk, and every vector
  also in the ``memory_vectors`` table;
* new: migration 0007, vectors through ``vectors.upsert`` (owners bucketed
  into 16 partitions of 128-vector chunks, one copy per vector).

Spreads: every memory in a session of its own ("sessions"), and the memories
spread over ten agents ("owners10"). A partition per session costs 1.6 MB, so
the old layout's sessions store is built with --old-sessions memories only
(300 by default: ~480 MB); each further session adds the same.

Per store it prints the file size after a WAL checkpoint, the content bytes,
(file - content) / memories, a breakdown by table (dbstat), and the p50 of the
index's KNN for one reader (a session, or an agent). Then it migrates the old
sessions store to 0007, vacuums it as the daemon's start does, and prints the
sizes and times. Counted: everything in the file; not counted: jobs, which
the daemon prunes a day after they are done.

With --prototypes it also times, in process, the nearest-neighbour query of
the layouts that were considered, on one file of 100,000 vectors spread as
bench/search.py spreads its owners (ten agents, two users, org; the reader
sees one agent, one user and org): a partition per (scope, owner) (the old
layout), a partition per scope with the owner as a metadata filter,
and owner buckets with chunks of 64, 128 (shipped), 256 and 1,024, each
checked against an exact brute-force top-40.

    .venv/bin/python bench/bytes.py             # 10,000 memories per store
    .venv/bin/python bench/bytes.py --quick     # 2,000 (old sessions store: 100)
    .venv/bin/python bench/bytes.py --prototypes
"""

from __future__ import annotations

import hashlib
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h

DIM = 384
STAMP = "2026-03-01T12:00:00.000000Z"
KNN_K = 40
QUERIES = 50

Owner = Callable[[int], tuple[str, str]]


def spread(name: str) -> Owner:
    if name == "sessions":
        return lambda i: ("session", f"sess-{i:06d}")
    return lambda i: ("agent", f"agent-{i % 10:02d}")


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype("<f4")
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# -- building ----------------------------------------------------------------------------------------
def write_rows(engine: Any, texts: list[str], owner_of: Owner) -> list[int]:
    """Write the memories through the daemon's write path (row, FTS, audit); return their seqs."""
    from sqlalchemy import text

    from memoryd.clock import parse_rfc3339
    from memoryd.store import memories as mem
    from memoryd.store.memories import NewMemory, WriteContext
    from memoryd.store.schema import SCOPE_KEY
    from memoryd.store.writes import WriteUnit, commit_units

    ctx = WriteContext(actor="bench:bytes", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)
    units = []
    for start in range(0, len(texts), 500):
        items = []
        for i in range(start, min(len(texts), start + 500)):
            scope, owner = owner_of(i)
            params = {"content": texts[i], "scope": scope, "kind": "fact", SCOPE_KEY[scope]: owner}
            items.append(NewMemory(content=texts[i], kind="fact", scope=scope, owner=owner,
                                   request_hash=mem.request_hash(params), **{SCOPE_KEY[scope]: owner}))
        units.append(WriteUnit(items, actor="bench"))
    for unit in units:  # one transaction per 500, as the group committer batches
        commit_units(engine, [unit], ctx, parse_rfc3339(STAMP))
    with engine.connect() as conn:
        return [int(s) for s in conn.execute(text("SELECT seq FROM memories ORDER BY seq")).scalars()]


def build(db: Path, layout: str, texts: list[str], owner_of: Owner, vecs: np.ndarray) -> float:
    """A store of ``layout`` ('old' or 'new'); returns the seconds it took."""
    from alembic import command
    from sqlalchemy import text

    from memoryd.store import migrate, vectors
    from memoryd.store.engine import create_store_engine

    t0 = time.perf_counter()
    engine = create_store_engine(f"sqlite:///{db}")
    if layout == "old":
        cfg = migrate._alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0006")
    else:
        migrate.upgrade(engine)
    seqs = write_rows(engine, texts, owner_of)
    for start in range(0, len(seqs), 1024):  # the embed pass's batch
        rows = [{"memory_seq": s, "model": "all-MiniLM-L6-v2", "dim": DIM, "vector": v.tobytes(),
                 "content_hash": hashlib.sha256(texts[start + j].encode()).hexdigest(),
                 "embedded_at": STAMP}
                for j, (s, v) in enumerate(zip(seqs[start:start + 1024], vecs[start:start + 1024],
                                               strict=True))]
        with engine.begin() as conn:
            if layout == "new":
                vectors.upsert(conn, rows)
                continue
            conn.execute(text("INSERT INTO memory_vectors (memory_seq, model, dim, vector, content_hash, "
                              "embedded_at) VALUES (:memory_seq, :model, :dim, :vector, :content_hash, "
                              ":embedded_at)"), rows)
            conn.execute(text(
                "INSERT INTO memory_vec (memory_seq, embedding, scope_key, status, kind) "
                "SELECT m.seq, v.vector, m.scope || ':' || m.owner, m.status, m.kind FROM memory_vectors v "
                "JOIN memories m ON m.seq = v.memory_seq WHERE v.memory_seq BETWEEN :lo AND :hi"),
                {"lo": rows[0]["memory_seq"], "hi": rows[-1]["memory_seq"]})
    engine.dispose()
    return time.perf_counter() - t0


# -- measuring --------------------------------------------------------------------------------------
GROUPS = (("vectors", ("memory_vec", "memory_vectors", "vector_", "sqlite_autoindex_memory_vec",
                       "sqlite_autoindex_vector_")),
          ("full-text", ("memories_fts",)),
          ("memories", ("memories", "ix_memories", "sqlite_autoindex_memories")),
          ("audit", ("audit_events", "ix_audit")))


def checkpoint(db: Path) -> None:
    from memoryd.store import driver

    raw = driver.connect(str(db))
    try:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        raw.close()


def measure(db: Path, n: int) -> dict[str, Any]:
    """File size, content bytes, bytes per memory beyond text, and a per-table breakdown."""
    checkpoint(db)
    size = db.stat().st_size
    # The standard library's SQLite has dbstat; it reads pages only (no sqlite-vec needed).
    conn = sqlite3.connect(str(db))
    try:
        content = int(conn.execute("SELECT sum(length(CAST(content AS BLOB))) FROM memories").fetchone()[0])
        tables = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0]) * int(
            conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    groups: dict[str, int] = {}
    for name, pages in tables.items():
        label = next((g for g, prefixes in GROUPS if any(name.startswith(p) for p in prefixes)), "other")
        groups[label] = groups.get(label, 0) + int(pages)
    return {"n": n, "file_bytes": size, "content_bytes": content, "free_bytes": free,
            "per_memory_beyond_text": (size - content) / n,
            "per_memory_by_group": {g: b / n for g, b in sorted(groups.items())}}


def knn_p50(db: Path, layout: str, key: str, seed: int) -> float:
    """p50 ms of the daemon's first KNN fetch (k=40) for one reader key, on the driver."""
    from memoryd.store import driver

    conn = driver.connect(str(db))
    blob_queries = [q.tobytes() for q in unit_vectors(QUERIES, seed)]
    if layout == "old":
        def run(blob: bytes) -> None:
            conn.execute("SELECT memory_seq, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? "
                         "AND scope_key = ? AND status IN ('active')", (blob, KNN_K, key)).fetchall()
    else:
        from memoryd.store.vectors import BUCKETS

        def run(blob: bytes) -> None:
            (oid,) = conn.execute("SELECT id FROM vector_owners WHERE scope_key = ?", (key,)).fetchone()
            conn.execute("SELECT memory_seq, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? "
                         "AND bucket = ? AND owner_id = ? AND status IN ('active')",
                         (blob, KNN_K, oid % BUCKETS, oid)).fetchall()
    run(blob_queries[0])
    times = []
    for blob in blob_queries:
        t0 = time.perf_counter()
        run(blob)
        times.append((time.perf_counter() - t0) * 1000)
    conn.close()
    return statistics.median(times)


def migrate_and_vacuum(db: Path) -> dict[str, Any]:
    """Migrate an old store to head and reclaim its free pages as the daemon's start does."""
    from memoryd.store import migrate, vectors
    from memoryd.store.engine import create_store_engine

    checkpoint(db)
    before = db.stat().st_size
    engine = create_store_engine(f"sqlite:///{db}")
    t0 = time.perf_counter()
    migrate.upgrade(engine)
    migrate_s = time.perf_counter() - t0
    checkpoint(db)
    migrated = db.stat().st_size
    t0 = time.perf_counter()
    reclaimed = vectors.reclaim_space(engine)
    vacuum_s = time.perf_counter() - t0
    engine.dispose()
    checkpoint(db)
    return {"bytes_before": before, "bytes_after_migration": migrated, "migrate_s": migrate_s,
            "vacuumed": reclaimed is not None, "bytes_after_vacuum": db.stat().st_size, "vacuum_s": vacuum_s}


# -- layouts considered ----------------------------------------------------------------------------
PROTOTYPES = {
    "pair partitions (old)": "scope_key text partition key, status text, kind text",
    "scope partitions + owner filter": "scope text partition key, owner_id integer, status text, kind text",
    "16 owner buckets, chunk 64": "bucket integer partition key, owner_id integer, status text, kind text, "
                                  "chunk_size=64",
    "16 owner buckets, chunk 128 (shipped)": "bucket integer partition key, owner_id integer, status text, "
                                             "kind text, chunk_size=128",
    "16 owner buckets, chunk 256": "bucket integer partition key, owner_id integer, status text, kind text, "
                                   "chunk_size=256",
    "16 owner buckets, chunk 1024": "bucket integer partition key, owner_id integer, status text, kind text",
}


def search_owner(i: int) -> tuple[str, str]:
    """bench/search.py's spread: 80% ten agents, 10% two users, 10% org."""
    slot = i % 20
    if slot < 16:
        return "agent", f"agent-{slot % 10:02d}"
    if slot < 18:
        return "user", f"user-{slot % 2}"
    return "org", ""


def prototypes(root: Path, n: int) -> dict[str, Any]:
    """KNN p50 of each considered layout at ``n`` vectors, interleaved query by query, and whether
    each matched the exact top-40 on every query."""
    from memoryd.store import driver

    db = root / "prototypes.db"
    conn = driver.connect(str(db))
    conn.isolation_level = None
    conn.execute("PRAGMA journal_mode = wal")
    conn.execute("PRAGMA mmap_size = 4294967296")
    vecs = unit_vectors(n, seed=13)
    owners = [search_owner(i) for i in range(n)]
    ids: dict[str, int] = {}
    for scope, owner in owners:
        ids.setdefault(f"{scope}:{owner}", len(ids) + 1)
    tables = {}
    for t, (name, columns) in enumerate(PROTOTYPES.items()):
        table = f"proto{t}"
        tables[name] = table
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING vec0(memory_seq integer primary key, "
                     f"embedding float[{DIM}] distance_metric=cosine, {columns})")
        conn.execute("BEGIN")
        for i, ((scope, owner), v) in enumerate(zip(owners, vecs, strict=True)):
            oid = ids[f"{scope}:{owner}"]
            first: Any = (f"{scope}:{owner}",) if t == 0 else (scope, oid) if t == 1 else (oid % 16, oid)
            conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * (len(first) + 4))})",
                         (i + 1, v.tobytes(), *first, "active", "fact"))
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    reader = [("agent", "agent-00"), ("user", "user-0"), ("org", "")]
    visible = np.array([f"{s}:{o}" in {f"{a}:{b}" for a, b in reader} for s, o in owners])

    def knn(name: str, q: np.ndarray) -> list[int]:
        table, blob, hits = tables[name], q.tobytes(), []
        for scope, owner in reader:
            key, oid = f"{scope}:{owner}", ids[f"{scope}:{owner}"]
            if name.startswith("pair"):
                where, args = "scope_key = ?", (key,)
            elif name.startswith("scope"):
                where, args = "scope = ? AND owner_id = ?", (scope, oid)
            else:
                where, args = "bucket = ? AND owner_id = ?", (oid % 16, oid)
            hits += conn.execute(f"SELECT memory_seq, distance FROM {table} WHERE embedding MATCH ? "
                                 f"AND k = ? AND {where} AND status IN ('active')",
                                 (blob, KNN_K, *args)).fetchall()
        hits.sort(key=lambda r: r[1])
        return [s for s, _ in hits[:KNN_K]]

    names = list(PROTOTYPES)
    samples: dict[str, list[float]] = {name: [] for name in names}
    exact = dict.fromkeys(names, 0)
    queries = unit_vectors(QUERIES, seed=17)
    for qi, q in enumerate(queries):
        d = 1 - vecs @ q
        d[~visible] = np.inf
        truth = [int(i) + 1 for i in np.argsort(d)[:KNN_K]]
        shift = qi % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = time.perf_counter()
            got = knn(name, q)
            samples[name].append((time.perf_counter() - t0) * 1000)
            exact[name] += got == truth
    conn.close()
    return {name: {"knn_p50_ms": statistics.median(samples[name]), "exact_queries": exact[name],
                   "queries": len(queries)} for name in names}


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline=('the old vector layout (migrations up to 0006) on the same memories and vectors; '
                           'recall against an exact brute-force top-40.'))
    p.add_argument("--n", type=int, default=None, help="memories per store (default 10,000)")
    p.add_argument("--old-sessions", type=int, default=None,
                   help="memories in the old layout's sessions store (default 300: ~480 MB)")
    p.add_argument("--prototypes", action="store_true",
                   help="also time the KNN of the layouts considered, at 100,000 vectors (--quick: 20,000)")
    args = p.parse_args()
    n = args.n or (2000 if args.quick else 10_000)
    n_old_sessions = args.old_sessions or (100 if args.quick else 300)
    h.banner("bytes", f"bytes per memory beyond text at {n:,} memories, old layout vs new", args.quick)
    texts = h.dev_notes(n, seed=5)
    vecs = unit_vectors(n, seed=9)
    results: dict[str, Any] = {"n": n, "old_sessions_n": n_old_sessions, "text": h.text_stats(texts),
                               "stores": {}}
    rows = []
    with h.workdir("bytes", keep=args.keep) as root:
        for spread_name, reader in (("sessions", "session:sess-000007"), ("owners10", "agent:agent-03")):
            for layout in ("old", "new"):
                count = n_old_sessions if (layout, spread_name) == ("old", "sessions") else n
                db = root / f"{layout}-{spread_name}.db"
                build_s = build(db, layout, texts[:count], spread(spread_name), vecs[:count])
                m = measure(db, count)
                m["build_s"] = build_s
                m["knn_p50_ms"] = knn_p50(db, layout, reader, seed=77)
                results["stores"][f"{layout}/{spread_name}"] = m
                g = m["per_memory_by_group"]
                rows.append([f"{layout} / {spread_name}", count, m["file_bytes"] / 2**20,
                             m["per_memory_beyond_text"], g.get("vectors", 0), g.get("memories", 0),
                             g.get("full-text", 0), g.get("audit", 0), g.get("other", 0), m["knn_p50_ms"]])
                print(f"  built {layout}/{spread_name}: {count:,} memories in {build_s:.1f} s", flush=True)
        h.print_table("bytes per memory (after a WAL checkpoint)",
                      ["layout / spread", "memories", "file MiB", "beyond text", "vectors", "memories",
                       "full-text", "audit", "other", "KNN p50 ms"], rows)
        mig = migrate_and_vacuum(root / "old-sessions.db")
        results["migration_of_old_sessions_store"] = mig
        print(f"\n  migrating the old sessions store ({n_old_sessions} memories) to 0007: "
              f"{mig['bytes_before'] / 2**20:.1f} MiB -> {mig['bytes_after_migration'] / 2**20:.1f} MiB in "
              f"{mig['migrate_s']:.1f} s; vacuumed at start: {mig['bytes_after_vacuum'] / 2**20:.2f} MiB "
              f"in {mig['vacuum_s']:.1f} s")
        after = measure(root / "old-sessions.db", n_old_sessions)
        results["migrated_old_sessions_store"] = after
        print(f"  its bytes per memory beyond text now: {after['per_memory_beyond_text']:.0f}")
        if args.prototypes:
            size = 20_000 if args.quick else 100_000
            proto = prototypes(root, size)
            results["prototypes"] = {"n": size, "layouts": proto}
            h.print_table(f"layouts considered: KNN for one reader at {size:,} vectors (in process, "
                          "interleaved)", ["layout", "p50 ms", "exact top-40"],
                          [[name, r["knn_p50_ms"], f"{r['exact_queries']}/{r['queries']}"]
                           for name, r in proto.items()])
    h.save("bytes", results, args.quick)


if __name__ == "__main__":
    main()
