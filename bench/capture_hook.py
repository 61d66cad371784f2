"""Capture hook on a huge transcript (issue 20, item 7): wall time and peak RSS per hook run.

A Claude Code session that ran for days, or a transcript a hook is pointed at by mistake,
can be hundreds of MB. This writes one transcript of ``--mb`` MB (default 300): prompts and
replies between large tool results (lines the hook reads and passes over), then runs
`memoryd capture claude-code` on it, as the editor would, until a run finds nothing new,
with the daemon down (every run spools, so the figure is the hook's own cost, not the
daemon's). For each run: wall time from spawn to exit and the child's peak RSS
(``ru_maxrss`` from wait4). It checks that the spool then holds every turn once.

``--src DIR`` runs the hook from another checkout's ``src`` (e.g. the code before the fix:
``git archive 7b695f4 src | tar -x -C /tmp/old``, then ``--src /tmp/old/src``), which reads
the whole rest of the transcript in one run.

    .venv/bin/python bench/capture_hook.py              # 300 MB
    .venv/bin/python bench/capture_hook.py --quick      # 40 MB
    .venv/bin/python bench/capture_hook.py --src /tmp/old/src --max-runs 1
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h

SESSION = "3e0c9d1a-7b2f-4c5d-9e8f-0a1b2c3d4e5f"
TOOL_RESULT_BYTES = 120_000


def _line(kind: str, n: int, content: Any) -> str:
    return json.dumps({"parentUuid": None, "isSidechain": False, "type": kind, "sessionId": SESSION,
                       "uuid": f"00000000-0000-4000-8000-{n:012d}", "timestamp": "2025-06-02T09:15:10.482Z",
                       "message": {"role": kind, "content": content}}) + "\n"


def write_transcript(path: Path, mb: int) -> int:
    """Fill ``path`` to about ``mb`` MB; return how many turns it holds."""
    notes = h.dev_notes(2000)
    filler = "x" * TOOL_RESULT_BYTES
    turns = n = 0
    with open(path, "w", encoding="utf-8") as fh:
        while fh.tell() < mb * 1_000_000:
            fh.write(_line("user", n, f"Prompt {turns}: {notes[turns % len(notes)]}"))
            fh.write(_line("assistant", n + 1, [{"type": "text", "text": f"Reply {turns + 1}: noted."}]))
            fh.write(_line("user", n + 2, [{"type": "tool_result", "tool_use_id": "t", "content": filler}]))
            turns += 2
            n += 3
    return turns


def run_once(cmd: list[str], payload: bytes, env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, the hook's --verbose line) of one hook process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdin is not None and proc.stderr is not None and proc.stdout is not None
    proc.stdin.write(payload)
    proc.stdin.close()
    said = proc.stderr.read().decode(errors="replace")
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, said.strip()


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline=('none by default (absolute wall time and peak RSS per run); --src DIR runs another'
                           " checkout's hook on the same transcript."))
    p.add_argument("--mb", type=int, default=None, help="transcript size in MB (default 300; --quick 40)")
    p.add_argument("--src", default=None, help="run the hook from this checkout's src directory")
    p.add_argument("--max-runs", type=int, default=1000, help="stop after this many hook runs")
    args = p.parse_args()
    mb = args.mb or (40 if args.quick else 300)
    h.banner("capture_hook", f"one {mb} MB transcript, hook runs until nothing is new (daemon down)",
             args.quick)
    results: dict[str, Any] = {"mb": mb, "src": args.src or "this checkout"}
    with h.workdir("capture-hook", args.keep) as root:
        folder = root / "projects"
        folder.mkdir()
        transcript = folder / f"{SESSION}.jsonl"
        turns = write_transcript(transcript, mb)
        results["transcript_bytes"], results["turns"] = transcript.stat().st_size, turns
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        env.update(MEMORYD_SOCKET=str(root / "no-daemon.sock"), MEMORYD_DATA_DIR=str(root / "data"),
                   MEMORYD_CAPTURE_TRANSCRIPT_DIRS=str(folder))
        if args.src:
            env["PYTHONPATH"] = args.src
        cmd = [sys.executable, "-m", "memoryd", "capture", "claude-code", "--verbose", "--scope", "user",
               "--user-id", "bench"]
        payload = json.dumps({"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(root),
                              "hook_event_name": "Stop"}).encode()
        # The floor, interleaved run by run: the same hook on a transcript with nothing new
        # (Python's start, the imports, the cursor). On a loaded machine wall times move a lot;
        # the excess over this floor, and CPU time, move less.
        empty = folder / "empty.jsonl"
        empty.touch()
        floor_payload = json.dumps({"session_id": SESSION, "transcript_path": str(empty), "cwd": str(root),
                                    "hook_event_name": "Stop"}).encode()
        walls, cpus, rss, outcomes, floors, floor_cpus = [], [], [], [], [], []
        for _ in range(args.max_runs):
            floor_wall, floor_cpu, _, _ = run_once(cmd, floor_payload, env)
            floors.append(floor_wall)
            floor_cpus.append(floor_cpu)
            took, cpu, peak, said = run_once(cmd, payload, env)
            walls.append(took)
            cpus.append(cpu)
            rss.append(peak)
            outcomes.append(said)
            if not said.startswith("capture: spooled"):
                break
        spool = root / "data" / "spool" / "claude-code"
        spooled = [json.loads(line)["idempotency_key"] for f in sorted(spool.glob("*.jsonl"))
                   for line in f.read_text().splitlines()] if spool.exists() else []
        results.update(runs=len(walls), wall=h.latency_summary(walls), wall_max_ms=max(walls) * 1000,
                       first_run_ms=walls[0] * 1000, floor=h.latency_summary(floors),
                       cpu_ms_p50=h.percentile(cpus, 50) * 1000, cpu_ms_max=max(cpus) * 1000,
                       floor_cpu_ms_p50=h.percentile(floor_cpus, 50) * 1000,
                       peak_rss_mb_max=max(rss), peak_rss_mb_first=rss[0],
                       spooled_turns=len(spooled), distinct_turns=len(set(spooled)),
                       last_outcome=outcomes[-1][:200])
    h.print_table("hook runs on one transcript (floor: the same hook with nothing new to read)",
                  ["MB", "runs", "first ms", "p50 ms", "max ms", "floor p50 ms", "cpu p50 ms", "cpu max ms",
                   "floor cpu ms", "peak RSS MB", "turns", "spooled", "distinct"],
                  [[mb, results["runs"], results["first_run_ms"], results["wall"]["p50_ms"],
                    results["wall_max_ms"], results["floor"]["p50_ms"], results["cpu_ms_p50"],
                    results["cpu_ms_max"], results["floor_cpu_ms_p50"], results["peak_rss_mb_max"], turns,
                    results["spooled_turns"], results["distinct_turns"]]])
    print(f"last run: {results['last_outcome']}")
    h.save("capture_hook" if not args.src else "capture_hook_src", results, args.quick)


if __name__ == "__main__":
    main()
