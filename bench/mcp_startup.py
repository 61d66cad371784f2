"""`memoryd mcp` start-up (issue 12): how soon an editor gets its handshake answered.

An editor spawns the bridge and sends `initialize`, then `tools/list`; the
issue's target is both answered within 1 s of spawn. Each round spawns, in an
interleaved order, three processes and times them from just before the spawn:

(b) bridge: the installed `memoryd mcp` console script, as an editor runs it:
    spawn -> `initialize` answered -> `tools/list` answered -> the first
    `tools/call` (memory_status, against a real daemon) answered;
(s) SDK alone: the same server without the early handshake answers
    (memoryd.editors.mcp.server.run), the same three times: what the SDK's
    import costs an editor that waits for it;
(r) raw: `python -c pass` with the same interpreter, spawn to exit: the floor
    of any Python process on this machine at this moment.

Then an import-time breakdown (`python -X importtime`, median of 3 runs) of
what the bridge imports before it can answer (memoryd.cli and the handshake
module) and of the SDK's server, by top-level package.

    .venv/bin/python bench/mcp_startup.py            # 20 rounds
    .venv/bin/python bench/mcp_startup.py --quick    # 5 rounds
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from memoryd.editors.mcp.config import memoryd_argv

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
SDK_ONLY = """
import sys
from memoryd.config import load_config
from memoryd.editors.mcp import server as mcp_server
from memoryd.editors.mcp.binding import Binding
mcp_server.run(Binding(agent_id="bench", user_id="bench", project="bench", session_id="s"),
               load_config(None, socket=sys.argv[1]))
"""


def _send(stdin: IO[bytes], req_id: int | None, method: str, params: dict[str, Any] | None = None) -> None:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"id": req_id} if req_id else {})}
    if params is not None:
        msg["params"] = params
    stdin.write(json.dumps(msg).encode() + b"\n")
    stdin.flush()


def _answer(stdout: IO[bytes], req_id: int) -> dict[str, Any]:
    while True:
        line = stdout.readline()
        if not line:
            raise SystemExit("the server closed its output before answering")
        msg: dict[str, Any] = json.loads(line)
        if msg.get("id") == req_id:
            return msg


def session_times(argv: list[str]) -> dict[str, float]:
    """Spawn a server and time the handshake and the first tool call (seconds since spawn)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        _send(proc.stdin, 1, "initialize", INIT)
        _answer(proc.stdout, 1)
        t_init = time.perf_counter() - t0
        _send(proc.stdin, None, "notifications/initialized")
        _send(proc.stdin, 2, "tools/list")
        tools = _answer(proc.stdout, 2)["result"]["tools"]
        t_list = time.perf_counter() - t0
        _send(proc.stdin, 3, "tools/call", {"name": "memory_status", "arguments": {}})
        call = _answer(proc.stdout, 3)["result"]
        t_call = time.perf_counter() - t0
        if len(tools) != 6 or call.get("isError"):
            raise SystemExit(f"unexpected answers: {len(tools)} tools, call {call}")
    finally:
        proc.stdin.close()
        proc.wait(60)
    return {"initialize": t_init, "tools_list": t_list, "first_call": t_call}


def raw_spawn() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def import_breakdown(statement: str, runs: int = 3) -> dict[str, Any]:
    """`python -X importtime -c STATEMENT`: total and per top-level package (self times, ms), median."""
    totals: list[float] = []
    per_run: list[dict[str, float]] = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement], capture_output=True,
                              text=True, check=True)
        by_pkg: dict[str, float] = defaultdict(float)
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _cumulative, name = line[len("import time:"):].split("|", 2)
            by_pkg[name.strip().split(".")[0]] += int(self_us) / 1000.0
        per_run.append(by_pkg)
        totals.append(sum(by_pkg.values()))
    packages = {pkg for run in per_run for pkg in run}
    median = {pkg: statistics.median(run.get(pkg, 0.0) for run in per_run) for pkg in packages}
    return {"total_ms": statistics.median(totals),
            "packages_ms": dict(sorted(median.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    args = h.parser(__doc__.splitlines()[0],
                 baseline=("`python -c pass` spawned to exit with the same interpreter, and the SDK's server "
                           'without the early handshake, interleaved.')).parse_args()
    rounds = 5 if args.quick else 20
    h.banner("mcp_startup", "spawn -> initialize / tools/list / first tool call, vs the SDK alone and "
             "a raw `python -c pass` spawn, interleaved", args.quick)
    series: dict[str, list[float]] = defaultdict(list)
    with h.workdir("mcp", args.keep) as root, h.Daemon(root, embedder="none") as daemon:
        bridge = [*memoryd_argv(), "mcp", "--socket", str(daemon.socket), "--project", "bench"]
        sdk_only = [sys.executable, "-c", SDK_ONLY, str(daemon.socket)]
        session_times(bridge)  # warm the page cache and .pyc files; not counted
        session_times(sdk_only)
        for i in range(rounds):
            order = [("bridge", bridge), ("sdk", sdk_only), ("raw", None)]
            order = order[i % 3:] + order[:i % 3]  # rotate: no series always runs first
            for name, argv in order:
                if argv is None:
                    series["raw spawn to exit"].append(raw_spawn())
                    continue
                times = session_times(argv)
                for step, seconds in times.items():
                    series[f"{name}: {step}"].append(seconds)
    summaries = {name: h.latency_summary(values) for name, values in series.items()}
    raw_p50 = summaries["raw spawn to exit"]["p50_ms"]
    rows = []
    for name, s in summaries.items():
        p95 = h.percentile([v * 1000 for v in series[name]], 95)
        s["p95_ms"] = p95
        rows.append([name, s["p50_ms"], p95, s["max_ms"], h.ratio(s["p50_ms"], raw_p50)])
    h.print_table(f"milliseconds from spawn, {rounds} rounds (target: initialize and tools/list < 1000)",
                  ["series", "p50", "p95", "max", "p50 / raw"], rows, digits=1)

    imports = {
        "bridge before its first answer (memoryd.cli + mcp_handshake)":
            import_breakdown("import memoryd.cli, memoryd.editors.mcp.handshake"),
        "the SDK's server (memoryd.editors.mcp.server)":
            import_breakdown("import memoryd.editors.mcp.server"),
        "nothing (python -X importtime -c pass)": import_breakdown("pass"),
    }
    for title, data in imports.items():
        top = list(data["packages_ms"].items())[:12]
        h.print_table(f"import time: {title}, total {data['total_ms']:.0f} ms "
                      "(self time by package, median of 3)", ["package", "ms"], top, digits=1)
    h.save("mcp_startup", {"rounds": rounds, "series": summaries, "imports": imports}, args.quick)


if __name__ == "__main__":
    main()
