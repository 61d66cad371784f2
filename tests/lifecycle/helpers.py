"""Shared helpers for the lifecycle suite (imported as ``from tests.lifecycle.helpers import ...``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from memoryd.service.client import ClientError
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import NewMemory, WriteContext, content_hash, request_hash, write_memory
from memoryd.store.schema import SCOPE_KEY, memories
from tests.integration.harness import DaemonHandle, wait_until

#: The config every lifecycle daemon starts with (a quiet governor: passes run whenever due).
QUIET = {"governor_enabled": False}

#: The write context store-level tests use: no passes enqueued for new rows.
STORE_CTX = WriteContext(actor="test:lifecycle", passes=[], max_attempts=5, idempotency_ttl_s=86400.0)


def error_of(handle: DaemonHandle, method: str, params: dict[str, Any], *,
             admin: bool = False) -> ClientError:
    """Call ``method`` expecting an error answer; return it."""
    with pytest.raises(ClientError) as caught:
        handle.call(method, params, admin=admin)
    return caught.value


def get(handle: DaemonHandle, memory_id: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = handle.call("memory.get", {"id": memory_id, **params})
    return result


def wait_status(handle: DaemonHandle, memory_id: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Poll memory.get until the row reads ``status`` (a hang guard, not a speed assertion)."""
    def reads_status() -> dict[str, Any] | None:
        row = get(handle, memory_id)
        return row if row["status"] == status else None

    result: dict[str, Any] = wait_until(reads_status, timeout_s=timeout_s,
                                        message=f"{memory_id} to read {status!r}")
    return result


def search_ids(handle: DaemonHandle, query: str, **params: Any) -> list[str]:
    """Ids a lexical search returns."""
    found = handle.call("memory.search", {"query": query, "mode": "lexical", "k": 50, **params})
    return [r["id"] for r in found["results"]]


@contextmanager
def engine_on(handle: DaemonHandle) -> Iterator[Engine]:
    """A memoryd engine on the daemon's own store (its SQLite file, safe while it runs: WAL, busy
    timeout; or its PostgreSQL database)."""
    engine = create_store_engine(handle.store_url, busy_timeout_ms=10000)
    try:
        yield engine
    finally:
        engine.dispose()


def new_memory(content: str, *, scope: str = "agent", owner: str = "a1", **extra: Any) -> NewMemory:
    """A NewMemory as service/validation builds it, the scope's key field set to ``owner``."""
    owners: dict[str, Any] = {} if scope == "org" else {SCOPE_KEY[scope]: owner}
    owners.update({k: extra.pop(k) for k in ("agent_id", "user_id", "project", "session_id") if k in extra})
    params = {"content": content, "scope": scope, "kind": "fact", **owners, **extra}
    return NewMemory(content=content, kind="fact", scope=scope, owner=owner if scope != "org" else "",
                     request_hash=request_hash(params), **owners, **extra)


def store_write(engine: Engine, content: str, now: datetime, **kw: Any) -> str:
    """Write one memory through the real write path at ``now``; return its id."""
    with engine.begin() as conn:
        result: dict[str, Any] = write_memory(conn, new_memory(content, **kw), now, STORE_CTX)
    assert not result.get("duplicate_of"), result
    return str(result["id"])


def insert_candidate(engine: Engine, memory_id: str, content: str, *, agent_id: str, at: str) -> None:
    """A derived ``candidate`` row, as a deriving pass would leave it (seeded directly)."""
    with engine.begin() as conn:
        conn.execute(insert(memories).values(
            id=memory_id, content=content, content_hash=content_hash(content), kind="fact",
            scope="agent", owner=agent_id, agent_id=agent_id, status="candidate", importance=0.5,
            importance_raw=0.5, valid_from=at, recorded_at=at, derived=True, metadata={},
        ))


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def store_holding(daemon: DaemonHandle, needle: str) -> list[str]:
    """Where the daemon's store holds ``needle``: on SQLite, every file of the data dir (the
    database, its WAL, anything beside them); on PostgreSQL, every table whose rows, read
    whole as text (lexemes and JSON included), contain it."""
    if daemon.db_url is None:
        return files_holding(daemon.data_dir, needle.encode())
    tables = [t for (t,) in daemon.query(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")]
    assert {"memories", "jobs", "audit_events", "tombstones", "forget_requests"} <= set(tables), tables
    return [t for t in tables
            if daemon.scalar(f'SELECT count(*) FROM "{t}" AS r WHERE CAST(r AS TEXT) LIKE ?',
                             (f"%{needle}%",))]
