"""When the remembered thing happened: ``memories.occurred_at`` (protocol 1.1).

Nullable, no default: ``recorded_at`` says when memoryd learned a thing,
``occurred_at`` when it happened or was said, and most writes do not know the
latter. Indexed, because a time filter on a conversation's turns reads a
range of it.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN: a batch rebuild would drop the FTS and vector triggers.
    op.add_column("memories", sa.Column("occurred_at", sa.String(32)))
    op.create_index("ix_memories_occurred_at", "memories", ["occurred_at"])
