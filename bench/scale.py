"""PostgreSQL write scaling (issue 13): writes/s and ack p99 through 1, 2 and 3 daemons sharing
one database, beside a raw single-row ``INSERT … COMMIT`` loop on the same server.

Starts an embedded PostgreSQL 18 + pgvector 0.8 (tests/postgres.py). For each
daemon count, a fresh database and that many ``memoryd run --embedder none``
daemons on it (embed jobs just queue); C client threads (default 16, one
process) spread over the daemons each send ``memory.write`` one after another.
The raw baseline runs before and after the daemons: one connection, one
memory-sized row per durable commit (``synchronous_commit = on``), the median
of the two is the reference.

    PYTHONPATH=src .venv/bin/python bench/scale.py                 # 3,000 writes per phase
    PYTHONPATH=src .venv/bin/python bench/scale.py --writes 600    # smoke run

Not measured here yet: hybrid search p50 at 100k memories against raw tsvector +
pgvector queries, and embed drain with 1 and 2 model-running daemons.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.harness import DaemonHandle, hermetic_env
from tests.postgres import PgServer, start_server, stop_server

TEXT = "The staging deploy waits for the smoke tests; rotate the API token monthly. note {i} of client {c}"


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw_loop(server: PgServer, n: int) -> dict[str, float]:
    """Single-row durable commits of memory-sized rows on one connection."""
    import psycopg

    with server.database("raw") as url, psycopg.connect(url.replace("+psycopg", "")) as conn:
        settings = conn.execute(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')").fetchone() or ("?", "?")
        print(f"server: fsync={settings[0]}, synchronous_commit={settings[1]}")
        conn.execute("CREATE TABLE raw_writes (id bigserial PRIMARY KEY, content text NOT NULL)")
        conn.commit()
        lat = []
        started = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            conn.execute("INSERT INTO raw_writes (content) VALUES (%s)", (TEXT.format(i=i, c=0),))
            conn.commit()
            lat.append((time.perf_counter() - t) * 1000)
        wall = time.perf_counter() - started
    return {"writes_s": n / wall, "p50_ms": _p(lat, 0.5), "p99_ms": _p(lat, 0.99)}


def daemons_phase(server: PgServer, root: Path, n_daemons: int, clients: int, n: int) -> dict[str, float]:
    with server.database("scale") as url:
        handles = []
        for d in range(n_daemons):
            home = root / f"p{n_daemons}d{d}"
            home.mkdir(mode=0o700)
            h = DaemonHandle(name=home.name, home=home, data_dir=home / "data", socket=home / "s" / "m.sock",
                             env=hermetic_env(home), db_url=url)
            handles.append(h.start())
        per_client = n // clients
        lat: list[float] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            mine = []
            with handles[c % n_daemons].client(timeout_s=120) as conn:
                for i in range(per_client):
                    t = time.perf_counter()
                    conn.call("memory.write", {"content": TEXT.format(i=i, c=c), "agent_id": "bench"})
                    mine.append((time.perf_counter() - t) * 1000)
            with lock:
                lat.extend(mine)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        for h in handles:
            h.close_clients()
            h.stop()
    return {"writes_s": len(lat) / wall, "p50_ms": _p(lat, 0.5), "p99_ms": _p(lat, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    server = start_server()
    root = Path(tempfile.mkdtemp(prefix="mdsc-", dir="/tmp"))
    try:
        before = raw_loop(server, args.writes)
        phases: dict[int, dict[str, float]] = {}
        for n_daemons in (1, 2, 3):
            phases[n_daemons] = daemons_phase(server, root, n_daemons, args.clients, args.writes)
        after = raw_loop(server, args.writes)
        raw: dict[str, Any] = {k: statistics.median([before[k], after[k]]) for k in before}
        print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"raw INSERT … COMMIT loop: {raw['writes_s']:.0f} writes/s, p50 {raw['p50_ms']:.2f} ms, "
              f"p99 {raw['p99_ms']:.2f} ms (before {before['writes_s']:.0f}, after {after['writes_s']:.0f})")
        for n_daemons, r in phases.items():
            print(f"{n_daemons} daemon(s), {args.clients} clients: {r['writes_s']:.0f} writes/s "
                  f"(x{r['writes_s'] / raw['writes_s']:.2f} of raw), ack p50 {r['p50_ms']:.2f} ms, "
                  f"p99 {r['p99_ms']:.2f} ms")
    finally:
        stop_server(server)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
