"""Lifecycle: links (supersedes, merged_into, cites), proposals for review,
forget requests, corroboration counts, and FTS5 secure-delete.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN: a batch (copy-and-move) rebuild would drop the FTS and vector triggers.
    op.add_column("memories", sa.Column("corroboration", sa.Integer, nullable=False,
                                        server_default=sa.text("1")))

    op.create_table(
        "memory_links",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("src_id", sa.String(32), nullable=False),
        sa.Column("dst_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("src_id", "dst_id", "kind", name="uq_link"),
    )
    op.create_index("ix_links_src", "memory_links", ["src_id", "kind"])
    op.create_index("ix_links_dst", "memory_links", ["dst_id", "kind"])

    op.create_table(
        "proposals",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("memory_ids", sa.JSON, nullable=False),
        sa.Column("pair_key", sa.String(64), nullable=False, unique=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("decided_at", sa.String(32)),
        sa.Column("decided_by", sa.String(256)),
        sa.Column("note", sa.Text),
    )
    op.create_index("ix_proposals_status", "proposals", ["status"])

    op.create_table(
        "forget_requests",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("subject", sa.JSON, nullable=False),
        sa.Column("memory_ids", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("tombstone", sa.Boolean, nullable=False),
        sa.Column("matched", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("finished_at", sa.String(32)),
    )

    if op.get_bind().dialect.name == "sqlite":
        # Deleted FTS entries are overwritten, not left in index segments.
        op.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('secure-delete', 1)")
