"""What memoryd needs of a PostgreSQL server, checked at start before any migration."""

from __future__ import annotations

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from memoryd.errors import ConfigError
from memoryd.masking import mask_url

log = structlog.get_logger(__name__)

#: The oldest PostgreSQL memoryd supports (older servers are refused at start, not tested).
MIN_SERVER_VERSION = 15
#: The oldest pgvector: 0.7 (HNSW with cosine ops; 0.8 adds the iterative index scans the
#: vector leg turns on, and 0.7 ignores that setting, falling back to the exact scan when short).
MIN_PGVECTOR = (0, 7)

GET_PGVECTOR = ("install pgvector on the server (Debian/Ubuntu: apt install postgresql-<major>-pgvector; "
                "RHEL: dnf install pgvector_<major>; macOS: brew install pgvector; managed services "
                "offer it as the 'vector' extension), then run CREATE EXTENSION vector in the database "
                "as its owner or a superuser")


class ServerUnsuitable(ConfigError):
    """The PostgreSQL server lacks something memoryd needs."""


def check(engine: Engine) -> None:
    """Refuse a server older than MIN_SERVER_VERSION, or one without pgvector (creating the
    extension when it is available and we may)."""
    where = mask_url(engine.url.render_as_string(hide_password=False))
    try:
        conn = engine.connect()
    except OperationalError as exc:
        raise ServerUnsuitable(
            f"cannot reach the PostgreSQL server at {where} ({str(exc.orig).strip()}); check --db-url "
            "(host, port, database, user), and that the server runs and accepts this host") from None
    with conn:
        version = int(conn.exec_driver_sql("SHOW server_version_num").scalar_one())
        if version // 10000 < MIN_SERVER_VERSION:
            shown = conn.exec_driver_sql("SHOW server_version").scalar_one()
            raise ServerUnsuitable(
                f"PostgreSQL {shown} at {where} is older than {MIN_SERVER_VERSION}, the oldest memoryd "
                f"runs on; upgrade the server or point --db-url at PostgreSQL {MIN_SERVER_VERSION} or newer")
        installed = conn.exec_driver_sql(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'").scalar()
        if installed is None:
            available = conn.exec_driver_sql(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").scalar()
            if available is None:
                raise ServerUnsuitable(
                    f"the PostgreSQL server at {where} has no pgvector: memoryd needs the 'vector' "
                    f"extension (CREATE EXTENSION vector) for its vector index; {GET_PGVECTOR}")
            try:
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
                conn.commit()
            except DBAPIError as exc:
                raise ServerUnsuitable(
                    f"pgvector {available} is installed on the server at {where}, but this role may not "
                    f"create the extension ({exc.orig}); ask the database owner or a superuser to run "
                    "CREATE EXTENSION vector in this database") from None
            installed = conn.exec_driver_sql(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'").scalar_one()
            log.info("store.pgvector_created", version=installed)
        if _version_tuple(str(installed)) < MIN_PGVECTOR:
            raise ServerUnsuitable(
                f"pgvector {installed} in the database at {where} is older than "
                f"{'.'.join(map(str, MIN_PGVECTOR))}; run ALTER EXTENSION vector UPDATE after installing "
                "a newer pgvector on the server")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())
