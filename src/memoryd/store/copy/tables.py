"""What ``memoryd store copy`` copies: every table that holds user data, in an order the
foreign keys accept, each read in the order of its key.

One list, read by the copier (store/copy/copier.py) and the verification
(store/copy/copier.py). What is not here is derived by the target's own schema
as rows arrive: SQLite's FTS5 index, vec0 index, ``vector_owners`` and
``memory_vectors_meta`` (filled by migration 0007's triggers through the
``memory_vectors`` view), PostgreSQL's generated tsvector and HNSW index; and
``alembic_version``, which the target's own migration writes.

``memory_links`` holds the citations (kind ``cites``) beside supersedes and
merged_into. ``jobs`` is copied row for row, done and dead ones included, so
the target's daemons finish the work the source's had not (embeds, extracts,
the retention pass's erasure of pending forget requests); a job leased on the
source arrives ready, with its lease cleared, since no daemon holds it on the
target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, true, tuple_

from memoryd.store.schema import (
    audit_events,
    audit_lanes,
    entities,
    entity_aliases,
    entity_mentions,
    extractions,
    forget_requests,
    idempotency_keys,
    jobs,
    memories,
    memory_links,
    memory_vectors,
    meta,
    proposals,
    tombstones,
)
from memoryd.store.vectors import vector_settings

#: The target's ``meta`` row that records the copy's progress (never copied itself).
MARKER_KEY = "store_copy"


@dataclass(frozen=True)
class CopiedTable:
    """A table the copy carries over, and the columns its batches are keyed and ordered by."""

    table: Table
    key: tuple[str, ...]
    #: Integer keys a PostgreSQL sequence hands out (set past the copied rows at the end).
    serial: str | None = None

    @property
    def name(self) -> str:
        return self.table.name

    def rows_filter(self) -> ColumnElement[bool]:
        """Rows of this table that belong to the copy (all but the copy's own marker)."""
        if self.table is meta:
            return meta.c.key != MARKER_KEY
        return true()

    def after(self, last: list[Any] | None) -> ColumnElement[bool]:
        """Rows whose key comes after ``last`` (all rows when None)."""
        if last is None:
            return self.rows_filter()
        cols = [self.table.c[k] for k in self.key]
        if len(cols) == 1:
            return and_(self.rows_filter(), cols[0] > last[0])
        return and_(self.rows_filter(), tuple_(*cols) > tuple_(*last))


#: Parents before children (memory_vectors and the entity tables have foreign keys).
TABLES: tuple[CopiedTable, ...] = (
    CopiedTable(vector_settings, ("key",)),
    CopiedTable(memories, ("seq",), serial="seq"),
    CopiedTable(memory_vectors, ("memory_seq",)),
    CopiedTable(memory_links, ("id",), serial="id"),
    CopiedTable(tombstones, ("id",), serial="id"),
    CopiedTable(idempotency_keys, ("scope", "owner", "key")),
    CopiedTable(proposals, ("id",)),
    CopiedTable(forget_requests, ("id",)),
    CopiedTable(entities, ("id",), serial="id"),
    CopiedTable(entity_aliases, ("entity_id", "alias")),
    CopiedTable(entity_mentions, ("entity_id", "memory_id", "surface")),
    CopiedTable(extractions, ("memory_id",)),
    CopiedTable(audit_events, ("seq",), serial="seq"),
    CopiedTable(audit_lanes, ("lane",)),
    CopiedTable(jobs, ("id",), serial="id"),
    CopiedTable(meta, ("key",)),
)

#: Tables whose rows mean the target already holds a store (a freshly migrated one holds only
#: vector_settings' dimension).
CONTENT_TABLES = tuple(t for t in TABLES if t.table is not vector_settings)


def adapt_row(copied: CopiedTable, row: dict[str, Any]) -> dict[str, Any]:
    """A source row as the target takes it: a leased job becomes ready again (its lease named
    a source daemon)."""
    if copied.table is jobs and row["state"] == "leased":
        return {**row, "state": "ready", "lease_owner": None, "lease_until": None, "lease_token": None}
    return row
