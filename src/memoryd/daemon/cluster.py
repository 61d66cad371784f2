"""The daemons that share a store, as ``daemon.status`` shows them.

Each daemon announces itself in the ``meta`` table under ``daemon:<node id>``
(the data directory's stable worker identity, which is also its lease owner):
its host, pid, version, when it started and when it was last seen, and its
write figures since its previous heartbeat (writes/s, the p99 of its commits,
its queue). On
PostgreSQL, where several daemons share one database, it renews that row every
HEARTBEAT_S; on SQLite one daemon holds the file (the data directory's lock),
so it writes the row when it starts and stops and never wakes the disk in
between. A daemon not seen for SEEN_WINDOW_S is ``silent`` (it may have been
killed); a clean stop marks it ``stopped``; rows unseen for FORGET_AFTER_S are
dropped by the prune job.

``members`` joins them with the jobs each one holds leased, so the status of
any daemon shows the whole cluster and the queue depth that all of them share.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from memoryd import __version__
from memoryd.clock import rfc3339_from_epoch
from memoryd.store.schema import jobs, meta

KEY_PREFIX = "daemon:"
#: How often a daemon on a shared store renews its row.
HEARTBEAT_S = 15.0
#: A daemon not seen for this long is shown as silent.
SEEN_WINDOW_S = 4 * HEARTBEAT_S
#: Rows of daemons not seen for this long are dropped.
FORGET_AFTER_S = 7 * 86400.0


def announce(conn: Connection, node: str, *, started_at: float, now: float,
             state: str = "running", writes: dict[str, Any] | None = None) -> None:
    """Write (or renew) this daemon's row. ``writes``: its write figures since its last
    heartbeat (``per_s``, ``commit_p99_ms``, ``queue``), shown by every daemon's status."""
    value = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "version": __version__,
                        "started_at": started_at, "seen_at": now, "state": state,
                        **({"writes": writes} if writes else {})})
    key = KEY_PREFIX + node
    # Only this daemon writes its own key, so update-then-insert cannot race another writer.
    if conn.execute(update(meta).where(meta.c.key == key).values(value=value)).rowcount == 0:
        conn.execute(insert(meta).values(key=key, value=value))


def forget_stale(conn: Connection, now: float) -> int:
    """Drop the rows of daemons not seen for FORGET_AFTER_S; return how many."""
    stale = [key for key, info in _rows(conn, damaged=True)
             if info is None or now - info["seen_at"] > FORGET_AFTER_S]
    if stale:
        conn.execute(delete(meta).where(meta.c.key.in_(stale)))
    return len(stale)


def members(conn: Connection, now: float, me: str) -> list[dict[str, Any]]:
    """Every daemon known to the store, the most recently seen first, with its leased jobs."""
    leases: dict[str | None, int] = {owner: int(count) for owner, count in conn.execute(
        select(jobs.c.lease_owner, func.count()).where(jobs.c.state == "leased")
        .group_by(jobs.c.lease_owner))}
    out = []
    for key, info in _rows(conn):
        assert info is not None
        node = key[len(KEY_PREFIX):]
        age = max(0.0, now - info["seen_at"])
        state = info.get("state", "running")
        if state == "running" and age > SEEN_WINDOW_S:
            state = "silent"
        out.append({
            "node": node, "host": info.get("host"), "pid": info.get("pid"),
            "version": info.get("version"), "self": node == me, "state": state,
            "started_at": rfc3339_from_epoch(info["started_at"]),
            "last_seen_at": rfc3339_from_epoch(info["seen_at"]), "seen_s_ago": round(age, 1),
            # How far behind this row is: seconds since the daemon last wrote it (a heartbeat
            # every HEARTBEAT_S while it runs; past SEEN_WINDOW_S it is silent).
            "lag_s": round(age, 1),
            "leases": int(leases.pop(node, 0)),
            "writes": info.get("writes") if isinstance(info.get("writes"), dict) else None,
        })
    # Leases held by an owner with no row (a daemon of an older version): shown, not hidden.
    for owner, count in leases.items():
        if owner is not None:
            out.append({"node": owner, "host": None, "pid": None, "version": None, "self": False,
                        "state": "unknown", "started_at": None, "last_seen_at": None,
                        "seen_s_ago": None, "lag_s": None, "leases": int(count), "writes": None})
    out.sort(key=lambda d: (not d["self"], d["seen_s_ago"] is None, d["seen_s_ago"] or 0.0))
    return out


def _rows(conn: Connection, damaged: bool = False) -> list[tuple[str, dict[str, Any] | None]]:
    """The daemons' rows, decoded; a damaged one is skipped, or given as None with ``damaged``."""
    rows = conn.execute(select(meta.c.key, meta.c.value).where(meta.c.key.startswith(KEY_PREFIX)))
    out: list[tuple[str, dict[str, Any] | None]] = []
    for key, value in rows:
        try:
            info = json.loads(value)
            info["seen_at"], info["started_at"] = float(info["seen_at"]), float(info["started_at"])
        except (ValueError, TypeError, KeyError):
            if damaged:
                out.append((key, None))
            continue
        out.append((key, info))
    return out
