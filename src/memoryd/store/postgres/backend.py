"""PostgresBackend: the PostgreSQL implementation of store/backend.py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Select,
    Table,
    any_,
    bindparam,
    select,
    text,
)
from sqlalchemy.dialects import postgresql

from memoryd.store.backend import Backend, Stoppable
from memoryd.store.postgres import lexical, notify, server, vectors
from memoryd.store.schema import memories

if TYPE_CHECKING:
    import numpy as np

    from memoryd.store.search_request import SearchRequest

#: pg_advisory_xact_lock keys (one namespace for memoryd: 0x6d656d6f = "memo").
AUDIT_LOCK = 0x6D656D6F_0001
SCHEMA_LOCK = 0x6D656D6F_0002

#: Transaction locks on a set of 64-bit keys, taken in ascending order (the sorted subquery
#: feeds the aggregate row by row).
_LOCK_IDENTITIES = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT unnest(:keys) AS k ORDER BY k) AS ordered"
).bindparams(bindparam("keys", type_=ARRAY(BigInteger)))


def identity_key(name: str) -> int:
    """A write identity's advisory-lock key: 64 bits of its BLAKE2b digest, signed as bigint."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class PostgresBackend(Backend):
    """PostgreSQL with pgvector (store/postgres/lexical.py, store/postgres/vectors.py)."""

    name = "postgresql"
    max_knn = vectors.MAX_KNN

    def insert(self, table: Table) -> postgresql.Insert:
        return postgresql.insert(table)

    def by_seq(self, columns: Sequence[ColumnElement[Any]], name: str) -> Select[Any]:
        # = ANY(array): one parameter whatever the number of seqs (the primary key's index).
        return select(*columns).where(memories.c.seq == any_(bindparam(name, [], type_=ARRAY(BigInteger))))

    def seq_values(self, seqs: Sequence[int]) -> Any:
        return [int(s) for s in seqs]

    def lock_claim(self, pick: Select[Any]) -> Select[Any]:
        # Daemons sharing the queue: a row another claimer has locked is skipped, not waited on
        # and never taken twice.
        return pick.with_for_update(skip_locked=True)

    def lock_identities(self, conn: Connection, names: Iterable[str]) -> None:
        # Two daemons writing one text (or one idempotency key) at once would each find no
        # prior row and insert their own. Locks are taken in key order, in one statement,
        # so two transactions locking overlapping sets cannot deadlock.
        keys = sorted({identity_key(name) for name in names})
        if keys:
            conn.execute(_LOCK_IDENTITIES, {"keys": keys})

    def serialize_audit(self, conn: Connection) -> None:
        # Appends read the chain's head, then insert after it: one appender at a time, until commit.
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({AUDIT_LOCK})")

    def notify_jobs(self, conn: Connection) -> None:
        notify.notify_jobs(conn)

    def job_listener(self, engine: Engine, wake: Callable[[], None]) -> Stoppable | None:
        return notify.JobListener(engine, wake).start()

    def lexical(self, conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
        return lexical.lexical(conn, req, now, limit)

    def knn(self, conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
            statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
        return vectors.knn(conn, query, k=k, scope_keys=scope_keys, statuses=statuses, kind=kind)

    def upsert_vectors(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        vectors.upsert(conn, rows)

    def erase_vectors(self, conn: Connection, seqs: Sequence[int]) -> int:
        return vectors.erase(conn, seqs)

    def rebuild_vector_index(self, conn: Connection, dim: int) -> None:
        _unbounded(conn)
        vectors.rebuild_index(conn, dim)

    def defer_vector_index(self, conn: Connection) -> None:
        vectors.drop_index(conn)

    def build_vector_index(self, conn: Connection) -> None:
        _unbounded(conn)
        vectors.create_index(conn)

    def check_server(self, engine: Engine) -> None:
        server.check(engine)

    def lock_schema(self, conn: Connection) -> None:
        # A migration builds indexes over the whole store, and a second daemon starting at once
        # waits here for the first one's: neither is a stuck wait the timeouts are for.
        _unbounded(conn)
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")


def _unbounded(conn: Connection) -> None:
    """Lift the session's lock and statement timeouts (store/engine.py) for the rest of this
    transaction: an index build over every vector may rightly take minutes."""
    conn.exec_driver_sql("SET LOCAL lock_timeout = 0")
    conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
