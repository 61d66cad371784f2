"""The SQLite engine: pragmas, transaction modes, migrations, the schema guard, FTS5."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command as alembic_command
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, delete, event, inspect, select, text, update

from memoryd.store import driver
from memoryd.store.engine import SQLITE_PRAGMAS, read_only
from memoryd.store.memories import write_memory
from memoryd.store.migrate import MIGRATIONS_DIR, SchemaTooNew, current_revision, head_revision, upgrade
from memoryd.store.schema import memories, metadata

from .helpers import NOW, build_memory

#: What PRAGMA <name> reads back for each value SQLITE_PRAGMAS sets.
EXPECTED_READBACK = {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "secure_delete": 1,
                     "mmap_size": 1 << 30}


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine sends to the driver while the block runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.strip())

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def raw_connection(path: Path, timeout_s: float = 0.0) -> Any:
    """A second, non-pooled connection (autocommit, so BEGIN is ours to send)."""
    conn = driver.connect(str(path), timeout_s=timeout_s)
    conn.isolation_level = None
    return conn


def fts_ids(engine: Engine, query: str) -> set[str]:
    with read_only(engine) as conn:
        return {
            row[0]
            for row in conn.execute(
                text("SELECT m.id FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid "
                     "WHERE memories_fts MATCH :q"),
                {"q": query},
            )
        }


# -- pragmas ---------------------------------------------------------------------


def test_every_pragma_is_in_force_on_each_pooled_connection(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(busy_timeout_ms=4321)
    assert set(SQLITE_PRAGMAS) == set(EXPECTED_READBACK), "a new pragma needs its read-back value here"
    # Two connections checked out at once are two distinct pooled DB-API connections.
    # They are read through the DB-API cursor: a SQLAlchemy statement would begin an
    # IMMEDIATE transaction, and the second would wait for the first's write lock.
    with engine.connect() as first, engine.connect() as second:
        dbapi = [first.connection.dbapi_connection, second.connection.dbapi_connection]
        assert dbapi[0] is not dbapi[1]
        for raw in dbapi:
            for name, expected in EXPECTED_READBACK.items():
                value = raw.execute(f"PRAGMA {name}").fetchone()[0]
                assert value == expected, f"PRAGMA {name} is {value!r}, expected {expected!r}"
            assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 4321


def test_a_raw_connection_does_not_carry_the_engine_pragmas(db_path: Path,
                                                            make_engine: Callable[..., Engine]) -> None:
    # Positive control for the test above: the values come from the hook, not from defaults.
    make_engine()
    raw = raw_connection(db_path)
    try:
        assert raw.execute("PRAGMA foreign_keys").fetchone()[0] == 0
        assert raw.execute("PRAGMA secure_delete").fetchone()[0] == 0
    finally:
        raw.close()


# -- transaction modes -----------------------------------------------------------------


# What each transaction begins with, as SQLite receives it (the dialect sends BEGIN on the
# driver, not through SQLAlchemy's execute): tests/unit/test_write_statements.py.


def test_open_write_transaction_holds_the_write_lock_from_begin(db_path: Path, engine: Engine) -> None:
    raw = raw_connection(db_path, timeout_s=0.0)
    try:
        # Nothing is written in the engine's transaction: only BEGIN IMMEDIATE can hold the lock.
        with engine.begin(), pytest.raises(driver.sqlite_module().OperationalError, match="locked"):
            raw.execute("BEGIN IMMEDIATE")
        raw.execute("BEGIN IMMEDIATE")  # positive control: free once the transaction ends
        raw.execute("ROLLBACK")
    finally:
        raw.close()


def test_open_read_only_transaction_does_not_block_a_writer(db_path: Path, engine: Engine) -> None:
    raw = raw_connection(db_path, timeout_s=0.0)
    try:
        with read_only(engine) as conn:
            conn.execute(select(memories.c.id).limit(1))
            raw.execute("BEGIN IMMEDIATE")
            raw.execute("ROLLBACK")
    finally:
        raw.close()


# -- migrations ------------------------------------------------------------------------


def test_upgrade_brings_an_empty_database_to_head_with_every_table(
        make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(migrate=False)
    assert current_revision(engine) is None
    assert upgrade(engine) == head_revision()
    assert current_revision(engine) == head_revision()
    insp = inspect(engine)
    tables = set(insp.get_table_names()) | set(insp.get_view_names())  # memory_vectors: a view on SQLite
    assert set(metadata.tables) <= tables
    assert "memories_fts" in tables
    for name, table in metadata.tables.items():
        migrated = {c["name"] for c in insp.get_columns(name)}
        assert migrated == {c.name for c in table.columns}, f"columns of {name} differ from schema.py"
        declared = {i.name for i in table.indexes}
        assert declared <= {i["name"] for i in insp.get_indexes(name)}, f"indexes of {name} missing"


def _triggers(engine: Engine) -> set[str]:
    with read_only(engine) as conn:
        return set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'")).scalars())


def test_no_migration_drops_a_trigger_an_earlier_one_created(make_engine: Callable[..., Engine]) -> None:
    # SQLite drops a table's triggers with the table, so a migration that rebuilds
    # `memories` (alembic batch mode) silently unhooks FTS5 and the vector index.
    engine = make_engine(migrate=False)
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    revisions = [r.revision for r in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]
    seen: dict[str, str] = {}
    for revision in revisions:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            alembic_command.upgrade(cfg, revision)
        present = _triggers(engine)
        lost = {name: f"created by {made_by}, gone after {revision}"
                for name, made_by in seen.items() if name not in present}
        assert not lost, lost
        seen.update({name: revision for name in present if name not in seen})
    assert {"memories_fts_ai", "memories_fts_ad", "memories_fts_au"} <= set(seen)


def test_upgrade_at_head_changes_nothing(engine: Engine) -> None:
    with read_only(engine) as conn:
        before = conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name")).all()
    assert upgrade(engine) == head_revision()
    with read_only(engine) as conn:
        after = conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name")).all()
    assert before == after


def _snapshot(engine: Engine) -> tuple[Any, ...]:
    with read_only(engine) as conn:
        return (
            conn.execute(text("SELECT type, name, sql FROM sqlite_master ORDER BY name")).all(),
            conn.execute(text("SELECT version_num FROM alembic_version")).all(),
            conn.execute(text("SELECT * FROM future_only")).all(),
            conn.execute(select(memories.c.id, memories.c.content)).all(),
        )


def test_schema_guard_refuses_an_unknown_newer_revision_and_leaves_the_database_untouched(
        make_engine: Callable[..., Engine], write_ctx: Any) -> None:
    newer = make_engine()
    with newer.begin() as conn:
        write_memory(conn, build_memory("written by a newer memoryd"), NOW, write_ctx)
        conn.execute(text("CREATE TABLE future_only (x INTEGER)"))
        conn.execute(text("INSERT INTO future_only VALUES (42)"))
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    before = _snapshot(newer)
    newer.dispose()

    older = make_engine(migrate=False)
    with pytest.raises(SchemaTooNew) as info:
        upgrade(older)
    message = str(info.value)
    assert "9999_from_the_future" in message
    assert head_revision() in message
    assert "upgrade memoryd" in message
    assert info.value.code == 1003
    assert _snapshot(older) == before
    assert current_revision(older) == "9999_from_the_future"


# -- FTS5 stays in step with the rows ------------------------------------------------------


def _write(engine: Engine, write_ctx: Any, content: str, owner: str = "a1") -> str:
    with engine.begin() as conn:
        return write_memory(conn, build_memory(content, owner=owner), NOW, write_ctx)["id"]


def test_inserted_memory_is_found_by_fts_match(engine: Engine, write_ctx: Any) -> None:
    zebra = _write(engine, write_ctx, "the zebra lives in staging")
    other = _write(engine, write_ctx, "the giraffe lives in production")
    assert fts_ids(engine, "zebra") == {zebra}
    assert fts_ids(engine, "lives") == {zebra, other}


def test_deleted_memory_is_no_longer_found_by_fts(engine: Engine, write_ctx: Any) -> None:
    zebra = _write(engine, write_ctx, "the zebra lives in staging")
    keeper = _write(engine, write_ctx, "another zebra stays")
    with engine.begin() as conn:
        conn.execute(delete(memories).where(memories.c.id == zebra))
    assert fts_ids(engine, "zebra") == {keeper}


def test_updated_content_replaces_the_old_text_in_fts(engine: Engine, write_ctx: Any) -> None:
    mid = _write(engine, write_ctx, "the zebra lives in staging")
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mid).values(content="an okapi moved in"))
    assert fts_ids(engine, "okapi") == {mid}
    assert fts_ids(engine, "zebra") == set()


def test_content_set_to_null_leaves_no_fts_text(engine: Engine, write_ctx: Any) -> None:
    mid = _write(engine, write_ctx, "the zebra lives in staging")
    keeper = _write(engine, write_ctx, "a zebra that stays", owner="a2")
    with engine.begin() as conn:
        conn.execute(update(memories).where(memories.c.id == mid).values(content=None, status="forgotten"))
    assert fts_ids(engine, "zebra") == {keeper}
