"""Back-pressure (issue 20, item 2): clients that stop reading, against the daemon's memory.

Starts a real daemon with ``--embedder none``, writes ``--rows`` memories of
``--row-kb`` KB each, and then:

(a) the raw baseline: ``--pings`` ``daemon.ping`` calls on one connection,
    one after another, with no other client: p50/p99;
(b) ``--hostile`` connections that each send ``--requests`` pipelined
    ``memory.list limit=--limit`` requests (a few MB of answer each) and never
    read; the same ping series runs on another connection at once (while the
    daemon works through their requests), and again after ``--hold-s``
    seconds (while they sit); the daemon's RSS is sampled every 50 ms (peak,
    and the reading after the hold);
(c) the hostile connections close; the daemon's RSS is read again after
    ``--settle-s`` seconds (does the memory come back?), and the pings again.

It prints RSS before / during (peak) / after, and the ping latencies of (a),
(b) and (c). The hostile phase is cut short when the daemon's RSS passes
``--abort-rss-mb`` (a daemon without back-pressure grows by gigabytes), and
the run says so.

    .venv/bin/python bench/backpressure.py            # 16 hostile connections (~1 min)
    .venv/bin/python bench/backpressure.py --quick    # smoke run
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import psutil

import _harness as h

AGENT = "bench-backpressure"


def seed(daemon: h.Daemon, rows: int, row_kb: int) -> None:
    """``rows`` distinct memories of ``row_kb`` KB each, for one agent."""
    filler = ("lorem ipsum dolor sit amet " * (row_kb * 1024 // 27 + 1))[: row_kb * 1024 - 40]
    with daemon.client() as c:
        for i in range(rows):
            c.call("memory.write", {"content": f"row {i:05d} {filler}", "agent_id": AGENT})


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


class RssSampler:
    """Samples a process's RSS on a thread until stopped: the peak and the last reading."""

    def __init__(self, pid: int, every_s: float = 0.05):
        self.pid = pid
        self.every_s = every_s
        self.peak = 0.0
        self.last = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.last = rss_mb(self.pid)
            except psutil.Error:
                return
            self.peak = max(self.peak, self.last)
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def ping_series(path: Path, n: int, *, stop_when: threading.Event | None = None) -> dict[str, Any]:
    """``n`` pings on one connection, one after another: latency figures and how many answered."""
    from memoryd.service.client import Client

    times: list[float] = []
    refused = 0
    with Client(path, timeout_s=60.0) as c:
        for _ in range(n):
            if stop_when is not None and stop_when.is_set():
                break
            t0 = time.perf_counter()
            try:
                c.call("daemon.ping")
            except Exception:  # an error answer still answered; counted apart
                refused += 1
                continue
            times.append(time.perf_counter() - t0)
    return {**h.latency_summary(times), "refused": refused}


def open_hostile(path: Path, count: int, requests: int, limit: int) -> list[socket.socket]:
    """``count`` connections that each send ``requests`` list requests and never read."""
    frames = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": "memory.list",
                    "params": {"agent_id": AGENT, "limit": limit}}).encode() + b"\n"
        for i in range(requests))
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(path))
        s.sendall(frames)
        socks.append(s)
    return socks


def main() -> None:
    p = h.parser(__doc__.split("\n\n")[0],
                 baseline=('ping latency on the same daemon with no hostile client (the raw series), same '
                           'run.'))
    p.add_argument("--rows", type=int, default=100, help="memories to seed (default 100)")
    p.add_argument("--row-kb", type=int, default=60, help="size of each memory in KB (default 60)")
    p.add_argument("--hostile", type=int, default=16, help="connections that never read (default 16)")
    p.add_argument("--requests", type=int, default=64, help="list requests each sends (default 64)")
    p.add_argument("--limit", type=int, default=100, help="memory.list limit (default 100)")
    p.add_argument("--pings", type=int, default=2000, help="pings per series (default 2000)")
    p.add_argument("--hold-s", type=float, default=12.0,
                   help="seconds the hostile connections sit before the during-pings start (default 12)")
    p.add_argument("--settle-s", type=float, default=5.0, help="seconds after they close (default 5)")
    p.add_argument("--abort-rss-mb", type=float, default=4096.0,
                   help="close the hostile connections early past this RSS (default 4096)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a daemon config key (integers only), e.g. conn_max_buffered_bytes=8388608")
    args = p.parse_args()
    if args.quick:
        args.rows, args.hostile, args.pings, args.hold_s, args.settle_s = 30, 4, 300, 3.0, 2.0
    config = {k: int(v) for k, v in (item.split("=", 1) for item in args.config)}

    h.banner("backpressure", f"{args.hostile} connections x {args.requests} memory.list limit={args.limit} "
             f"over {args.rows} rows of {args.row_kb} KB, never read", args.quick)
    with h.workdir("bp", keep=args.keep) as root, h.Daemon(root, embedder="none",
                                                          config=config or None) as daemon:
        seed(daemon, args.rows, args.row_kb)
        time.sleep(1.0)
        baseline = ping_series(daemon.socket, args.pings)
        before = rss_mb(daemon.pid)

        aborted = threading.Event()
        with RssSampler(daemon.pid) as during:
            socks = open_hostile(daemon.socket, args.hostile, args.requests, args.limit)

            def watch() -> None:
                while not aborted.is_set() and socks:
                    if during.last > args.abort_rss_mb:
                        aborted.set()
                    time.sleep(0.05)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            deadline = time.monotonic() + args.hold_s
            burst_pings = ping_series(daemon.socket, args.pings, stop_when=aborted)
            while time.monotonic() < deadline and not aborted.is_set():
                time.sleep(0.05)
            settled = during.last
            sitting_pings = ping_series(daemon.socket, args.pings, stop_when=aborted)
            held = during.last
            for s in socks:
                s.close()
            socks.clear()
        time.sleep(args.settle_s)
        after = rss_mb(daemon.pid)
        after_pings = ping_series(daemon.socket, args.pings)
        refusals = len(daemon.events("answers.unread")) + len(daemon.events("answers.unread_total"))

    series = [("no hostile client (raw)", baseline),
              (f"{args.hostile} hostile, from their send", burst_pings),
              (f"{args.hostile} hostile, after {args.hold_s:g} s", sitting_pings),
              ("after they closed", after_pings)]
    rows = [[label, *[s[k] for k in ("p50_ms", "p99_ms", "max_ms", "n", "refused")]] for label, s in series]
    h.print_table("daemon.ping, one connection, sequential", ["phase", "p50 ms", "p99 ms", "max ms", "n",
                                                             "errors"], rows)
    h.print_table("daemon RSS (MB)", ["before", f"after {args.hold_s:g} s", "peak during", "end of pings",
                                      f"{args.settle_s:g} s after close"],
                  [[before, settled, during.peak, held, after]], digits=0)
    if aborted.is_set():
        print(f"\nABORTED: the daemon's RSS passed {args.abort_rss_mb:g} MB; the hostile connections "
              "were closed early")
    print(f"refusal log lines (answers.unread*): {refusals}")
    h.save("backpressure", {
        "params": {k: getattr(args, k) for k in ("rows", "row_kb", "hostile", "requests", "limit", "pings",
                                                 "hold_s", "settle_s")},
        "config": config, "aborted": aborted.is_set(),
        "rss_mb": {"before": before, "settled": settled, "peak": during.peak, "end_of_pings": held,
                   "after_close": after},
        "pings": {"baseline": baseline, "burst": burst_pings, "sitting": sitting_pings, "after": after_pings},
        "refusal_log_lines": refusals,
    }, args.quick)


if __name__ == "__main__":
    main()
