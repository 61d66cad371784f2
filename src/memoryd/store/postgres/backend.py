"""PostgresBackend: the PostgreSQL implementation of store/backend.py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
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
from sqlalchemy.exc import DBAPIError

from memoryd.store.backend import Backend, Stoppable
from memoryd.store.postgres import bulk, lexical, notify, server, vectors
from memoryd.store.prepared import fetch, prepare, run
from memoryd.store.schema import memories

if TYPE_CHECKING:
    import numpy as np

    from memoryd.store.search_request import SearchRequest

#: pg_advisory_xact_lock keys (one namespace for memoryd: 0x6d656d6f = "memo").
SCHEMA_LOCK = 0x6D656D6F_0002
#: Lane n's opening is locked under AUDIT_LANE_LOCKS + n.
AUDIT_LANE_LOCKS = 0x6D656D6F_1000_0000

_TRY_LANE = text("SELECT pg_try_advisory_xact_lock(:k)")

#: Transaction locks on a set of 64-bit keys, taken in ascending order (the sorted subquery
#: feeds the aggregate row by row). The keys come as one JSON array: a bigint[] parameter
#: cost psycopg more client CPU to dump (each element's type found and dumped in Python)
#: than the statement took to run.
_LOCK_IDENTITIES = text(
    "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT CAST(v AS bigint) AS k "
    "FROM json_array_elements_text(CAST(:keys AS json)) AS v ORDER BY 1) AS ordered")


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
        # so two transactions locking overlapping sets cannot deadlock. On the driver's
        # cursor: the group committer sends it in pipeline mode, in its first round trip.
        keys = sorted({identity_key(name) for name in names})
        if keys:
            run(conn, prepare(conn, "lock-identities", lambda: _LOCK_IDENTITIES),
                {"keys": "[" + ",".join(map(str, keys)) + "]"})

    def pipeline(self, conn: Connection) -> AbstractContextManager[Any]:
        return _pipeline(conn)

    def commit_in_pipeline(self, conn: Connection) -> None:
        # Queued behind the inserts: the pipeline's closing sync carries them and the COMMIT in
        # one round trip (psycopg then finds the session idle, and the transaction's own
        # commit sends nothing).
        run(conn, prepare(conn, "commit", lambda: text("COMMIT")), {})

    binds_arrays = True

    def bulk_insert(self, table: Table, columns: Sequence[str], *, do_nothing: bool = False) -> Any:
        return bulk.unnest_insert(table, columns, do_nothing=do_nothing)

    group_statements = True

    def group_lookup(self, lane_pick: str) -> Any:
        return bulk.group_lookup(lane_pick)

    def group_lookup_params(self, identities: Sequence[tuple[str, str, str, str]]) -> dict[str, Any]:
        columns = list(zip(*identities, strict=True)) or [(), (), (), ()]
        return {name: bulk.text_array(col) for name, col in zip(("s", "o", "ko", "h"), columns, strict=True)}

    def group_insert(self, memory_columns: Sequence[str], event_columns: Sequence[str]) -> Any:
        return bulk.group_insert(tuple(memory_columns), tuple(event_columns))

    def identity_lookup(self, table: Table, extra: Sequence[str]) -> Any:
        # Three array parameters whatever the number of identities: one plan, and each
        # identity probes the (scope, owner, content_hash) index (a row-value IN list of 64
        # identities took 1.5 ms a call under load, mostly planning).
        # Table and column names are code constants; the values are bound.
        cols = ", ".join(f"t.{name}" for name in ("scope", "owner", "content_hash", *extra))
        return text(
            f"SELECT {cols} FROM {table.name} AS t JOIN unnest(CAST(:s AS VARCHAR[]), "
            "CAST(:o AS VARCHAR[]), CAST(:h AS VARCHAR[])) AS k(s, o, h) "
            "ON t.scope = k.s AND t.owner = k.o AND t.content_hash = k.h")

    def lock_audit_lane(self, pick: Select[Any]) -> Select[Any]:
        # A lane another transaction is appending to is skipped, not waited on: daemons never
        # queue behind each other's audit appends (store/audit.py).
        return pick.with_for_update(skip_locked=True)

    def try_lock_lane(self, conn: Connection, lane: int) -> bool:
        # Two transactions opening the same new lane: the second moves on to the next number
        # instead of waiting on the first one's insert.
        rows = fetch(conn, prepare(conn, "audit-lane-try", lambda: _TRY_LANE), {"k": AUDIT_LANE_LOCKS + lane})
        return bool(rows[0][0])

    def notify_jobs(self, conn: Connection) -> None:
        notify.notify_jobs(conn)

    def job_listener(self, engine: Engine, wake: Callable[[], None]) -> Stoppable | None:
        return notify.Cluster(engine, wake).start()

    def deferred_notifier(self, engine: Engine) -> Callable[[], None] | None:
        found = notify.deferred_notifier(engine)
        return None if found is None else found.request

    def defer_notify(self, conn: Connection, defer: bool = True) -> None:
        if defer:
            conn.info[notify.DEFER_NOTIFY] = True
        else:
            conn.info.pop(notify.DEFER_NOTIFY, None)
            conn.info.pop(notify.NOTIFY_PENDING, None)

    def take_notify(self, conn: Connection) -> bool:
        return bool(conn.info.pop(notify.NOTIFY_PENDING, False))

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

    def reindex_vectors(self, engine: Engine) -> None:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("SET lock_timeout = 0")  # a build over every vector takes minutes
            conn.exec_driver_sql("SET statement_timeout = 0")
            vectors.reindex(conn)

    def check_server(self, engine: Engine) -> None:
        server.check(engine)

    def lock_schema(self, conn: Connection) -> None:
        # A migration builds indexes over the whole store, and a second daemon starting at once
        # waits here for the first one's: neither is a stuck wait the timeouts are for.
        _unbounded(conn)
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")


@contextmanager
def _pipeline(conn: Connection) -> Iterator[None]:
    """psycopg's pipeline mode on ``conn``'s driver connection; an error raised as the pipeline
    syncs is SQLAlchemy's DBAPIError, as any other statement's (callers map it to 1003)."""
    import psycopg

    driver: Any = conn.connection.driver_connection
    try:
        with driver.pipeline():
            yield
    except psycopg.Error as exc:
        raise DBAPIError.instance(None, None, exc, psycopg.Error, hide_parameters=True,
                                  dialect=conn.dialect) from exc


def _unbounded(conn: Connection) -> None:
    """Lift the session's lock and statement timeouts (store/engine.py) for the rest of this
    transaction: an index build over every vector may rightly take minutes."""
    conn.exec_driver_sql("SET LOCAL lock_timeout = 0")
    conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
