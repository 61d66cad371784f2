"""The one interface between memoryd's backend-neutral store and a database engine.

Everything about memories (scopes, duplicates and tombstones, lifecycle,
ranking and fusion, result shapes) is written once, in store/. What a database
does its own way lives behind :class:`Backend`, one subclass per engine:

* store/sqlite/   FTS5 + BM25, sqlite-vec (vec0) KNN, JSON-array seq sets,
                  claims under ``BEGIN IMMEDIATE``;
* store/postgres/ tsvector + GIN ranked by ``ts_rank_cd``, pgvector HNSW KNN
                  with the scope filter inside the scan, array seq sets,
                  ``FOR UPDATE SKIP LOCKED`` claims, advisory locks.

``backend_for(conn)`` picks the backend from the connection's dialect.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, Select, Table
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

from memoryd.errors import ConfigError

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

    def serialize_audit(self, conn: Connection) -> None:  # noqa: B027 - optional hook
        """Make this transaction the only one appending to the audit chain until it ends
        (SQLite's write lock already does)."""

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

    # -- the server -----------------------------------------------------------------------------
    def check_server(self, engine: Engine) -> None:  # noqa: B027 - optional hook
        """Refuse, before any migration, a server memoryd cannot run on (raise ConfigError)."""


_BACKENDS: dict[str, Backend] = {}


def backend_for(bind: Connection | Engine) -> Backend:
    """The backend for ``bind``'s dialect."""
    name = bind.dialect.name
    found = _BACKENDS.get(name)
    if found is not None:
        return found
    if name == "sqlite":
        from memoryd.store.sqlite.backend import SqliteBackend

        found = SqliteBackend()
    elif name == "postgresql":
        from memoryd.store.postgres.backend import PostgresBackend

        found = PostgresBackend()
    else:
        raise ConfigError(f"memoryd stores data in SQLite or PostgreSQL, not {name!r}; "
                          "use a sqlite:/// or postgresql:// --db-url")
    _BACKENDS[name] = found
    return found
