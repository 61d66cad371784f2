"""Shared builders for the unit suite (imported relatively: ``from .helpers import ...``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, func, select

from memoryd.store import memories as mem
from memoryd.store.engine import read_only
from memoryd.store.memories import NewMemory
from memoryd.store.schema import SCOPE_KEY

#: A fixed instant for the write path (memories carry RFC 3339 timestamps).
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

#: A test-only output table: a pass's effect, written in the same transaction as
#: its job's completion. It has no unique key, so a duplicated effect would show.
effect_metadata = MetaData()
effects = Table(
    "test_effects",
    effect_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("target", String(64), nullable=False),
    Column("worker", String(64), nullable=False),
)


def build_memory(content: str, *, scope: str = "agent", owner: str = "a1",
                 idempotency_key: str | None = None, **extra: Any) -> NewMemory:
    """A NewMemory as service/validation would build it, owner field set for ``scope``."""
    params: dict[str, Any] = {"content": content, "scope": scope, "kind": "fact", **extra}
    owners: dict[str, Any] = {}
    if scope != "org":
        owners[SCOPE_KEY[scope]] = owner
        params[SCOPE_KEY[scope]] = owner
    if idempotency_key is not None:
        params["idempotency_key"] = idempotency_key
    return NewMemory(
        content=content, kind="fact", scope=scope, owner=owner if scope != "org" else "",
        idempotency_key=idempotency_key, request_hash=mem.request_hash(params), **owners, **extra,
    )


def count(engine: Engine, table: Table, *where: Any) -> int:
    """Rows of ``table`` matching ``where``, read in a fresh deferred transaction."""
    with read_only(engine) as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())
