"""Claude Code capture (issue 12): wall time of one `memoryd capture claude-code` hook run.

Claude Code waits for a hook before it goes on, so the figure that matters is
the hook's wall time from spawn to exit, as the editor sees it. This runs the
installed console script (what a settings.json hook runs) N times (default
200), each time after appending one exchange (a prompt and a reply) to a
transcript, with a Stop payload on stdin:

(a) daemon up: the new turns are written through the socket;
(b) daemon down: the turns go to the spool under the data dir;

and, interleaved call by call in the same run, two baselines:

(r) raw: spawning `python -c pass` with the same interpreter (the floor any
    Python hook pays on this machine);
(i) imports: `python -c "import memoryd.cli"` (the floor of any memoryd
    command: the CLI and its registered commands).

It prints p50/p99/mean of each and the hook's excess over the raw spawn. The
issue's target: the hook returns within 100 ms.

    .venv/bin/python bench/capture.py            # 200 calls per series
    .venv/bin/python bench/capture.py --quick    # 20 calls per series
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

SESSION = "7d2f1b90-3c4e-4a5b-8c6d-9e0f1a2b3c4d"


def _entry(kind: str, n: int, text: str, parent: str | None) -> dict[str, Any]:
    uuid = f"00000000-0000-4000-8000-{n:012d}"
    message: dict[str, Any] = {"role": kind, "content": text}
    if kind == "assistant":
        message = {"role": "assistant", "id": f"msg_{n:08d}", "type": "message",
                   "content": [{"type": "text", "text": text}]}
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/",
            "sessionId": SESSION, "version": "2.0.14", "type": kind, "message": message, "uuid": uuid,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}


class Session:
    """A project dir and a transcript that grows by one exchange per call."""

    def __init__(self, root: Path, n: int):
        self.project = root / "benchproject"
        (self.project / ".git").mkdir(parents=True)
        self.transcript = root / "transcript.jsonl"
        self.transcript.touch()
        self.notes = h.dev_notes(4 * n)
        self.n = 0

    def exchange(self) -> None:
        i = self.n
        prompt = f"Question {i}: is this still right? {self.notes[2 * i]}"
        reply = f"Answer {i}: yes, and also: {self.notes[2 * i + 1]}"
        with open(self.transcript, "a") as fh:
            fh.write(json.dumps(_entry("user", 2 * i, prompt, None)) + "\n")
            fh.write(json.dumps(_entry("assistant", 2 * i + 1, reply, None)) + "\n")
        self.n += 1

    def payload(self) -> bytes:
        return json.dumps({"session_id": SESSION, "transcript_path": str(self.transcript),
                           "cwd": str(self.project), "permission_mode": "default",
                           "hook_event_name": "Stop", "stop_hook_active": False}).encode()


def _timed(cmd: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, str]:
    """Wall time of one run, and its stderr (the hook's --verbose outcome line)."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, input=stdin, env=env, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if done.returncode != 0 or done.stdout:
        raise SystemExit(f"{cmd[:3]} exited {done.returncode} with stdout {done.stdout[:200]!r}: "
                         f"{done.stderr[-500:]!r}")
    return took, done.stderr.decode(errors="replace")


def series(n: int, session: Session, env: dict[str, str],
           outcomes: dict[str, int]) -> dict[str, list[float]]:
    """N hook runs with both baselines interleaved call by call (drift hits all three alike);
    ``outcomes`` counts what each hook run did (sent, spooled, ...)."""
    hook = [str(Path(sys.executable).parent / "memoryd"), "capture", "claude-code", "--verbose"]
    raw = [sys.executable, "-c", "pass"]
    imports = [sys.executable, "-c", "import memoryd.cli"]
    out: dict[str, list[float]] = {"hook": [], "raw": [], "imports": []}
    for _ in range(n):
        session.exchange()
        out["raw"].append(_timed(raw, b"", env)[0])
        took, said = _timed(hook, session.payload(), env)
        out["hook"].append(took)
        action = said.split()[1] if said.startswith("capture: ") else "error"
        outcomes[action] = outcomes.get(action, 0) + 1
        out["imports"].append(_timed(imports, b"", env)[0])
    return out


def main() -> None:
    args = h.parser(__doc__.splitlines()[0],
                 baseline=("spawning `python -c pass` with the same interpreter, and `python -c 'import "
                           "memoryd.cli'`, interleaved call by call.")).parse_args()
    n = 20 if args.quick else 200
    h.banner("capture", f"{n} hook runs per series; daemon up, then down (spool)", args.quick)
    results: dict[str, Any] = {"n": n}
    rows = []
    with h.workdir("capture", args.keep) as root:
        daemon = h.Daemon(root, embedder="none")
        daemon.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")}
        env.update(MEMORYD_SOCKET=str(daemon.socket), MEMORYD_DATA_DIR=str(daemon.data_dir),
                   MEMORYD_CAPTURE_TRANSCRIPT_DIRS=str(root))  # the transcript is not in ~/.claude
        session = Session(root, 2 * n)
        spool_dir = daemon.data_dir / "spool" / "claude-code"
        up_outcomes: dict[str, int] = {}
        down_outcomes: dict[str, int] = {}
        try:
            up = series(n, session, env, up_outcomes)
            stored = daemon.call("memory.list", {"project": "benchproject", "scope": "project",
                                                 "limit": 1000})["memories"]
        finally:
            daemon.stop()
        left_after_up = len(list(spool_dir.glob("*.jsonl")))
        down = series(n, session, env, down_outcomes)
        results["outcomes_daemon_up"] = up_outcomes
        results["outcomes_daemon_down"] = down_outcomes
        results["stored_turns_daemon_up"] = len(stored)
        results["spool_files_left_by_the_up_series"] = left_after_up
        results["spool_files_after_down_series"] = len(list(spool_dir.glob("*.jsonl")))
        for label, data in (("daemon up", up), ("daemon down (spool)", down)):
            for name in ("hook", "raw", "imports"):
                summary = h.latency_summary(data[name])
                results.setdefault(label, {})[name] = summary
            hook, raw = results[label]["hook"], results[label]["raw"]
            rows.append([label, hook["p50_ms"], hook["p99_ms"], hook["mean_ms"], raw["p50_ms"], raw["p99_ms"],
                         results[label]["imports"]["p50_ms"], hook["p50_ms"] - raw["p50_ms"]])
    h.print_table("hook wall time, ms (spawn to exit)",
                  ["series", "hook p50", "hook p99", "hook mean", "raw p50", "raw p99", "imports p50",
                   "hook - raw p50"], rows)
    print(f"\nhook outcomes, daemon up: {results['outcomes_daemon_up']}; daemon down: "
          f"{results['outcomes_daemon_down']}")
    print(f"turns in the store after the up series: {results['stored_turns_daemon_up']} of {2 * n} "
          f"(the rest spooled: the daemon missed the hook's budget); spool files then: "
          f"{results['spool_files_left_by_the_up_series']}, after the down series: "
          f"{results['spool_files_after_down_series']}")
    h.save("capture", results, args.quick)


if __name__ == "__main__":
    main()
