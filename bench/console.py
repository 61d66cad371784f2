"""``memoryd console``: start-up to the first page, and each page's time at 100k memories.

Builds a SQLite store of N memories directly (migrated, rows inserted through
SQLAlchemy, the FTS index rebuilt from them, as bench/search.py builds its
stores, without vectors: the console never reads one), plus 40 open supersede
proposals and 60 dead embed jobs, starts a real daemon on it (``--embedder
none``), then:

* start-up: ``memoryd console --json`` spawned, its URL read, the token
  exchanged and the overview fetched; wall time from the spawn to the
  overview's last byte (goal < 1 s), five times;
* each page over real HTTP on one keep-alive connection, ``--rounds`` times
  in a rotating order (goal < 200 ms at 100k), beside the raw cost of the same
  operator calls made directly on the socket with memoryd's sync client (the
  console's own overhead is the difference: templates, charts, HTTP).

The machine is shared: the figures are noisy; compare the ratio to the raw calls.

    .venv/bin/python bench/console.py            # 100k
    .venv/bin/python bench/console.py --quick    # 10k, fewer rounds
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _harness as h

READER = {"agent_id": "agent-00", "user_id": "user-0"}
MEMORYD = Path(sys.executable).with_name("memoryd")


def owner_of(i: int) -> dict[str, Any]:
    """80% ten agents, 10% two users, 10% org (bench/search.py's spread)."""
    slot = i % 20
    if slot < 16:
        return {"scope": "agent", "owner": f"agent-{slot % 10:02d}", "agent_id": f"agent-{slot % 10:02d}"}
    if slot < 18:
        return {"scope": "user", "owner": f"user-{slot % 2}", "user_id": f"user-{slot % 2}"}
    return {"scope": "org", "owner": ""}


def build_store(data_dir: Path, n: int) -> dict[str, Any]:
    """``n`` memories with FTS rows; 40 open proposals; 60 dead embed jobs."""
    from sqlalchemy import insert, text

    from memoryd.clock import to_rfc3339
    from memoryd.store import migrate, proposals
    from memoryd.store.engine import create_store_engine
    from memoryd.store.ids import new_memory_id
    from memoryd.store.schema import jobs, memories

    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = create_store_engine(f"sqlite:///{data_dir / 'memoryd.db'}")
    t0 = time.perf_counter()
    migrate.upgrade(engine)
    texts = h.dev_notes(n, seed=11)
    base = time.time() - n  # one row a second, so the time filter has a spread
    ids: list[str] = []
    with engine.begin() as conn:
        for start in range(0, n, 5000):
            rows = []
            for i in range(start, min(n, start + 5000)):
                stamp = to_rfc3339(datetime.fromtimestamp(base + i, UTC))
                mid = new_memory_id()
                ids.append(mid)
                rows.append({"id": mid, "content": texts[i], "kind": "fact", "status": "active",
                             "content_hash": hashlib.sha256(texts[i].encode()).hexdigest(),
                             "importance": 0.5, "importance_raw": 0.5, "valid_from": stamp,
                             "recorded_at": stamp, "metadata": {}, "derived": False, "agent_id": None,
                             "user_id": None, **owner_of(i)})
            conn.execute(insert(memories), rows)
        conn.execute(text("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')"))
        now = datetime.now(UTC)
        for j in range(40):
            a, b = ids[j * 20], ids[j * 20 + 20]  # two rows of the same agent
            proposals.propose(conn, kind="supersede", memory_ids=[a, b], reason=f"bench proposal {j}",
                              payload={"old_id": a, "new_id": b}, created_by="reflect", now=now)
        t = time.time()
        conn.execute(insert(jobs), [
            {"pass": "embed", "target": ids[-1 - j], "state": "dead", "attempts": 5, "payload": {},
             "max_attempts": 5, "run_after": t, "created_at": t, "updated_at": t, "finished_at": t,
             "last_error": "bench: every attempt failed"} for j in range(60)])
    engine.dispose()
    return {"n": n, "build_s": round(time.perf_counter() - t0, 1), "sample_id": ids[n // 2]}


class Http:
    """One keep-alive connection to the console, logged in."""

    def __init__(self, url: str):
        self.port = int(url.split(":")[2].split("/")[0])
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        self.conn.connect()
        # As a browser does: without it a request's last segment waits for a delayed ACK (40 ms).
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answer = self.request("GET", "/" + url.split("/", 3)[3])
        assert answer[0] == 303, answer
        self.cookie = answer[2].split(";")[0]

    def request(self, method: str, path: str, body: str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        return r.status, r.read(), r.getheader("set-cookie", "")

    def get(self, path: str) -> tuple[int, bytes]:
        status, body, _ = self.request("GET", path, headers={"Cookie": self.cookie})
        return status, body


def start_console(daemon: h.Daemon) -> tuple[subprocess.Popen[str], str, float]:
    """Spawn ``memoryd console --json``; return it, its URL and the seconds to the first page."""
    import os

    env = {**os.environ, "MEMORYD_SOCKET": str(daemon.socket)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(MEMORYD), "console", "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    url = json.loads(proc.stdout.readline())["url"]
    client = Http(url)
    status, _ = client.get("/")
    elapsed = time.perf_counter() - t0
    assert status == 200
    client.conn.close()
    return proc, url, elapsed


def main() -> None:
    args = h.parser(__doc__.splitlines()[0],
                 baseline=("the same operator calls made directly on the socket with memoryd's sync client, "
                           'same run.')).parse_args()
    args_rounds = 5 if args.quick else 15
    n = 10_000 if args.quick else 100_000
    h.banner("console", f"memoryd console pages at {n:,} memories", args.quick)
    from memoryd.client import Client

    with h.workdir("console", keep=args.keep) as root:
        built = build_store(root / "data", n)
        print(f"store: {n:,} memories built in {built['build_s']} s")
        daemon = h.Daemon(root, embedder="none", data_dir=root / "data",
                          config={"governor_enabled": False})
        daemon.start()
        try:
            starts = []
            for _ in range(5):
                proc, url, seconds = start_console(daemon)
                starts.append(seconds)
                proc.terminate()
                proc.wait(10)
            proc, url, _ = start_console(daemon)
            web = Http(url)
            admin = Client(daemon.socket, admin=True)
            sample = built["sample_id"]
            pid = admin.call("review.list", {"limit": 1})["proposals"][0]["id"]
            search = {"query": "deploy staging database", "mode": "hybrid", "k": 20, **READER}
            listing = {**READER, "limit": 50, "status": ["active"]}

            def review_raw() -> None:
                for p in admin.call("review.list", {"status": "open", "limit": 100})["proposals"]:
                    admin.call("review.get", {"id": p["id"]})

            pages: dict[str, tuple[str, Callable[[], Any]]] = {
                "overview": ("/", lambda: (admin.call("daemon.status"),
                                           admin.call("metrics.series", {"window": "hour"}))),
                "overview (day)": ("/?window=day", lambda: (
                    admin.call("daemon.status"), admin.call("metrics.series", {"window": "day"}))),
                "memories: list": ("/memories?agent_id=agent-00&user_id=user-0",
                                   lambda: admin.call("memory.list", listing)),
                "memories: search": ("/memories?q=deploy+staging+database&agent_id=agent-00"
                                     "&user_id=user-0&k=20", lambda: admin.call("memory.search", search)),
                "memory page": (f"/memories/{sample}", lambda: admin.call(
                    "memory.get", {"id": sample, "include": ["history", "citations", "links", "entities"]})),
                "review (40 open)": ("/review", review_raw),
                "proposal": (f"/review/{pid}", lambda: admin.call("review.get", {"id": pid})),
                "jobs (60 dead)": ("/jobs", lambda: (
                    admin.call("queue.list", {"state": "dead", "limit": 200}),
                    admin.call("queue.list", {"state": "failed", "limit": 200}),
                    admin.call("daemon.status"))),
            }
            samples: dict[str, list[float]] = {k: [] for k in pages}
            raw: dict[str, list[float]] = {k: [] for k in pages}
            names = list(pages)
            for r in range(args_rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    path, direct = pages[name]
                    t0 = time.perf_counter()
                    status, _ = web.get(path)
                    samples[name].append(time.perf_counter() - t0)
                    assert status == 200, (name, status)
                    t0 = time.perf_counter()
                    direct()
                    raw[name].append(time.perf_counter() - t0)
            proc.terminate()
            proc.wait(10)
        finally:
            daemon.stop()
    rows = []
    for name in names:
        page = h.latency_summary(samples[name])
        base = h.latency_summary(raw[name])
        rows.append([name, page["p50_ms"], page["p90_ms"], base["p50_ms"],
                     h.ratio(page["p50_ms"], base["p50_ms"])])
    start = h.latency_summary(starts)
    print(f"\nstart-up to the first page (spawn → overview), 5 runs: p50 {start['p50_ms']:.0f} ms, "
          f"max {max(starts) * 1000:.0f} ms (goal < 1000 ms)")
    h.print_table(f"pages at {n:,} memories ({args_rounds} rounds, ms)",
                  ["page", "p50", "p90", "raw calls p50", "page ÷ raw"], rows)
    h.save("console", {"n": n, "startup_s": starts, "pages": {k: samples[k] for k in names},
                       "raw": {k: raw[k] for k in names}}, args.quick)


if __name__ == "__main__":
    main()
