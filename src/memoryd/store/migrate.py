"""Apply migrations at start, and refuse a database written by a newer memoryd."""

from __future__ import annotations

from pathlib import Path

import structlog
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from memoryd.errors import MemorydError
from memoryd.store.backends import backend_for

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


class SchemaTooNew(MemorydError):
    """The database was migrated by a newer memoryd than this one."""

    code = 1003


def _alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    """The newest schema revision this memoryd knows."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> str:
    """Bring the database to this memoryd's head revision; return it.

    Raises SchemaTooNew, without touching the database, when the database
    carries a revision this memoryd does not know, and the backend's refusal
    (ConfigError) when the server lacks what memoryd needs (store/backend.py
    check_server: PostgreSQL older than 15, no pgvector).
    """
    backend = backend_for(engine)
    backend.check_server(engine)
    cfg = _alembic_config()
    script = ScriptDirectory.from_config(cfg)
    known = {rev.revision for rev in script.walk_revisions()}
    current = current_revision(engine)
    if current is not None and current not in known:
        raise SchemaTooNew(
            f"the database schema is at revision {current!r}, newer than this memoryd "
            f"(which knows up to {script.get_current_head()!r}); upgrade memoryd, or point "
            "--data-dir/--db-url at another store"
        )
    with engine.begin() as conn:
        backend.lock_schema(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    head = head_revision()
    if current != head:
        log.info("store.migrated", from_revision=current, to_revision=head)
    return head
