"""``memoryd store copy``: move a store to another backend (SQLite to PostgreSQL, or back).

The target is migrated first (the one Alembic history), then every table of
store/copy/tables.py is copied in batches in the order of its key, ids kept.
Each batch is inserted in one target transaction together with the copy's
progress marker (the ``meta`` row ``store_copy``: the last key copied per
table), so a copy interrupted anywhere (Ctrl-C, kill -9, a lost connection)
resumes after its last committed batch when run again, and no row is copied
twice. Until a run has copied every table, built the index and verified the
copy, the marker says so, and a daemon refuses to start on the target
(store/copy/guard.py refuse_unfinished_copy). The source is read in one snapshot (a deferred SQLite read
transaction, a REPEATABLE READ one on PostgreSQL), so a run copies one
consistent state; between runs the source must not change, which the marker's
fingerprint checks (store/copy/guard.py).

The audit chain's events are copied as they are (their hashes cover their
fields, not the row's seq or backend), so it verifies on the target. At the
end, PostgreSQL's sequences are set past the copied ids, and the copy is
verified: rows per table equal on both sides, and the target's chain checked
from its genesis.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import Connection, Engine, delete, insert, select, text

from memoryd.store import audit, migrate, vectors
from memoryd.store.backends import backend_for
from memoryd.store.copy.guard import (
    CopyRefused,
    check_dimension,
    check_source_exists,
    check_target,
    count_rows,
    data_dir_locks,
    fingerprint,
    shown,
    sqlite_path,
    target_copy_lock,
)
from memoryd.store.copy.tables import MARKER_KEY, TABLES, CopiedTable, adapt_row
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.schema import memory_vectors, meta
from memoryd.store.vectors import vector_settings

log = structlog.get_logger(__name__)

DEFAULT_BATCH = 1000

#: Called after each committed batch: (table, rows of it on the target, rows of it on the source,
#: rows per second this run has copied it at).
Progress = Callable[[str, int, int, float], None]


class CopyInterrupted(Exception):
    """The copy stopped between two batches because ``should_stop`` said so (Ctrl-C): every
    batch committed so far is kept with its marker, and the next run resumes after it."""


@dataclass
class TableResult:
    """One table's outcome: rows on each side, and how many this run copied."""

    source: int
    target: int = 0
    copied: int = 0
    seconds: float = 0.0


@dataclass
class CopyReport:
    """What a copy did and what its verification found."""

    source: str
    target: str
    resumed: bool = False
    already_complete: bool = False
    tables: dict[str, TableResult] = field(default_factory=dict)
    audit_events: int = 0
    audit_break: int | None = None
    #: The last step: the vector index built, the sequences set past the copied ids.
    finish_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def counts_equal(self) -> bool:
        return all(t.source == t.target for t in self.tables.values())

    @property
    def verified(self) -> bool:
        return self.counts_equal and self.audit_break is None

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.source, "to": self.target, "resumed": self.resumed,
            "already_complete": self.already_complete, "seconds": round(self.seconds, 3),
            "finish_seconds": round(self.finish_seconds, 3),
            "tables": {name: {"source": t.source, "target": t.target, "copied": t.copied,
                              "seconds": round(t.seconds, 3)}
                       for name, t in self.tables.items()},
            "counts_equal": self.counts_equal,
            "audit": {"events": self.audit_events, "verified": self.audit_break is None,
                      "first_break_seq": self.audit_break},
            "verified": self.verified,
        }


def copy_store(source_url: str, target_url: str, *, batch_size: int = DEFAULT_BATCH,
               progress: Progress | None = None,
               should_stop: Callable[[], bool] | None = None) -> CopyReport:
    """Copy the store at ``source_url`` into ``target_url``, resuming an interrupted copy;
    return the report with its verification.

    ``should_stop`` is asked after each committed batch and before the last step: when it
    answers True the copy raises :class:`CopyInterrupted` there, between two transactions,
    instead of being torn out of a driver call (the CLI's Ctrl-C only sets a flag).

    :raises CopyRefused: the source is missing, in use or at another revision, or the target
        holds another store (the message says what to do).
    :raises ConfigError: the target server cannot hold a store (store/migrate.py upgrade).
    """
    started = time.monotonic()
    check_source_exists(source_url)
    with data_dir_locks(source_url, target_url):
        source = create_store_engine(source_url)
        target = create_store_engine(target_url)
        try:
            _check_source_revision(source, source_url)
            migrate.upgrade(target)
            with target_copy_lock(target), _snapshot(source) as src:
                report = _copy(src, target, source_url, target_url, batch_size, progress,
                               should_stop or (lambda: False))
        finally:
            source.dispose()
            target.dispose()
    report.seconds = time.monotonic() - started
    log.info("store.copied", tables=len(report.tables), seconds=round(report.seconds, 2),
             verified=report.verified)
    return report


def _check_source_revision(engine: Engine, url: str) -> None:
    current, head = migrate.current_revision(engine), migrate.head_revision()
    if current != head:
        raise CopyRefused(
            f"the source {shown(url)} is at schema revision {current!r}, this memoryd at {head!r}; "
            "start this memoryd's daemon on it once (it migrates at start), stop it, and copy "
            "again (the copy only reads its source)")


@contextlib.contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    """One read transaction over the whole source: every table as of one moment."""
    if backend_for(engine).name == "sqlite":
        with read_only(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield conn


def source_identity(url: str) -> str:
    """How the marker names the source: a SQLite file's real path, or the URL without password."""
    path = sqlite_path(url)
    return f"sqlite:{path.resolve()}" if path is not None else shown(url)


def _read_marker(conn: Connection) -> dict[str, Any] | None:
    value = conn.execute(select(meta.c.value).where(meta.c.key == MARKER_KEY)).scalar()
    return None if value is None else dict(json.loads(value))


def _write_marker(conn: Connection, marker: dict[str, Any]) -> None:
    stmt = backend_for(conn).insert(meta).values(key=MARKER_KEY, value=json.dumps(marker))
    conn.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": stmt.excluded.value}))


def _copy(src: Connection, target: Engine, source_url: str, target_url: str, batch_size: int,
          progress: Progress | None, should_stop: Callable[[], bool]) -> CopyReport:
    counts = count_rows(src)
    source_print = fingerprint(src, counts)
    source_id = source_identity(source_url)
    report = CopyReport(source=shown(source_url), target=shown(target_url),
                        tables={name: TableResult(source=n) for name, n in counts.items()})
    with target.begin() as conn:
        marker = _read_marker(conn)
        check_target(conn, marker, source_id, source_print, target_url)
        if marker is None:
            marker = {"source": source_id, "fingerprint": source_print, "tables": {}, "done": False,
                      "started_at": time.time()}
            if check_dimension(conn, vectors.index_dim(src)):
                # An empty target adopts the source's dimension (its index is rebuilt empty).
                backend_for(conn).rebuild_vector_index(conn, int(vectors.index_dim(src) or 0))
            # Built once at the end: a PostgreSQL HNSW index kept up to date row by row made
            # the vectors 90% of a copy's time.
            backend_for(conn).defer_vector_index(conn)
            _write_marker(conn, marker)
        else:
            report.resumed = True
    if marker["done"]:
        report.already_complete = True
    else:
        for copied in TABLES:
            _copy_table(src, target, copied, marker, batch_size, progress, report.tables[copied.name],
                        should_stop)
        if should_stop():
            raise CopyInterrupted("stopped before building the vector index")
        finishing = time.monotonic()
        with target.begin() as conn:
            backend_for(conn).build_vector_index(conn)
            _advance_sequences(conn)
            marker["done"] = True
            marker["finished_at"] = time.time()
            _write_marker(conn, marker)
        report.finish_seconds = time.monotonic() - finishing
    _verify(target, report)
    if marker.get("verified") != report.verified:
        # A daemon refuses a target whose copy did not verify (guard.refuse_unfinished_copy).
        marker["verified"] = report.verified
        with target.begin() as conn:
            _write_marker(conn, marker)
    return report


def _copy_table(src: Connection, target: Engine, copied: CopiedTable, marker: dict[str, Any],
                batch_size: int, progress: Progress | None, result: TableResult,
                should_stop: Callable[[], bool]) -> None:
    state = marker["tables"].setdefault(copied.name, {"after": None, "rows": 0})
    keys = [copied.table.c[k] for k in copied.key]
    started = time.monotonic()
    while True:
        stmt = select(copied.table).where(copied.after(state["after"])).order_by(*keys).limit(batch_size)
        rows = [adapt_row(copied, dict(r)) for r in src.execute(stmt).mappings()]
        if not rows:
            break
        with target.begin() as conn:
            _insert(conn, copied, rows)
            state["after"] = [rows[-1][k] for k in copied.key]
            state["rows"] += len(rows)
            _write_marker(conn, marker)
        result.copied += len(rows)
        if progress is not None:
            rate = result.copied / max(time.monotonic() - started, 1e-6)
            progress(copied.name, state["rows"], result.source, rate)
        if should_stop():
            raise CopyInterrupted(f"stopped after {state['rows']} rows of {copied.name}")
    result.seconds = time.monotonic() - started


def _insert(conn: Connection, copied: CopiedTable, rows: list[dict[str, Any]]) -> None:
    if copied.table is memory_vectors:
        # Through the backend: on SQLite the memory_vectors view's trigger files each vector in
        # the vec0 index under its owner.
        backend_for(conn).upsert_vectors(conn, rows)
        return
    if copied.table is vector_settings:
        # The source's settings replace the ones the target's migration recorded.
        conn.execute(delete(vector_settings))
    conn.execute(insert(copied.table), rows)


def _advance_sequences(conn: Connection) -> None:
    """Set each PostgreSQL sequence past the ids copied into its column, so the target's
    daemons hand out new ones (SQLite takes max(rowid) + 1 by itself)."""
    if backend_for(conn).name != "postgresql":
        return
    for copied in TABLES:
        if copied.serial is None:
            continue
        # Table and column names come from the schema, never from input.
        conn.execute(text(
            f"SELECT setval(pg_get_serial_sequence('{copied.name}', '{copied.serial}'), "
            f"(SELECT coalesce(max({copied.serial}), 0) + 1 FROM {copied.name}), false)"))


def _verify(target: Engine, report: CopyReport) -> None:
    with target.connect() as conn:
        for name, n in count_rows(conn).items():
            report.tables[name].target = n
        report.audit_events, report.audit_break = audit.verify(conn)
