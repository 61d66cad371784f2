"""Shared pieces of the benchmarks: a real daemon in a temp dir, figures, tables, results.

Every benchmark starts its own ``memoryd run`` (this interpreter, ``-m memoryd``)
on a fresh directory under /tmp, talks to it over its socket with the project's
Client, and stops it with SIGTERM. Figures are printed as plain tables and
written to ``bench/results/<name>.json``. Nothing here asserts on speed: the
machines are shared and noisy, so the benchmarks report, they do not judge.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from memoryd.service.client import NotRunning

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
SOCKET_NAME = "memoryd.sock"


# -- command line -------------------------------------------------------------
def parser(description: str, *, baseline: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes; ``--help`` says what the
    bench measures (``description``) and what it is measured against (``baseline``)."""
    p = argparse.ArgumentParser(description=description, epilog=f"Baseline: {baseline}")
    p.add_argument("--quick", action="store_true", help="a short smoke run (smaller N, shorter windows)")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (daemon logs, database)")
    return p


# -- a real daemon --------------------------------------------------------------
@contextlib.contextmanager
def workdir(name: str, keep: bool = False) -> Iterator[Path]:
    """A fresh directory under /tmp (short, so socket paths stay < 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix=f"mdb-{name}-", dir="/tmp"))
    try:
        yield path
    finally:
        if keep:
            print(f"\n(kept {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


def write_toml(path: Path, values: dict[str, Any]) -> Path:
    """A flat TOML file of scalar keys (enough for memoryd's config)."""
    lines = []
    for key, value in values.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        else:
            text = json.dumps(str(value))
        lines.append(f"{key} = {text}")
    path.write_text("\n".join(lines) + "\n")
    return path


class Daemon:
    """One ``memoryd run`` child process on ``root`` (its data dir, socket and log)."""

    def __init__(self, root: Path, *, embedder: str, config: dict[str, Any] | None = None,
                 label: str = "daemon", data_dir: Path | None = None, db_url: str | None = None):
        self.root = root
        #: ``--db-url`` (a PostgreSQL database); None keeps SQLite in the data dir.
        self.db_url = db_url
        self.label = label
        self.embedder = embedder
        self.data_dir = data_dir or root / "data"
        self.socket = root / "run" / SOCKET_NAME
        self.log_path = root / f"{label}.log"
        if _MATCHED_NICE and "nice" not in (config or {}):
            # This process already runs at the daemon's niceness and the child inherits it;
            # nice = 0 keeps the daemon from adding its own on top (19 instead of 10).
            config = {**(config or {}), "nice": 0}
        self.config_path = write_toml(root / f"{label}.toml", config) if config else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None  # time.time() just before the exec
        self.ready_s: float | None = None  # until the socket first answered daemon.ping
        self.exit_code: int | None = None
        self.stop_s: float | None = None
        self.nice: int | None = None  # the running daemon's niceness, read after start
        if len(str(self.socket)) >= 104:  # macOS' sun_path is 104 bytes, Linux' 108
            raise SystemExit(f"socket path too long: {self.socket}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "memoryd", "run", "--data-dir", str(self.data_dir),
               "--socket", str(self.socket), "--embedder", self.embedder, "--llm", "none",
               "--log-format", "json", "--log-level", "info"]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        if self.db_url is not None:
            cmd += ["--db-url", self.db_url]
        return cmd

    def start(self, timeout_s: float = 120.0) -> float:
        """Start the daemon and wait until it answers daemon.ping; return the seconds that took."""
        self.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = dict(os.environ)
        for name in ("MEMORYD_CONFIG", "MEMORYD_DB_URL", "MEMORYD_DATA_DIR", "MEMORYD_SOCKET",
                     "MEMORYD_EMBEDDER", "MEMORYD_LLM"):
            env.pop(name, None)
        env["HF_HUB_OFFLINE"] = "1"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        self.started_at = time.time()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     env=env, cwd=str(self.root))
        log.close()
        deadline = t0 + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.label} exited with {self.proc.returncode} at start; "
                                 f"log:\n{self.log_path.read_text()[-3000:]}")
            if self.socket.exists():
                try:
                    self.call("daemon.ping")
                    break
                except (OSError, ConnectionError, NotRunning):
                    pass  # the socket file appears at bind, a moment before listen
            if time.perf_counter() > deadline:
                self.kill()
                raise SystemExit(f"{self.label} did not answer within {timeout_s} s; see {self.log_path}")
            time.sleep(0.02)
        self.ready_s = time.perf_counter() - t0
        with contextlib.suppress(Exception):
            import psutil

            self.nice = psutil.Process(self.proc.pid).nice()
        return self.ready_s

    def client(self) -> Any:
        from memoryd.service.client import Client

        return Client(self.socket, timeout_s=120.0)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request on a fresh connection."""
        with self.client() as c:
            return c.call(method, params)

    def stop(self, timeout_s: float = 40.0) -> int:
        """SIGTERM, then wait; SIGKILL only if it overstays (reported as -9)."""
        if self.proc is None or self.exit_code is not None:
            return self.exit_code if self.exit_code is not None else 0
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.stop_s = time.perf_counter() - t0
        assert self.exit_code is not None
        return self.exit_code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.exit_code = self.proc.returncode if self.proc is not None else None

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The daemon's JSON log lines (optionally only events called ``name``)."""
        out = []
        if not self.log_path.exists():
            return out
        for line in self.log_path.read_text(errors="replace").splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue
            if name is None or ev.get("event") == name:
                out.append(ev)
        return out

    def errors(self) -> list[dict[str, Any]]:
        """Log lines at warning level or worse."""
        return [e for e in self.events() if e.get("level") in ("warning", "error", "critical")]

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def log_time(event: dict[str, Any]) -> float:
    """A log line's ISO-8601 UTC timestamp as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def queue_open(status: dict[str, Any], pass_name: str) -> int:
    """Jobs of a pass still to do: ready + leased + failed."""
    q = status["queues"].get(pass_name, {})
    return int(q.get("ready", 0)) + int(q.get("leased", 0)) + int(q.get("failed", 0))


def wait_drained(daemon: Daemon, pass_name: str, *, poll_s: float = 0.2, timeout_s: float = 1800.0,
                 on_status: Callable[[dict[str, Any]], None] | None = None) -> tuple[float, dict[str, Any]]:
    """Poll daemon.status until the pass's queue is empty; return (time.time() then, status)."""
    deadline = time.monotonic() + timeout_s
    with daemon.client() as c:
        while True:
            status = c.call("daemon.status")
            if on_status is not None:
                on_status(status)
            if queue_open(status, pass_name) == 0:
                return time.time(), status
            if time.monotonic() > deadline:
                raise SystemExit(f"the {pass_name} queue did not drain in {timeout_s} s: "
                                 f"{status['queues'].get(pass_name)}")
            time.sleep(poll_s)


def wait_quiet(daemon: Daemon, *, stable_s: float = 3.0, poll_s: float = 1.0,
               timeout_s: float = 1800.0) -> float:
    """Wait until no pass makes progress (every counter still, nothing leased) for ``stable_s``.

    Jobs of paused passes (e.g. the LLM's with ``--llm none``) and deferred
    jobs stay queued; this waits for the work that can run to be done.
    Returns the seconds waited.
    """
    t0 = time.monotonic()
    last: tuple[Any, ...] | None = None
    since = time.monotonic()
    with daemon.client() as c:
        while True:
            st = c.call("daemon.status")
            sig = (
                tuple(sorted((k, v.get("processed_total"), v.get("errors_total"))
                             for k, v in st["passes"].items())),
                sum(int(q.get("leased", 0)) for q in st["queues"].values()),
            )
            now = time.monotonic()
            if sig != last or sig[1]:
                last, since = sig, now
            elif now - since >= stable_s:
                return now - t0
            if now - t0 > timeout_s:
                raise SystemExit(f"the daemon did not go quiet in {timeout_s} s")
            time.sleep(poll_s)


#: Set by match_daemon_priority(): daemons then inherit this niceness instead of adding theirs to it.
_MATCHED_NICE: int | None = None


def match_daemon_priority() -> str:
    """Run this process (and so its raw baselines and load generators) at the daemon's priority.

    The daemon lowers itself at start (config ``nice``, default 10, and the
    idle IO class); a baseline at normal priority would win every contested
    CPU slice on a shared machine and flatter itself. Returns what was set.
    """
    import psutil

    from memoryd.config import Config

    global _MATCHED_NICE
    want = int(getattr(Config(), "nice", 0) or 0)
    done = []
    current = os.nice(0)
    if want > current:
        os.nice(want - current)
    _MATCHED_NICE = os.nice(0)
    done.append(f"nice {_MATCHED_NICE}")
    idle = getattr(psutil, "IOPRIO_CLASS_IDLE", None)
    if idle is not None:
        with contextlib.suppress(OSError, psutil.Error):
            psutil.Process().ionice(idle)
            done.append("IO class idle")
    return ", ".join(done)


# -- figures ----------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100), as numpy's default."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else float("nan"),
        "mean_ms": sum(ms) / len(ms) if ms else float("nan"),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# -- output ----------------------------------------------------------------------
def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    return str(value)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 2) -> None:
    """A plain fixed-width table; numbers right-aligned, text left-aligned."""
    cells = [[fmt(v, digits) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in rows)
               for i in range(len(headers))]
    print(f"\n{title}")

    def line(values: Sequence[str]) -> str:
        out = []
        for i, v in enumerate(values):
            out.append(v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]))
        return "  " + "  ".join(out).rstrip()

    print(line(list(headers)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in cells:
        print(line(row))


def banner(name: str, what: str, quick: bool) -> None:
    print(f"memoryd bench: {name}{'  (--quick smoke run)' if quick else ''}")
    print(what)
    info = machine()
    print(f"machine: {info['cpus']} CPUs, load avg {info['loadavg']}, Python {info['python']}, "
          f"{info['sqlite']}, /tmp on {info['tmp_fs']}")


def fs_type(path: str) -> str:
    """The filesystem type holding ``path`` (Linux /proc/mounts; 'unknown' elsewhere)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def machine() -> dict[str, Any]:
    from memoryd.store.driver import sqlite_module

    mod = sqlite_module()
    return {
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": f"{mod.__name__} (SQLite {mod.sqlite_version})",
        "tmp_fs": fs_type(tempfile.gettempdir()),
    }


def save(name: str, data: dict[str, Any], quick: bool) -> Path:
    """Write bench/results/<name>.json (``<name>.quick.json`` for a smoke run)."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / (f"{name}.quick.json" if quick else f"{name}.json")
    body = {"bench": name, "quick": quick, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(), **data}
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    print(f"\nresults: {path.relative_to(BENCH_DIR.parent)}")
    return path


# -- realistic content -------------------------------------------------------------
_SERVICES = ["billing-api", "auth-service", "search-indexer", "notifications", "payments-worker",
             "gateway", "user-profile", "reporting", "ingest-pipeline", "admin-ui", "scheduler",
             "feature-flags", "media-transcoder", "webhooks", "ledger"]
_LANGS = ["Python 3.11", "Go 1.22", "TypeScript 5.4", "Rust 1.78", "Kotlin 1.9", "Node 20"]
_DBS = ["Postgres 15", "Postgres 16", "MySQL 8", "Redis 7", "SQLite", "ClickHouse 24", "DynamoDB"]
_PEOPLE = ["Ana", "Bilal", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas"]
_FILES = ["src/api/routes.py", "internal/store/pg.go", "web/src/hooks/useSession.ts", "Makefile",
          "deploy/helm/values.yaml", "src/lib/retry.rs", "tests/conftest.py", ".github/workflows/ci.yml",
          "docker-compose.yml", "config/settings.toml", "migrations/0042_add_index.sql"]
_CMDS = ["make test", "pytest -x -q tests/unit", "go test ./... -race", "npm run lint -- --fix",
         "cargo clippy --all-targets", "docker compose up -d db", "just migrate", "tox -e py311",
         "uv pip sync requirements.lock", "terraform plan -var-file=staging.tfvars"]
_HOSTS = ["db1.internal", "cache-02", "staging-eu", "ci-runner-7", "bastion.prod", "localhost"]
_LIBS = ["SQLAlchemy 2.0", "pydantic v2", "httpx", "React Query", "tokio", "gRPC", "Celery",
         "Alembic", "structlog", "OpenTelemetry", "Kafka client", "boto3"]
_ERRORS = ["connection reset by peer", "deadlock detected", "context deadline exceeded",
           "OOMKilled", "certificate has expired", "too many open files", "ECONNREFUSED",
           "column does not exist", "429 Too Many Requests", "flaky snapshot mismatch"]
_REASONS = [
    "because the old approach held a lock across the network call",
    "since retries were amplifying load during incidents",
    "to keep the p99 under the SLO during the nightly batch",
    "after the postmortem showed we lost writes on failover",
    "because the vendor SDK leaks file descriptors under load",
    "so that local runs match CI exactly",
    "to avoid a second source of truth for feature flags",
    "because reviewers kept missing the migration ordering",
]
_EXTRA = [
    "See the runbook section on failover before touching it.",
    "This bit us twice in March; do not revert without talking to the on-call.",
    "The staging config differs: it uses a smaller pool and no TLS between pods.",
    "A follow-up ticket tracks removing the workaround once upstream ships the fix.",
    "Benchmarks showed a 30% drop in tail latency with the change.",
    "The integration tests cover this path, but only with the fake clock.",
    "Prefer the helper in the shared lib over re-implementing it per service.",
    "Document any exception in the ADR folder with the date and the owner.",
]
_TEMPLATES = [
    "{svc} listens on port {port} in dev; the health check is GET /healthz.",
    "Run `{cmd}` before pushing; CI runs the same command on {host}.",
    "Decision: {svc} moves from {db} to {db2} {reason}.",
    "{person} prefers small PRs with the migration in a separate commit.",
    "The {svc} tests are flaky with '{err}' when run in parallel; use `{cmd}` with -p no:xdist.",
    "To reproduce the {err} bug in {svc}, start the stack with `docker compose up` and hit the import "
    "endpoint with a payload over 10 MB.",
    "{svc} is written in {lang} and uses {lib} for its data layer.",
    "Edit {file} to change the retry budget; the default is {n} attempts with jittered backoff.",
    "Staging database for {svc} is {db} on {host}:{port}; credentials come from the vault path "
    "kv/{svc}/staging.",
    "We pinned {lib} to the previous minor release because the new one broke {svc} ({err}).",
    "Deploys of {svc} go through the canary for {n} minutes; roll back with `kubectl rollout undo`.",
    "On-call note: when {svc} pages with '{err}', first check the connection pool size in {file}.",
    "Code style: {lang} code in {svc} uses explicit return types and no wildcard imports.",
    "The nightly job in {svc} rebuilds the search index; it takes about {n} minutes on {host}.",
    "{person} owns {svc}; ask them before changing its public API or the event schema.",
    "Task: migrate {svc} off {lib} by the end of the quarter {reason}.",
    "The env var {env} must be set for {svc} to start locally; copy it from .env.example.",
    "Observed {err} in {svc} after the {lib} upgrade; pinning fixed it, root cause unknown.",
    "The API of {svc} paginates with opaque cursors, never offsets, {reason}.",
    "Feature flag {flag} gates the new {svc} checkout flow; it is at {pct}% in production.",
]


def dev_notes(n: int, *, seed: int = 7, start: int = 0) -> list[str]:
    """``n`` distinct, varied developer notes of realistic length (about 70 bytes to 1.5 KB).

    Each carries a distinct ticket reference (from ``start``) so no two are
    duplicates, which the daemon would acknowledge without writing a row.
    """
    rng = random.Random(seed * 1_000_003 + start)
    out = []
    for i in range(n):
        values = {
            "svc": rng.choice(_SERVICES), "lang": rng.choice(_LANGS), "db": rng.choice(_DBS),
            "db2": rng.choice(_DBS), "person": rng.choice(_PEOPLE), "file": rng.choice(_FILES),
            "cmd": rng.choice(_CMDS), "host": rng.choice(_HOSTS), "lib": rng.choice(_LIBS),
            "err": rng.choice(_ERRORS), "reason": rng.choice(_REASONS), "port": rng.randint(3000, 9999),
            "n": rng.randint(2, 45), "pct": rng.choice([1, 5, 10, 25, 50]),
            "env": f"{rng.choice(['APP', 'SVC', 'DB', 'AUTH'])}_{rng.choice(['URL', 'TOKEN', 'REGION'])}",
            "flag": f"ff_{rng.choice(['new', 'fast', 'v2', 'beta'])}_{rng.choice(['checkout', 'search'])}",
        }
        text = rng.choice(_TEMPLATES).format(**values)
        # A long tail of longer notes, as agents write after a debugging session,
        # and a few session summaries of several facts (up to ~1.5 KB).
        extra = rng.choices([0, 1, 2, 4], weights=[45, 30, 15, 10])[0]
        if extra:
            text += " " + " ".join(rng.sample(_EXTRA, extra))
        if rng.random() < 0.06:
            facts = [t.format(**values) for t in rng.sample(_TEMPLATES, rng.randint(4, 8))]
            text = "Session summary: " + " ".join(facts) + " " + text
        text += f" (ref ENG-{start + i})"
        out.append(text)
    return out


def text_stats(texts: Sequence[str]) -> dict[str, float]:
    lengths = [len(t.encode()) for t in texts]
    return {"n": len(texts), "mean_bytes": sum(lengths) / len(lengths), "min_bytes": min(lengths),
            "p50_bytes": percentile(lengths, 50), "max_bytes": max(lengths)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (all its threads)."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _busy_cpu_s() -> float:
    """Seconds the whole machine's CPUs were not idle (steal counts: it is CPU we did not get)."""
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return float(total - idle)


def _own_cpu_s() -> float:
    """CPU seconds of this benchmark, its daemons and their children (live or reaped)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            continue
    return float(total)


class HostLoad:
    """How much CPU other tenants of this shared machine used while a phase ran.

    ``others_pct`` is the share of all cores busy with processes that are not
    this benchmark or its children: a figure taken while it is high is a figure
    taken on a loaded machine.
    """

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0 = _busy_cpu_s()
        self.own0 = _own_cpu_s()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        ncpu = os.cpu_count() or 1
        busy = _busy_cpu_s() - self.busy0
        own = _own_cpu_s() - self.own0
        return {"wall_s": wall, "others_pct": max(0.0, (busy - own)) / (wall * ncpu) * 100,
                "ours_pct": own / (wall * ncpu) * 100}


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """(CPU seconds of the process, of its live descendants): the daemon and its model worker."""
    import psutil

    try:
        root = psutil.Process(pid)
        own = cpu_seconds(pid)
        kids = 0.0
        for child in root.children(recursive=True):
            try:
                t = child.cpu_times()
                kids += t.user + t.system
            except psutil.Error:
                continue
        return own, kids
    except psutil.Error:
        return float("nan"), float("nan")


# -- queries and the vector leg ---------------------------------------------------------
#: Common English function words, and question words an agent's query is full of.
_STOP_TEXT = """
a about above after again against all am an and any are aren as at be because been before being below
between both but by can cannot could couldn d did didn do does doesn doing don down during each few for
from further had hadn has hasn have haven having he her here hers herself him himself his how i if in
into is isn it its itself just let ll m me more most my myself no nor not now of off on once only or
other ought our ours ourselves out over own re s same she should shouldn so some such t than that the
their theirs them themselves then there these they this those through to too under until up ve very was
wasn we were weren what when where which while who whom why will with won would wouldn you your yours
yourself yourselves get got
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)


def strip_stop_words(query: str) -> str:
    words = [w for w in _WORD.findall(query) if w.lower() not in STOP_WORDS]
    return " ".join(words) or query


#: Daemon config that builds the lexical index (store/lexindex/index_set.py) however small the store:
#: ``--lexical-index`` in the recall benches measures it on their labelled sets.
LEXICAL_INDEX_CONFIG = {"lexical_index_min_rows": 1}


def wait_lexical_index(daemon: Daemon, timeout_s: float = 900.0, *,
                       required: bool = False) -> dict[str, Any] | None:
    """Until the daemon's lexical index is ready and caught up (or, unless ``required``, known
    not to be needed: a store below its threshold, or the index turned off); its status."""
    deadline = time.monotonic() + timeout_s
    while True:
        li: dict[str, Any] | None = daemon.call("daemon.status").get("lexical_index")
        if li is not None and li.get("error"):
            daemon.stop()
            raise SystemExit(f"the lexical index failed: {li['error']}")
        if li is not None and li["ready"] and li["behind"] == 0:
            return li
        if not required and (li is None or li["state"] == "waiting"):
            return li
        if time.monotonic() > deadline:
            daemon.stop()
            raise SystemExit(f"the lexical index was not ready in {timeout_s:.0f} s: {li}")
        time.sleep(0.5)


def wait_vector_leg(daemon: Daemon, timeout_s: float = 300.0, **owner: str) -> None:
    """Until a vector search (under ``owner``'s fields) answers as one: the daemon's embedder
    has loaded. Stops the daemon and ends the run when it never does."""
    deadline = time.monotonic() + timeout_s
    while daemon.call("memory.search", {"query": "warm up", "mode": "vector", "k": 1,
                                        **owner})["mode_used"] != "vector":
        if time.monotonic() > deadline:
            daemon.stop()
            raise SystemExit(f"the vector leg did not come up in {timeout_s:.0f} s "
                             "(the embedder never loaded)")
        time.sleep(0.5)
