"""Multi-row INSERT on PostgreSQL: one statement, one array parameter per column.

``INSERT INTO t (a, b) SELECT * FROM unnest(CAST(:a AS type[]), CAST(:b AS type[]))``
inserts any number of rows in one execution with one prepared plan, where an
executemany sends (and, in pipeline mode, waits on the socket for) one
statement per row. The group committer inserts its memories, audit events and
jobs this way (store/prepared.py ``insert_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import JSON, Table, TextClause, text
from sqlalchemy.dialects import postgresql


def unnest_insert(table: Table, columns: Sequence[str], *, do_nothing: bool = False) -> TextClause:
    """The statement for ``table``'s ``columns``, each bound as an array named like the column
    (``ON CONFLICT DO NOTHING`` with ``do_nothing``)."""
    dialect = postgresql.dialect()
    casts = []
    for name in columns:
        col = table.c[name]
        # JSON values arrive already dumped (store/prepared.py): text cast to json per element.
        sql_type = "JSON" if isinstance(col.type, JSON) else col.type.compile(dialect=dialect)
        casts.append(f"CAST(:{name} AS {sql_type}[])")
    # Table, column and type names are code constants; every value is bound.
    sql = (f"INSERT INTO {table.name} ({', '.join(_quoted(c) for c in columns)}) "
           f"SELECT * FROM unnest({', '.join(casts)})")
    if do_nothing:
        sql += " ON CONFLICT DO NOTHING"
    return text(sql)


def _quoted(name: str) -> str:
    # "pass" is a reserved word (jobs.pass).
    return f'"{name}"'
