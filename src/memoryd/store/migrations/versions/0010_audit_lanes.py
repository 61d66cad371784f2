"""Audit lanes: the audit log becomes a few hash chains appended side by side.

* ``audit_events.lane``: the chain an event is linked into (store/audit.py).
  Every event so far is lane 0, whose genesis is the single chain's, so an
  existing log verifies unchanged.
* ``audit_lanes``: one row per lane with its event count and newest hash.
  Lane 0's row is filled here from the log as it stands (its events and the
  hash of the newest), so from now on a log cut short at its end no longer
  matches its head row. An empty log gets no row (the first append opens
  lane 0): a freshly migrated store stays empty for ``memoryd store copy``.

SQLite keeps appending to lane 0 alone (one writer). On PostgreSQL a write
transaction takes the first lane no other transaction holds instead of one
advisory lock for the whole cluster (what this replaces).

Revision ID: 0010_audit_lanes
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memoryd.clock import to_rfc3339, utcnow

revision = "0010_audit_lanes"
down_revision = "0009"
branch_labels = None
depends_on = None

def upgrade() -> None:
    bind = op.get_bind()
    op.add_column("audit_events", sa.Column("lane", sa.Integer, nullable=False, server_default=sa.text("0")))
    lanes = op.create_table(
        "audit_lanes",
        sa.Column("lane", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("opened_at", sa.String(32), nullable=False),
        sa.Column("opened_by", sa.String(128), nullable=False),
    )
    events = sa.table("audit_events", sa.column("seq", sa.Integer), sa.column("hash", sa.String))
    count = int(bind.execute(sa.select(sa.func.count()).select_from(events)).scalar_one())
    if count == 0:
        return
    newest = bind.execute(sa.select(events.c.hash).order_by(events.c.seq.desc()).limit(1)).scalar()
    bind.execute(sa.insert(lanes).values(lane=0, n=count, hash=newest,
                                         opened_at=to_rfc3339(utcnow()), opened_by="migration 0010"))
