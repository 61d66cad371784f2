"""daemon.status: one snapshot of the store, the queues, the passes and the models.

The snapshot goes out on the agent socket too (to a sandboxed agent), so no
string in it carries a credential from a configured URL: the store URL, a
model's spec and name, ``problems`` and every pass's ``last_error`` are masked
through memoryd/masking.py (PROTOCOL.md 1.2 "Secrets"), whatever produced them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from memoryd import __version__
from memoryd.masking import mask_tree, mask_url
from memoryd.queue import jobs as jobq
from memoryd.store import memories as mem
from memoryd.store import proposals
from memoryd.store.engine import read_only
from memoryd.store.schema import forget_requests

QUEUE_ZERO = {"ready": 0, "failed": 0, "leased": 0, "dead": 0, "oldest_ready_age_s": None}


def db_info(engine: Engine) -> dict[str, Any]:
    """The store URL without its password (or a ``?password=``), and the database's size on disk."""
    url = engine.url
    shown = mask_url(url.render_as_string(hide_password=False))
    size = 0
    if url.get_backend_name() == "sqlite" and url.database:
        for suffix in ("", "-wal", "-shm"):
            p = Path(url.database + suffix)
            if p.exists():
                size += p.stat().st_size
    return {"url": shown, "bytes": size}


def snapshot(engine: Engine, started_at: float, passes: list[str],
             pass_status: dict[str, dict[str, Any]], models: dict[str, Any],
             governor: dict[str, Any], extra: dict[str, Any],
             more_problems: Sequence[str] = ()) -> dict[str, Any]:
    """The daemon.status result (``more_problems``: the caller's own lines for ``problems``)."""
    now = time.time()
    with read_only(engine) as conn:
        counts = mem.count_by_status(conn)
        queues = jobq.stats(conn, now=now)
        reviews_open = proposals.count_open(conn)
        forgets_pending = int(conn.execute(select(func.count()).select_from(forget_requests)
                                           .where(forget_requests.c.status == "pending")).scalar_one())
    queues = {name: {**QUEUE_ZERO, **queues.get(name, {})} for name in passes} | queues
    problems = []
    dead = sum(q["dead"] for q in queues.values())
    if dead:
        problems.append(f"{dead} dead job(s); inspect with `memoryd queue list --state dead`, "
                        "revive with `memoryd queue retry --all`")
    if governor["state"] == "paused" and "memory" in governor["reason"]:
        problems.append(f"paused: {governor['reason']}")
    for name, st in pass_status.items():
        if st.get("state") == "failing":
            problems.append(f"pass {name} is failing: its last {st.get('consecutive_failures')} batches "
                            f"failed ({st.get('error_class')}); see `memoryd queue list --state failed "
                            f"--pass {name}` and the log")
    for name, m in models.items():
        if m.get("broken"):
            problems.append(m["broken"].get("message") or f"model {name} is broken; run `memoryd doctor`")
        elif m.get("error"):
            problems.append(f"model {name} failed to load: {m['error']}")
    problems += more_problems
    # Masked as a whole: a model's error or a pass's last_error may quote a URL it was given.
    shown: dict[str, Any] = mask_tree({
        "version": __version__,
        "pid": os.getpid(),
        "uptime_s": round(now - started_at, 3),
        "health": "degraded" if problems else "healthy",
        "problems": problems,
        "db": db_info(engine),
        "memories": counts,
        "queues": queues,
        "passes": pass_status,
        "governor": governor,
        "models": models,
        "reviews_open": reviews_open,
        "forget_requests_pending": forgets_pending,
        **extra,
    })
    return shown
