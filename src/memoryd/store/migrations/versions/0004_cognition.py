"""Cognition: how a kind was decided, entities with aliases and mentions, extraction records.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN: a batch rebuild would drop the FTS and vector triggers.
    op.add_column("memories", sa.Column("kind_method", sa.String(16)))
    op.add_column("memories", sa.Column("kind_confidence", sa.Float))

    op.create_table(
        "entities",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("norm", sa.String(256), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("vector", sa.LargeBinary),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("scope", "owner", "norm", "type", name="uq_entity"),
    )
    op.create_table(
        "entity_aliases",
        sa.Column("entity_id", sa.Integer, sa.ForeignKey("entities.id", ondelete="CASCADE"), nullable=False),
        sa.Column("alias", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("entity_id", "alias"),
    )
    op.create_index("ix_alias", "entity_aliases", ["alias"])
    op.create_table(
        "entity_mentions",
        sa.Column("entity_id", sa.Integer, sa.ForeignKey("entities.id", ondelete="CASCADE"), nullable=False),
        sa.Column("memory_id", sa.String(32), nullable=False),
        sa.Column("surface", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("entity_id", "memory_id", "surface"),
    )
    op.create_index("ix_mentions_memory", "entity_mentions", ["memory_id"])
    op.create_table(
        "extractions",
        sa.Column("memory_id", sa.String(32), primary_key=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("extracted_at", sa.String(32), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("entities_kept", sa.Integer, nullable=False),
        sa.Column("facts_kept", sa.Integer, nullable=False),
        sa.Column("dropped_ungrounded", sa.Integer, nullable=False),
        sa.Column("dropped_vocabulary", sa.Integer, nullable=False),
    )
