"""What serializing audit appends costs on PostgreSQL: audit lanes against one chain.

Daemons sharing one PostgreSQL database append to one audit log. Until
migration 0010 it was one hash chain: each append read the head and inserted
after it, under ``pg_advisory_xact_lock`` held to commit, one appender at a
time across the cluster. Now each write transaction takes the first audit lane
no other transaction holds (``FOR UPDATE SKIP LOCKED`` on the lane's head row,
store/audit.py) and appenders never wait on each other.

This runs the store's group-commit path (``store.writes.commit_units``, one
memory per commit, as a lone ``memory.write`` commits) from two engines (two
daemons' connection pools) with THREADS writer threads each, for a fixed
window, twice on fresh databases of one embedded PostgreSQL 18.6 server:

* **one lane** (the baseline: the lane pick waits for the lane instead of
  skipping it, so every appender queues for lane 0 until the holder commits,
  as every appender queued for the advisory lock before 0010);
* **lanes**, each transaction still sending its own ``NOTIFY`` (as a pass's
  enqueue does);
* **lanes, NOTIFY after commit** (what the daemon's group committer does: its
  connections defer the NOTIFY to a notifier thread, store/postgres/notify.py).

It prints writes/s, commit latency p50/p99, how many lanes were used and
whether the log verifies, and the ratio of the two throughputs. ``--watch``
also samples pg_stat_activity and pg_locks (bench/_pgwatch.py) during each
series.

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
from _pgwatch import Sampler, print_watch

ENGINES = 2
THREADS = 3  # writer threads per engine


def series(url: str, window_s: float, lanes: bool, server: Any = None,
           deferred: bool = False) -> dict[str, Any]:
    from memoryd.clock import utcnow
    from memoryd.passes.registry import ON_WRITE
    from memoryd.store import audit, prepared
    from memoryd.store.engine import create_store_engine, read_only
    from memoryd.store.migrate import upgrade
    from memoryd.store.postgres import notify
    from memoryd.store.postgres.backend import PostgresBackend
    from memoryd.store.writes import WriteContext, WriteUnit, commit_units

    engines = [create_store_engine(url) for _ in range(ENGINES)]
    upgrade(engines[0])
    ctx = WriteContext(actor="bench", passes=list(ON_WRITE), max_attempts=5, idempotency_ttl_s=86400.0)
    original = PostgresBackend.lock_audit_lane
    prepared._cache.clear()  # the lane pick is compiled once per process: compile this series' own
    if not lanes:  # wait for the lane instead of skipping it: one chain, one appender at a time
        PostgresBackend.lock_audit_lane = lambda self, pick: pick.with_for_update()  # type: ignore[method-assign]
    lat: list[list[float]] = [[] for _ in range(ENGINES * THREADS)]
    errors: list[BaseException] = []
    stop_at = time.monotonic() + window_s

    notifiers = [notify.Notifier(engine).start() for engine in engines] if deferred else []

    def writer(slot: int, engine: Any) -> None:
        owner = f"agent{slot}"
        n = 0
        backend = PostgresBackend()
        try:
            with engine.connect() as kept:
                if deferred:  # as the daemon's committer: NOTIFY after the commit, from the notifier
                    backend.defer_notify(kept)
                while time.monotonic() < stop_at:
                    item = build_memory(f"writer {slot} note {n}", owner=owner)
                    t0 = time.perf_counter()
                    commit_units(kept, [WriteUnit([item], actor=owner)], ctx, utcnow())
                    if deferred and backend.take_notify(kept):
                        notifiers[slot // THREADS].request()
                    lat[slot].append(time.perf_counter() - t0)
                    n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(e * THREADS + t, engines[e]))
               for e in range(ENGINES) for t in range(THREADS)]
    sampler = Sampler(server) if server is not None else None
    started = time.perf_counter()
    try:
        if sampler is not None:
            sampler.__enter__()
        for t in threads:
            t.start()
        for t in threads:
            t.join(window_s + 120)
    finally:
        if sampler is not None:
            sampler.__exit__()
        PostgresBackend.lock_audit_lane = original  # type: ignore[method-assign]
        prepared._cache.clear()
    took = time.perf_counter() - started
    for notifier in notifiers:
        notifier.stop()
    label = ("lanes, NOTIFY after commit" if deferred else "lanes") if lanes else "one lane"
    if sampler is not None:
        print_watch(label, sampler, None)
    with read_only(engines[0]) as conn:
        verdict = audit.check(conn)
    for engine in engines:
        engine.dispose()
    samples = [x for per in lat for x in per]
    return {"lanes": lanes, "deferred_notify": deferred, "label": label, "writes": len(samples),
            "per_s": len(samples) / took, "errors": len(errors),
            "first_error": repr(errors[0])[:200] if errors else None, "audit_events": verdict.events,
            "lanes_used": len(verdict.heads), "verifies": verdict.ok, **latency_summary(samples)}


def main() -> None:
    p = parser(__doc__.splitlines()[0],
               baseline=('one lane (every append serialised, as before migration 0010), same server and '
                         'window.'))
    p.add_argument("--window", type=float, default=None, help="seconds per series (10; --quick 4)")
    p.add_argument("--watch", action="store_true", help="sample pg_stat_activity and pg_locks meanwhile")
    args = p.parse_args()
    window = args.window or (4.0 if args.quick else 10.0)
    banner("pg_audit_lock", f"{ENGINES} engines x {THREADS} writers, one memory per commit, "
           f"{window:.0f} s per series, one audit lane against lanes", args.quick)
    server = start_server()
    rows = []
    try:
        for lanes, deferred in ((False, False), (True, False), (True, True)):
            with server.database("audit") as url:
                rows.append(series(url, window, lanes, server if args.watch else None, deferred))
    finally:
        stop_server(server)
    print_table("audit appends on PostgreSQL", ["audit log", "writes", "writes/s", "p50 ms", "p99 ms",
                                                 "lanes used", "log", "errors"],
                [[r["label"], r["writes"], r["per_s"],
                  r["p50_ms"], r["p99_ms"], r["lanes_used"], "verifies" if r["verifies"] else "BROKEN",
                  r["errors"]] for r in rows])
    base, lanes_only, ships = rows
    print(f"  lanes: {lanes_only['per_s'] / base['per_s']:.2f} x the throughput of one lane; with the "
          f"NOTIFY after commit (the daemon's committer): {ships['per_s'] / base['per_s']:.2f} x")
    save("pg_audit_lock", {"engines": ENGINES, "threads": THREADS, "window_s": window, "rows": rows},
         args.quick)


if __name__ == "__main__":
    main()
