"""Inserting many rows at once: one multi-row statement where the backend has one
(PostgreSQL, from BULK_MIN_ROWS rows), else one executemany of a single-row INSERT.

Apart from store/prepared.py because it asks the backend (store/backends.py),
which the backends' own modules, importing prepared.py, must not reach."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, bindparam
from sqlalchemy.sql import ClauseElement

from memoryd.store.backends import backend_for
from memoryd.store.prepared import BULK_MIN_ROWS, prepare, run, run_many


def insert_rows(conn: Connection, table: Table, columns: Sequence[str], rows: Sequence[Mapping[str, Any]],
                *, do_nothing: bool = False) -> None:
    """Insert ``rows`` (each a value per name in ``columns``) into ``table``: one multi-row
    statement for BULK_MIN_ROWS rows or more where the backend has one (PostgreSQL:
    store/postgres/bulk.py), else one executemany of a single-row INSERT. ``do_nothing``:
    skip a row that conflicts."""
    if not rows:
        return

    backend = backend_for(conn)
    if backend.binds_arrays and len(rows) >= BULK_MIN_ROWS:  # compiled once per key (prepare)
        stmt = prepare(conn, ("insert-rows-bulk", table.name, tuple(columns), do_nothing),
                       lambda: backend.bulk_insert(table, columns, do_nothing=do_nothing))
        run(conn, stmt, {name: [r[name] for r in rows] for name in columns})
        return
    key = ("insert-rows", table.name, tuple(columns), do_nothing)

    def single() -> ClauseElement:
        ins = backend.insert(table)
        if do_nothing:
            ins = ins.on_conflict_do_nothing()
        return ins.values({name: bindparam(name) for name in columns})

    run_many(conn, prepare(conn, key, single), rows)
