"""Alembic environment: migrations run on the connection memoryd hands in."""

from __future__ import annotations

from alembic import context

from memoryd.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - memoryd always passes a connection
    raise RuntimeError("memoryd migrations run through memoryd.store.migrate, not the alembic CLI")

context.configure(connection=connection, target_metadata=metadata)
context.run_migrations()
