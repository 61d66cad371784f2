"""The one interface between memoryd's backend-neutral store and a database engine.

Everything about memories (scopes, duplicates and tombstones, lifecycle,
ranking and fusion, result shapes) is written once, in store/. What a database
does its own way lives behind :class:`Backend`, one subclass per engine:

* store/sqlite/   FTS5 + BM25, sqlite-vec (vec0) KNN, JSON-array seq sets,
                  claims under ``BEGIN IMMEDIATE``;
* store/postgres/ tsvector + GIN ranked by ``ts_rank_cd``, pgvector HNSW KNN
                  with the scope filter inside the scan, array seq sets,
                  ``FOR UPDATE SKIP LOCKED`` claims, advisory locks.

Which backend serves a connection is chosen above both, in store/backends.py
(``backend_for``): this module imports neither backend, and they import it for
the base class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, Select, Table
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

from memoryd.store.prepared import savepoint

if TYPE_CHECKING:
    import numpy as np

    from memoryd.store.search_request import SearchRequest


class Stoppable(Protocol):
    def stop(self) -> None: ...


class Backend(ABC):
    """What differs between database engines; each method runs in the caller's transaction."""

    #: SQLAlchemy's dialect name for the engine.
    name: str
    #: The most rows one nearest-neighbour query returns (the vector leg fetches up to this many).
    max_knn: int

    # -- statements ---------------------------------------------------------------------------
    @abstractmethod
    def insert(self, table: Table) -> SqliteInsert | PgInsert:
        """An INSERT for ``table`` that supports ``on_conflict_do_nothing`` and
        ``on_conflict_do_update`` (both dialects spell them alike)."""

    @abstractmethod
    def by_seq(self, columns: Sequence[ColumnElement[Any]], name: str) -> Select[Any]:
        """SELECT ``columns`` (of ``memories``) of the rows whose seq is in the set of integers
        bound as parameter ``name``, each row looked up by its key. One parameter whatever the
        set's size, so the statement compiles once; add conditions with ``.where``."""

    @abstractmethod
    def seq_values(self, seqs: Sequence[int]) -> Any:
        """The driver value for a :meth:`by_seq` parameter."""

    @abstractmethod
    def lock_claim(self, pick: Select[Any]) -> Select[Any]:
        """The job-claim subquery, made safe against other claimers (store/queue jobs.claim)."""

    def pipeline(self, conn: Connection) -> AbstractContextManager[Any]:
        """A block in which the statements memoryd runs on the driver's cursor
        (store/prepared.py) are sent without waiting for each answer: a query's rows
        arrive when they are fetched, and everything sent before shares that round trip
        (PostgreSQL's pipeline mode). Only store/prepared.py statements may run inside it.
        SQLite answers in-process: nothing to pipeline."""
        return nullcontext()

    def savepoint(self, conn: Connection) -> AbstractContextManager[Any]:
        """A savepoint around a block: an exception leaves the block rolled back alone. On the
        driver's cursor (store/prepared.py), so it may sit inside :meth:`pipeline`; SQLAlchemy's
        ``begin_nested`` cost 51 µs of CPU a savepoint on SQLite, this 7 µs."""
        return savepoint(conn)

    def commit_in_pipeline(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Queue this transaction's COMMIT inside :meth:`pipeline`, to go with what was queued
        before it (SQLite commits when the transaction block ends)."""

    #: Whether the database admits one write transaction at a time (SQLite): the audit log
    #: then always appends to lane 0, read by its key (store/audit.py).
    one_writer = False

    #: Whether the driver binds lists as SQL arrays: :meth:`bulk_insert` and
    #: :meth:`identity_lookup` then return statements.
    binds_arrays = False

    def bulk_insert(self, table: Table, columns: Sequence[str], *, do_nothing: bool = False) -> Any:
        """One statement that inserts any number of rows into ``table``, each column bound as
        an array named like it; None where the driver's executemany is as good (SQLite runs
        it in-process, no round trip per row)."""
        return None

    #: Whether a plain group (store/groupwrite.py) is read in one statement
    #: (:meth:`group_lookup`) and written in one (:meth:`group_insert`). Where it is not
    #: (SQLite, which runs statements in-process: no round trip nor per-statement client
    #: work to save), it takes a query per table and an executemany per table.
    group_statements = False

    def group_lookup(self, lane_pick: str) -> Any:
        """One query for a plain group's reads, its identities bound by
        :meth:`group_lookup_params`: rows ``(part, scope, owner, content_hash, id,
        recorded_at, corroboration, status, seq)`` where part 0 is a tombstone (its owner
        given back in the clear), part 1 a stored row of an identity, and part 2 the audit
        lane ``lane_pick`` (SQL) returns, as ``(2, NULL, NULL, NULL, NULL, hash, n, NULL,
        lane)``. Only with :attr:`group_statements`."""
        raise NotImplementedError

    def group_lookup_params(self, identities: Sequence[tuple[str, str, str, str]]) -> dict[str, Any]:
        """The parameters of :meth:`group_lookup` for (scope, owner, the owner's keyed hash,
        content hash) identities."""
        raise NotImplementedError

    def group_insert(self, memory_columns: Sequence[str], event_columns: Sequence[str]) -> Any:
        """One statement that writes a plain group whole: its new rows (``memory_columns``),
        the corroborations of rows stored before, its audit events (``event_columns``) and
        their lane's head, and its jobs, each set bound as one JSON document
        (store/postgres/bulk.py names the parameters). Only with :attr:`group_statements`."""
        raise NotImplementedError

    def identity_lookup(self, table: Table, extra: Sequence[str]) -> Any:
        """A query for the rows of ``table`` whose (scope, owner, content_hash) is among the
        arrays bound as ``s``, ``o`` and ``h``, returning those three then ``extra``; None
        where the backend binds no arrays (store/groupwrite.py then expands IN lists)."""
        return None

    def lock_audit_lane(self, pick: Select[Any]) -> Select[Any]:
        """The audit-lane pick (store/audit.py), made to skip lanes other transactions hold
        and to hold the one it returns until commit (SQLite's write lock already does)."""
        return pick

    def try_lock_lane(self, conn: Connection, lane: int) -> bool:
        """Whether this transaction may open audit lane ``lane``: no other open transaction
        is opening it (never waits; SQLite's write lock already makes it so)."""
        return True

    def lock_identities(self, conn: Connection, names: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Make this transaction the only one writing under each of ``names`` (a content
        identity or an idempotency key) until it ends, so the duplicate and key checks see
        every write committed before (SQLite's write lock already does)."""

    def lock_schema(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Make this transaction the only one migrating the schema until it ends (daemons
        starting together on one database; SQLite's write lock already does)."""

    def notify_jobs(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Wake the other daemons sharing this store when this transaction commits (a
        single daemon wakes its own runner in-process)."""

    def deferred_notifier(self, engine: Engine) -> Callable[[], None] | None:
        """What sends the wake-up :meth:`notify_jobs` would have sent, after a commit (None:
        transactions notify themselves; with no listener started, or on SQLite)."""
        return None

    def defer_notify(self, conn: Connection, defer: bool = True) -> None:  # noqa: B027 - optional hook
        """Make :meth:`notify_jobs` on ``conn`` only mark its transaction (see :meth:`take_notify`);
        ``defer=False`` undoes it (before the connection goes back to the pool)."""

    def take_notify(self, conn: Connection) -> bool:
        """Whether ``conn``'s last transaction enqueued jobs it did not notify (and forget it)."""
        return False

    def job_listener(self, engine: Engine, wake: Callable[[], None]) -> Stoppable | None:
        """A started listener that calls ``wake`` when another daemon enqueues jobs (None
        where daemons cannot share a store)."""
        return None

    # -- search legs ----------------------------------------------------------------------------
    @abstractmethod
    def lexical(self, conn: Connection, req: SearchRequest, now: str, limit: int) -> list[dict[str, Any]]:
        """Rows matching the query's words that pass the request's filters, best first, each
        with the CANDIDATE columns and ``bm25`` (the engine's text score, higher is better)."""

    @abstractmethod
    def knn(self, conn: Connection, query: np.ndarray, *, k: int, scope_keys: Sequence[str],
            statuses: Sequence[str], kind: str | None) -> list[tuple[int, float]]:
        """(memory_seq, cosine distance) of the ``k`` nearest vectors whose rows pass the
        scope (``scope:owner`` keys), status and kind filters, nearest first. The filters
        apply inside the search: never a fixed cut filtered afterwards."""

    # -- vectors --------------------------------------------------------------------------------
    @abstractmethod
    def upsert_vectors(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace memory_vectors rows."""

    @abstractmethod
    def erase_vectors(self, conn: Connection, seqs: Sequence[int]) -> int:
        """Erase the vectors of memories ``seqs``; return how many there were."""

    @abstractmethod
    def rebuild_vector_index(self, conn: Connection, dim: int) -> None:
        """Drop every vector and make the index hold ``dim``-dimensional ones."""

    def defer_vector_index(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Drop the vector index ahead of a bulk load (store copy), for
        :meth:`build_vector_index` to build once at the end (SQLite's vec0 table is
        the index itself: nothing to defer)."""

    def build_vector_index(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Build the vector index :meth:`defer_vector_index` dropped (a no-op when it exists)."""

    def reindex_vectors(self, engine: Engine) -> None:  # noqa: B027 - optional hook
        """Build the vector index in the database again with the current parameters, while
        daemons go on using it (SQLite keeps none there: its graphs live beside the store, and
        ``memoryd store reindex`` rebuilds them itself)."""

    # -- the server -----------------------------------------------------------------------------
    def check_server(self, engine: Engine) -> None:  # noqa: B027 - optional hook
        """Refuse, before any migration, a server memoryd cannot run on (raise ConfigError)."""
