"""What serializing audit appends costs on PostgreSQL: writes with and without the lock.

Daemons sharing one PostgreSQL database append to one audit hash chain. Each
append reads the chain's head and inserts after it, so the write transaction
takes ``pg_advisory_xact_lock`` first (store/postgres/backend.py
``serialize_audit``) and holds it until commit: one appender at a time.

This runs the store's group-commit path (``store.writes.commit_units``, one
memory per commit, as a lone ``memory.write`` commits) from two engines (two
daemons' connection pools) with THREADS writer threads each, for a fixed
window, twice on fresh databases of one embedded PostgreSQL 18.6 server:

* **with the lock** (what ships);
* **without it** (``serialize_audit`` replaced by a no-op: the baseline of
  the same run), which also shows why the lock is there: the chain is then
  checked and is expected to break.

It prints writes/s, commit latency p50/p99 and whether the chain verifies,
and the ratio of the two throughputs.

    .venv/bin/python bench/pg_audit_lock.py            # 10 s per series
    .venv/bin/python bench/pg_audit_lock.py --quick    # 4 s per series
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.postgres import start_server, stop_server
from tests.unit.helpers import build_memory

from _harness import banner, latency_summary, parser, print_table, save

ENGINES = 2
THREADS = 3  # writer threads per engine


def series(url: str, window_s: float, locked: bool) -> dict[str, Any]:
    from memoryd.clock import utcnow
    from memoryd.passes.registry import ON_WRITE
    from memoryd.store import audit
    from memoryd.store.engine import create_store_engine, read_only
    from memoryd.store.migrate import upgrade
    from memoryd.store.postgres.backend import PostgresBackend
    from memoryd.store.writes import WriteContext, WriteUnit, commit_units

    engines = [create_store_engine(url) for _ in range(ENGINES)]
    upgrade(engines[0])
    ctx = WriteContext(actor="bench", passes=list(ON_WRITE), max_attempts=5, idempotency_ttl_s=86400.0)
    original = PostgresBackend.serialize_audit
    if not locked:
        PostgresBackend.serialize_audit = lambda self, conn: None  # type: ignore[method-assign]
    lat: list[list[float]] = [[] for _ in range(ENGINES * THREADS)]
    errors: list[BaseException] = []
    stop_at = time.monotonic() + window_s

    def writer(slot: int, engine: Any) -> None:
        owner = f"agent{slot}"
        n = 0
        try:
            while time.monotonic() < stop_at:
                item = build_memory(f"writer {slot} note {n}", owner=owner)
                t0 = time.perf_counter()
                commit_units(engine, [WriteUnit([item], actor=owner)], ctx, utcnow())
                lat[slot].append(time.perf_counter() - t0)
                n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(e * THREADS + t, engines[e]))
               for e in range(ENGINES) for t in range(THREADS)]
    started = time.perf_counter()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(window_s + 120)
    finally:
        PostgresBackend.serialize_audit = original  # type: ignore[method-assign]
    took = time.perf_counter() - started
    with read_only(engines[0]) as conn:
        events, broken = audit.verify(conn)
    for engine in engines:
        engine.dispose()
    samples = [x for per in lat for x in per]
    return {"locked": locked, "writes": len(samples), "per_s": len(samples) / took, "errors": len(errors),
            "first_error": repr(errors[0])[:200] if errors else None,
            "audit_events": events, "chain_breaks_at": broken, **latency_summary(samples)}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--window", type=float, default=None, help="seconds per series (10; --quick 4)")
    args = p.parse_args()
    window = args.window or (4.0 if args.quick else 10.0)
    banner("pg_audit_lock", f"{ENGINES} engines x {THREADS} writers, one memory per commit, "
           f"{window:.0f} s per series, with and without the audit lock", args.quick)
    server = start_server()
    rows = []
    try:
        for locked in (False, True):
            with server.database("audit") as url:
                rows.append(series(url, window, locked))
    finally:
        stop_server(server)
    print_table("audit appends on PostgreSQL", ["audit lock", "writes", "writes/s", "p50 ms", "p99 ms",
                                                 "chain", "errors"],
                [["held" if r["locked"] else "none (baseline)", r["writes"], r["per_s"], r["p50_ms"],
                  r["p99_ms"], "verifies" if r["chain_breaks_at"] is None else
                  f"breaks at event {r['chain_breaks_at']}", r["errors"]] for r in rows])
    base, held = rows
    print(f"  with the lock: {held['per_s'] / base['per_s']:.2f} x the throughput without it")
    save("pg_audit_lock", {"engines": ENGINES, "threads": THREADS, "window_s": window, "rows": rows},
         args.quick)


if __name__ == "__main__":
    main()
