"""The write path (issue 2): acknowledgement latency and group-commit throughput.

Starts a real daemon with ``--embedder none`` (so no model competes with the
write path for the CPUs; embed jobs just queue) and measures:

(a) one client, N ``memory.write`` calls one after another: p50/p99/mean ack
    latency and writes/s;
(b) C concurrent clients (default 4 and 16), each a separate process with its
    own connection, so the load generator is not serialised on one GIL:
    total writes/s and ack latency;
(c) the raw baseline, in the same run: single-row durable SQLite commits in a
    loop (WAL, synchronous=FULL, BEGIN IMMEDIATE, through
    memoryd.store.driver.connect) of rows the size of a memory, run before,
    between and after the daemon's phases (fsync cost drifts on a shared
    disk); the median rate is the reference;
(e) a ceiling: 16 clients calling daemon.ping, which does no store work at
    all, over the same socket and protocol: what any write path could reach
    at best on this machine with these clients;
(d) a diagnostic: memoryd.store.writes.commit_units in-process at 1, 8 and 64
    writes per transaction, to separate the store layer's CPU per write (which
    group commit cannot amortise) from the fsync (which it can).

(c') a second raw reference, once, after the daemon: one memory row per durable
    commit into memoryd's own migrated schema (its indexes and FTS5 trigger), by
    plain SQL, without the audit event, the jobs and the duplicate check. The
    issue's ratio stays (c); (c') shows what the row itself costs to store.

It prints daemon ÷ raw ratios. The issue's targets: group commit reaches a
ratio of at least 3 at 16 clients, and p99 stays under 10 ms. Each phase also
reports the daemon's CPU per write and the CPU other tenants of the machine
used meanwhile.

    .venv/bin/python bench/write.py            # full run (~2 min)
    .venv/bin/python bench/write.py --quick    # smoke run
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import secrets
import time
from pathlib import Path
from typing import Any

import _harness as h

AGENT = "bench-writer"


def write_params(content: str) -> dict[str, Any]:
    return {"content": content, "agent_id": AGENT}


# -- (c) raw baseline -----------------------------------------------------------
def _raw_connect(path: Path) -> Any:
    """A driver connection with the daemon's durability pragmas, explicit BEGIN/COMMIT."""
    from memoryd.store.driver import connect

    conn = connect(str(path))
    conn.isolation_level = None  # explicit BEGIN/COMMIT, as the daemon's engine does
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    conn.execute("PRAGMA synchronous=FULL")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert mode == "wal" and sync == 2, (mode, sync)
    return conn


def _commit_loop(conn: Any, texts: list[str], insert_sql: str, row: Any, warmup: int) -> dict[str, Any]:
    """One BEGIN IMMEDIATE / INSERT / COMMIT per text, timed."""

    def insert(text: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert_sql, row(text))
        conn.execute("COMMIT")

    for i in range(warmup):
        insert(f"warm-up row {i}")
    lat = []
    host = h.HostLoad()
    t_start = time.perf_counter()
    for text in texts:
        t0 = time.perf_counter()
        insert(text)
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t_start
    conn.close()
    return {"commits": len(texts), "wall_s": wall, "per_s": len(texts) / wall, "host": host.stop(),
            "latencies": lat, **h.latency_summary(lat)}


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def raw_commits(path: Path, texts: list[str], warmup: int = 20) -> dict[str, Any]:
    """One durable single-row commit per text into a bare table, on a fresh file."""
    conn = _raw_connect(path)
    conn.execute(
        "CREATE TABLE notes (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL, "
        "content_hash TEXT NOT NULL, recorded_at TEXT NOT NULL)"
    )
    return _commit_loop(
        conn, texts, "INSERT INTO notes (id, content, content_hash, recorded_at) VALUES (?, ?, ?, ?)",
        lambda text: ("mem_" + secrets.token_hex(13), text, hashlib.sha256(text.encode()).hexdigest(),
                      _stamp()),
        warmup)


def raw_schema_commits(path: Path, texts: list[str], warmup: int = 20) -> dict[str, Any]:
    """A second raw reference: one durable commit per memory row into memoryd's own schema
    (migrated store: the row, its five indexes and the FTS5 trigger), by plain SQL. No audit
    event, no job, no duplicate check: the storage cost of the row alone."""
    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine

    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    conn = _raw_connect(path)
    return _commit_loop(
        conn, texts,
        "INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, status, importance, "
        "importance_raw, valid_from, recorded_at, metadata) "
        "VALUES (?, ?, ?, 'note', 'agent', ?, ?, 'active', 0.5, 0.5, ?, ?, '{}')",
        lambda text: ("mem_" + secrets.token_hex(13), text, hashlib.sha256(text.encode()).hexdigest(),
                      AGENT, AGENT, _stamp(), _stamp()),
        warmup)


# -- (a) sequential ---------------------------------------------------------------
def sequential(daemon: h.Daemon, texts: list[str], warmup: int) -> dict[str, Any]:
    with daemon.client() as c:
        for text in h.dev_notes(warmup, seed=99, start=9_000_000):
            c.call("memory.write", write_params(text))
        before = c.call("daemon.status")["write_queue"]
        lat = []
        cpu0, gen0 = h.cpu_seconds(daemon.pid), time.process_time()
        host = h.HostLoad()
        t_start = time.perf_counter()
        for text in texts:
            t0 = time.perf_counter()
            c.call("memory.write", write_params(text))
            lat.append(time.perf_counter() - t0)
        wall = time.perf_counter() - t_start
        cpu, gen = h.cpu_seconds(daemon.pid) - cpu0, time.process_time() - gen0
        host_load = host.stop()
        after = c.call("daemon.status")["write_queue"]
    return {"clients": 1, "writes": len(texts), "errors": 0, "wall_s": wall, "per_s": len(texts) / wall,
            "host": host_load, **_groups(before, after), **_cpu(cpu, gen, wall, len(texts)),
            **h.latency_summary(lat)}


def _cpu(daemon_s: float, loadgen_s: float, wall: float, writes: int) -> dict[str, Any]:
    return {"daemon_cpu_s": daemon_s, "daemon_cpu_ms_per_write": daemon_s * 1000 / writes,
            "daemon_cpu_cores": daemon_s / wall, "loadgen_cpu_s": loadgen_s}


def _groups(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    batches = after["batches"] - before["batches"]
    writes = after["writes"] - before["writes"]
    return {"commit_batches": batches, "mean_group": writes / batches if batches else float("nan")}


# -- (b) concurrent clients (one process each) -----------------------------------------
def _client_proc(sock: str, idx: int, n: int, warmup: int, barrier: Any, out: Any,
                 method: str = "memory.write") -> None:
    from memoryd.service.client import Client, ClientError

    texts = h.dev_notes(n + warmup, seed=idx, start=(idx + 1) * 1_000_000)
    lat: list[float] = []
    errors = 0

    def params(text: str) -> dict[str, Any]:
        return write_params(text) if method == "memory.write" else {}

    with Client(sock, timeout_s=120.0) as c:
        for text in texts[:warmup]:
            c.call(method, params(text))
        barrier.wait()
        t_start, cpu0 = time.monotonic(), time.process_time()
        for text in texts[warmup:]:
            t0 = time.perf_counter()
            try:
                c.call(method, params(text))
            except ClientError:
                errors += 1  # e.g. 1004 overloaded; counted, not retried
                continue
            lat.append(time.perf_counter() - t0)
        t_end, cpu = time.monotonic(), time.process_time() - cpu0
    out.put((idx, lat, t_start, t_end, errors, cpu))


def concurrent(daemon: h.Daemon, clients: int, per_client: int, warmup: int,
               method: str = "memory.write") -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(clients + 1)  # the clients and this process
    out = ctx.Queue()
    before = daemon.call("daemon.status")["write_queue"]
    procs = [ctx.Process(target=_client_proc,
                         args=(str(daemon.socket), i, per_client, warmup, barrier, out, method))
             for i in range(clients)]
    for p in procs:
        p.start()
    barrier.wait(timeout=600)  # every client has connected and warmed up: the timed part begins
    cpu0 = h.cpu_seconds(daemon.pid)
    host = h.HostLoad()
    results = [out.get(timeout=600) for _ in procs]
    cpu = h.cpu_seconds(daemon.pid) - cpu0
    host_load = host.stop()
    for p in procs:
        p.join(60)
    after = daemon.call("daemon.status")["write_queue"]
    lat = [x for r in results for x in r[1]]
    errors = sum(r[4] for r in results)
    wall = max(r[3] for r in results) - min(r[2] for r in results)
    # The warm-up writes land in the group counts too; they are few.
    loadgen = sum(r[5] for r in results)
    return {"clients": clients, "writes": len(lat), "errors": errors, "wall_s": wall,
            "per_s": len(lat) / wall, "host": host_load, **_groups(before, after),
            **_cpu(cpu, loadgen, wall, len(lat)), **h.latency_summary(lat)}


# -- (d) the store layer alone ---------------------------------------------------------
def store_layer(path: Path, n: int, batch_sizes: tuple[int, ...] = (1, 8, 64)) -> list[dict[str, Any]]:
    """commit_units() in this process, no socket: what one write costs the store at each group size.

    This separates the SQL layer's CPU per write (which group commit cannot
    amortise) from the fsync per commit (which it can).
    """
    import logging

    import structlog

    from memoryd.clock import utcnow
    from memoryd.config import Config
    from memoryd.passes.registry import build_passes, write_passes
    from memoryd.service import validation
    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine
    from memoryd.store.memories import WriteContext
    from memoryd.store.writes import WriteUnit, commit_units

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    cfg = Config()
    ctx = WriteContext(actor="", passes=write_passes(build_passes()), max_attempts=5,
                       idempotency_ttl_s=cfg.idempotency_ttl_s)
    out = []
    for i, bs in enumerate(batch_sizes):
        texts = h.dev_notes(n, seed=50 + i, start=7_000_000 + i * n)
        units = [WriteUnit([validation.parse_write(write_params(t), cfg)], "bench") for t in texts]
        commit_units(engine, units[:bs], ctx, utcnow())  # warm the statement caches
        units = units[bs:]
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(0, len(units), bs):
            commit_units(engine, units[k:k + bs], ctx, utcnow())
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.append({"group": bs, "writes": len(units), "per_s": len(units) / wall,
                    "wall_ms_per_write": wall * 1000 / len(units),
                    "cpu_ms_per_write": cpu * 1000 / len(units),
                    "cpu_ceiling_per_s": len(units) / cpu if cpu else float("nan")})
    engine.dispose()
    return out


# -- main ---------------------------------------------------------------------------
def main() -> None:
    p = h.parser(__doc__.split("\n\n")[0],
                 baseline=('raw durable single-row SQLite commits in a loop, and one memory row per commit '
                           "into memoryd's schema by plain SQL, same run; daemon.ping as a ceiling."))
    p.add_argument("--clients", default="4,16", help="concurrency levels, comma-separated (default 4,16)")
    args = p.parse_args()
    args_clients = [int(x) for x in args.clients.split(",") if x.strip()]
    n_seq = 200 if args.quick else 2000
    per_client = 30 if args.quick else 300
    n_raw = 200 if args.quick else 1000
    prio = h.match_daemon_priority()
    h.banner("write", "the write path: memory.write ack latency and group-commit throughput vs raw SQLite "
             "commits", args.quick)
    print(f"priority: this benchmark, its load generators and raw baselines run at the daemon's "
          f"({prio}); each daemon inherits it")
    print("daemon runs with --embedder none: no model competes for the CPUs; embed jobs only queue.")
    seq_texts = h.dev_notes(n_seq, seed=1, start=0)
    raw_texts = h.dev_notes(n_raw, seed=2, start=5_000_000)
    print(f"content: developer notes, {h.fmt(h.text_stats(seq_texts)['mean_bytes'], 0)} bytes mean "
          f"({h.text_stats(seq_texts)['min_bytes']}..{h.text_stats(seq_texts)['max_bytes']}); "
          f"every write distinct (no duplicate short-cut)")

    raw: dict[str, dict[str, Any]] = {}
    with h.workdir("write", keep=args.keep) as root:
        # The raw baseline runs three times (before, between and after the daemon's
        # phases) because fsync cost on a shared disk drifts; the median is the reference.
        print("\nraw baseline (before the daemon) ...", flush=True)
        raw["before daemon"] = raw_commits(root / "raw-1.db", raw_texts)
        daemon = h.Daemon(root, embedder="none", label="daemon")
        try:
            daemon.start()
            print(f"daemon pid {daemon.pid} ready in {daemon.ready_s:.2f} s; sequential ...", flush=True)
            seq = sequential(daemon, seq_texts, warmup=50)
            print("raw baseline (daemon idle, between phases) ...", flush=True)
            raw["between phases"] = raw_commits(root / "raw-2.db", raw_texts)
            conc = []
            for c in args_clients:
                print(f"{c} concurrent clients x {per_client} writes ...", flush=True)
                conc.append(concurrent(daemon, c, per_client, warmup=5))
            print(f"ceiling: 16 clients x {per_client * 4} daemon.ping (no store work) ...", flush=True)
            ceiling = concurrent(daemon, 16, per_client * 4, warmup=5, method="daemon.ping")
            status = daemon.call("daemon.status")
        finally:
            code = daemon.stop()
        print("raw baseline (after the daemon) ...", flush=True)
        raw["after daemon"] = raw_commits(root / "raw-3.db", raw_texts)
        print("raw baseline, memoryd's schema (after the daemon) ...", flush=True)
        raw_schema = raw_schema_commits(root / "raw-schema.db", raw_texts)
        problems = daemon.errors()
        print("store layer in-process (no socket) ...", flush=True)
        try:
            layer = store_layer(root / "store-layer.db", 200 if args.quick else 1600)
        except Exception as exc:  # internals move; never lose the main figures to this diagnostic
            layer = []
            print(f"  skipped: {type(exc).__name__}: {exc}")

    raw_lat = [x for r in raw.values() for x in r.pop("latencies")]
    raw_ref = {"commits": len(raw_lat), "per_s": h.percentile([r["per_s"] for r in raw.values()], 50),
               **h.latency_summary(raw_lat)}
    h.print_table(
        f"(c) RAW BASELINE: single-row durable SQLite commits (WAL, synchronous=FULL, BEGIN IMMEDIATE), "
        f"{n_raw} rows of ~{h.fmt(h.text_stats(raw_texts)['mean_bytes'], 0)} bytes per run",
        ["run", "commits", "commits/s", "p50 ms", "p90 ms", "p99 ms", "mean ms", "others' CPU %"],
        [[name, r["commits"], r["per_s"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["mean_ms"],
          r["host"]["others_pct"] if "host" in r else float("nan")]
         for name, r in [*raw.items(), ("reference: median rate, pooled latencies", raw_ref)]],
        digits=3,
    )
    raw_schema.pop("latencies")
    h.print_table(
        "(c') second raw reference: one memory row per durable commit into memoryd's schema "
        "(indexes + FTS5 trigger; no audit, job or duplicate check)",
        ["run", "commits", "commits/s", "p50 ms", "p90 ms", "p99 ms", "mean ms", "others' CPU %"],
        [["after daemon", raw_schema["commits"], raw_schema["per_s"], raw_schema["p50_ms"],
          raw_schema["p90_ms"], raw_schema["p99_ms"], raw_schema["mean_ms"],
          raw_schema["host"]["others_pct"]]],
        digits=3,
    )
    rows = []
    for r in [seq, *conc]:
        r["ratio_vs_raw"] = h.ratio(r["per_s"], raw_ref["per_s"])
        label = "(a) sequential, 1 client" if r["clients"] == 1 else f"(b) {r['clients']} clients (processes)"
        rows.append([label, r["writes"], r["errors"], r["per_s"], r["p50_ms"], r["p90_ms"], r["p99_ms"],
                     r["max_ms"], r["mean_ms"], r["mean_group"], r["daemon_cpu_ms_per_write"],
                     r["daemon_cpu_cores"], r["host"]["others_pct"], r["ratio_vs_raw"]])
    h.print_table(
        "memoryd memory.write over the socket (--embedder none)",
        ["phase", "writes", "errors", "writes/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "mean ms",
         "writes/commit", "daemon CPU ms/write", "daemon cores", "others' CPU %", "÷ raw"],
        rows, digits=2,
    )
    print("  writes/commit: mean group-commit batch (daemon.status write_queue); "
          "daemon CPU: psutil, all threads;\n  clients are separate processes on the same CPUs (their CPU: "
          + ", ".join(f"{r['clients']}c {r['loadgen_cpu_s']:.1f} s" for r in [seq, *conc]) + ");\n"
          "  others' CPU %: share of all cores used by processes outside this benchmark (shared machine)")
    if layer:
        h.print_table(
            "(d) store layer alone: memoryd.store.writes.commit_units in-process, no socket",
            ["writes per commit", "writes", "writes/s", "wall ms/write", "CPU ms/write",
             "CPU-bound ceiling /s"],
            [[r["group"], r["writes"], r["per_s"], r["wall_ms_per_write"], r["cpu_ms_per_write"],
              r["cpu_ceiling_per_s"]] for r in layer],
            digits=3,
        )
    c16 = next((r for r in conc if r["clients"] == 16), conc[-1])
    print("\nratios (daemon writes/s ÷ raw commits/s measured in this run):")
    print(f"  sequential : {seq['ratio_vs_raw']:.2f}  ({seq['per_s']:.0f} / {raw_ref['per_s']:.0f})")
    print(f"  16 clients : {c16['ratio_vs_raw']:.2f}  ({c16['per_s']:.0f} / {raw_ref['per_s']:.0f})"
          f"   issue target >= 3")
    schema_ratio = h.ratio(c16["per_s"], raw_schema["per_s"])
    print(f"  16 clients ÷ the schema-row reference (c'): "
          f"{schema_ratio:.2f}  ({c16['per_s']:.0f} / {raw_schema['per_s']:.0f})"
          "   (for insight; the issue's figure is the ratio above)")
    print(f"  ceiling    : 16 clients calling daemon.ping (a no-op round trip on the same socket and "
          f"protocol): {ceiling['per_s']:.0f}/s = {h.ratio(ceiling['per_s'], raw_ref['per_s']):.2f} x raw;"
          f" p50 {ceiling['p50_ms']:.2f} ms, p99 {ceiling['p99_ms']:.2f} ms, daemon CPU "
          f"{ceiling['daemon_cpu_ms_per_write']:.3f} ms/call")
    print(f"  p99 ack    : sequential {seq['p99_ms']:.2f} ms, 16 clients {c16['p99_ms']:.2f} ms"
          f"   issue target < 10 ms")
    print(f"\ndaemon: {status['memories']}, embed queue ready {status['queues']['embed']['ready']}, "
          f"db {status['db']['bytes'] / 1e6:.1f} MB; SIGTERM exit {code} in {daemon.stop_s:.2f} s; "
          f"{len(problems)} warning/error log lines; daemon nice {daemon.nice}")
    for ev in problems[:5]:
        print(f"  log: {ev}")
    h.save("write", {
        "embedder": "none", "priority": prio, "daemon_nice": daemon.nice,
        "raw_runs": raw, "raw_reference": raw_ref, "raw_schema_row": raw_schema,
        "sequential": seq, "concurrent": conc, "store_layer": layer, "ping_ceiling_16": ceiling,
        "ratios": {"sequential": seq["ratio_vs_raw"], "clients_16": c16["ratio_vs_raw"]},
        "targets": {"ratio_16_min": 3, "p99_ms_max": 10},
        "daemon": {"exit_code": code, "stop_s": daemon.stop_s, "ready_s": daemon.ready_s,
                   "memories": status["memories"], "db_bytes": status["db"]["bytes"],
                   "log_problems": problems[:20]},
    }, args.quick)


if __name__ == "__main__":
    main()
