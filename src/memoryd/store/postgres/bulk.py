"""Multi-row writes on PostgreSQL: one statement for many rows.

``INSERT INTO t (a, b) SELECT * FROM unnest(CAST(:a AS type[]), CAST(:b AS type[]))``
inserts any number of rows in one execution with one prepared plan, where an
executemany sends (and, in pipeline mode, waits on the socket for) one
statement per row (store/rows.py ``insert_rows``, from BULK_MIN_ROWS rows).
The group committer's plain groups go further: :func:`group_insert` writes
the rows, their audit events, the lane's head, corroborations and jobs in one
statement, each set bound as one JSON document.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

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


@functools.lru_cache(maxsize=8)
def group_insert(memory_columns: tuple[str, ...], event_columns: tuple[str, ...]) -> TextClause:
    """A plain group's writes in one statement (store/groupwrite.py): an executemany per table
    cost a pipelined statement per row, each ~40 µs of psycopg's client work and as much of the
    server's, and an array per column cost more to dump than the rows themselves below a few
    hundred rows. Here each set is one JSON document, which the server expands into rows:

    * ``m``: the new memories, objects keyed by ``memory_columns`` (``metadata`` an object);
    * ``e``: the audit events in chain order, keyed by ``event_columns`` (``detail`` an
      object), then the lane's head: ``lane``, its count ``n`` and hash ``h`` (``lane`` NULL
      when there are no events);
    * ``c``: ``{"id", "n"}``, corroborations to add to rows stored before this group (a row
      new in the group carries its own count);
    * ``j``: ``{"p", "t"}``, the jobs to enqueue in order (pass, target), each ``ready`` at
      ``now`` with ``max_attempts``; a live job of the same (pass, target) is kept.

    Rows and events are inserted in the documents' order (their seq order: each lane's events
    are verified in it). The corroborated rows are also named by ``id = ANY``: the planner
    takes a JSON document for 100 rows, and joined them against a scan of every memory rather
    than probing the id index (the caller plans a group with corroborations afresh, for the
    store's size). The sub-statements touch different rows: the corroborated rows were
    committed before the group, the new ones are inserted here."""
    mem = ", ".join(_quoted(c) for c in memory_columns)
    ev = ", ".join(_quoted(c) for c in event_columns)
    pick_mem = ", ".join(f"r.{_quoted(c)}" for c in memory_columns)
    pick_ev = ", ".join(f"r.{_quoted(c)}" for c in event_columns)
    # Table and column names are code constants; every value is bound.
    return text(
        f"WITH m AS (INSERT INTO memories ({mem}) SELECT {pick_mem} "
        "FROM json_populate_recordset(CAST(NULL AS memories), CAST(:m AS json)) WITH ORDINALITY AS r "
        "ORDER BY r.ordinality), "
        f"e AS (INSERT INTO audit_events ({ev}) SELECT {pick_ev} "
        "FROM json_populate_recordset(CAST(NULL AS audit_events), CAST(:e AS json)) WITH ORDINALITY AS r "
        "ORDER BY r.ordinality), "
        "l AS (UPDATE audit_lanes SET n = CAST(:n AS integer), hash = CAST(:h AS varchar) "
        "WHERE lane = CAST(:lane AS integer)), "
        "c AS (UPDATE memories SET corroboration = memories.corroboration + b.n "
        "FROM json_to_recordset(CAST(:c AS json)) AS b(id varchar, n integer) WHERE memories.id = b.id "
        "AND memories.id = ANY (ARRAY(SELECT x.id FROM json_to_recordset(CAST(:c AS json)) "
        "AS x(id varchar, n integer)))) "
        'INSERT INTO jobs ("pass", target, payload, state, priority, run_after, attempts, max_attempts, '
        "created_at, updated_at) "
        "SELECT j.p, j.t, CAST('{}' AS json), 'ready', 0, CAST(:now AS double precision), 0, "
        "CAST(:max_attempts AS integer), CAST(:now AS double precision), CAST(:now AS double precision) "
        "FROM ROWS FROM (json_to_recordset(CAST(:j AS json)) AS (p varchar, t varchar)) "
        "WITH ORDINALITY AS j(p, t, ord) ORDER BY j.ord "
        "ON CONFLICT DO NOTHING")


def group_lookup(lane_pick: str) -> TextClause:
    """A plain group's reads in one query (Backend.group_lookup): the tombstones and the stored
    rows of its identities, and its audit lane (``lane_pick``, SQL without parameters).

    The identities come as four array literals in text (:func:`text_array`): psycopg's list
    dumping (each element's type found in Python) cost more client CPU than the query took,
    and a JSON document hid the number of identities from the planner (100 rows assumed:
    a hash join over the whole table, 0.2 ms a call at 3,000 rows). Run it planned for its
    values (the group committer's connection lives long, and a generic plan made while the
    tables were small would scan them whole for good)."""
    # Table and column names are code constants; the pick is SQL memoryd compiled itself.
    return text(
        f"WITH lane AS ({lane_pick}) "
        "SELECT 0, t.scope, k.o, t.content_hash, CAST(NULL AS varchar), CAST(NULL AS varchar), "
        "CAST(NULL AS integer), CAST(NULL AS varchar), CAST(NULL AS integer) "
        "FROM tombstones AS t JOIN unnest(CAST(:s AS varchar[]), CAST(:o AS varchar[]), "
        "CAST(:ko AS varchar[]), CAST(:h AS varchar[])) AS k(s, o, ko, h) "
        "ON t.scope = k.s AND t.owner = k.ko AND t.content_hash = k.h "
        "UNION ALL "
        "SELECT 1, m.scope, m.owner, m.content_hash, m.id, m.recorded_at, m.corroboration, m.status, m.seq "
        "FROM memories AS m JOIN unnest(CAST(:s AS varchar[]), CAST(:o AS varchar[]), "
        "CAST(:h AS varchar[])) AS k(s, o, h) "
        "ON m.scope = k.s AND m.owner = k.o AND m.content_hash = k.h "
        "UNION ALL "
        "SELECT 2, NULL, NULL, NULL, NULL, lane.hash, lane.n, NULL, lane.lane FROM lane")


def text_array(values: Iterable[str]) -> str:
    """``values`` as a PostgreSQL array literal (``{"a","b\\"c"}``), bound as one text parameter
    and cast to ``varchar[]`` by the statement: every element double-quoted, its backslashes
    and double quotes escaped, so no value is read as anything but text."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"
