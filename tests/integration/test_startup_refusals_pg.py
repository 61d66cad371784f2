"""What ``memoryd run --db-url postgresql://...`` refuses at start (exit 2, before binding a
socket), with what to do: a server without pgvector, and a database at a newer revision."""

from __future__ import annotations

import socket
from collections.abc import Callable

import psycopg
import pytest

from tests.integration.harness import DaemonHandle, pg_connection
from tests.postgres import SYSTEM_PG_URL

pytestmark = pytest.mark.postgres

EXIT_REFUSED = 2


def test_a_server_without_pgvector_is_refused_at_start_saying_how_to_get_it(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    try:
        psycopg.connect(SYSTEM_PG_URL.replace("+psycopg", ""), connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {SYSTEM_PG_URL}: {exc}")
    # A bare postgresql:// URL, as a user writes it (memoryd picks psycopg 3 for it).
    daemon = start_daemon("no-pgvector", start=False,
                          db_url=SYSTEM_PG_URL.replace("postgresql+psycopg://", "postgresql://"))
    assert daemon.run_to_exit() == EXIT_REFUSED, daemon.stderr_tail()
    stderr = daemon.stderr_text()
    assert "has no pgvector" in stderr and "CREATE EXTENSION vector" in stderr
    assert "apt install postgresql-<major>-pgvector" in stderr
    assert "Traceback" not in stderr
    assert not daemon.socket.exists()


def test_a_postgres_database_from_a_newer_memoryd_is_refused_and_left_untouched(
        start_daemon: Callable[..., DaemonHandle], pg_url: str) -> None:
    daemon = start_daemon("future-pg", db_url=pg_url)
    kept = daemon.write("The schema test row")["id"]
    assert daemon.stop() == 0
    head = daemon.scalar("SELECT version_num FROM alembic_version")
    with daemon.db() as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_memoryd'")

    assert daemon.run_to_exit() == EXIT_REFUSED
    stderr = daemon.stderr_text()
    assert "'9999_from_a_newer_memoryd', newer than this memoryd" in stderr
    assert "Traceback" not in stderr and not daemon.socket.exists()
    assert daemon.scalar("SELECT version_num FROM alembic_version") == "9999_from_a_newer_memoryd"

    # Positive control: stamped back, the same database serves its row.
    with pg_connection(pg_url) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (head,))
    daemon.expect_clean_exit = True
    daemon.start()
    assert daemon.call("memory.get", {"id": kept})["content"] == "The schema test row"


def test_an_unreachable_server_is_refused_at_start_without_a_traceback_or_the_password(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = start_daemon("unreachable", start=False,
                          db_url=f"postgresql://memoryd:s3cret-pw@127.0.0.1:{port}/memoryd")
    assert daemon.run_to_exit() == EXIT_REFUSED, daemon.stderr_tail()
    stderr = daemon.stderr_text()
    shown = f"postgresql+psycopg://memoryd:***@127.0.0.1:{port}"
    assert f"cannot reach the PostgreSQL server at {shown}" in stderr
    assert "check --db-url" in stderr
    assert "Traceback" not in stderr and "s3cret-pw" not in stderr.replace(" ".join(daemon.argv), "")
    assert not daemon.socket.exists()
