"""Initial schema: memories (+FTS5), vectors, audit, idempotency, tombstones, jobs, meta.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

FTS_SQLITE = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5(content, content='memories', "
    "content_rowid='seq', tokenize='porter unicode61 remove_diacritics 2')",
    # Keep FTS in step with the rows, in the same transaction as the change.
    "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories WHEN new.content IS NOT NULL "
    "BEGIN INSERT INTO memories_fts(rowid, content) VALUES (new.seq, new.content); END",
    "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories WHEN old.content IS NOT NULL "
    "BEGIN INSERT INTO memories_fts(memories_fts, rowid, content) "
    "VALUES ('delete', old.seq, old.content); END",
    "CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content) "
    "SELECT 'delete', old.seq, old.content WHERE old.content IS NOT NULL; "
    "INSERT INTO memories_fts(rowid, content) SELECT new.seq, new.content "
    "WHERE new.content IS NOT NULL; END",
]


def _ts(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.String(32), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False, unique=True),
        sa.Column("content", sa.Text, nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("agent_id", sa.String(256)),
        sa.Column("user_id", sa.String(256)),
        sa.Column("project", sa.String(256)),
        sa.Column("session_id", sa.String(256)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("importance", sa.Float, nullable=False),
        sa.Column("importance_raw", sa.Float, nullable=False),
        sa.Column("access_count", sa.Integer, nullable=False, server_default=sa.text("0")),
        _ts("last_accessed_at"),
        _ts("valid_from", nullable=False),
        _ts("valid_to"),
        _ts("recorded_at", nullable=False),
        _ts("retired_at"),
        _ts("expires_at"),
        sa.Column("derived", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("metadata", sa.JSON, nullable=False),
    )
    op.create_index("ix_memories_identity", "memories", ["scope", "owner", "content_hash"])
    op.create_index("ix_memories_status", "memories", ["status"])
    op.create_index("ix_memories_recorded_at", "memories", ["recorded_at"])

    op.create_table(
        "memory_vectors",
        sa.Column(
            "memory_seq",
            sa.Integer,
            sa.ForeignKey("memories.seq", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("dim", sa.Integer, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        _ts("embedded_at", nullable=False),
    )

    op.create_table(
        "audit_events",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        _ts("at", nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("memory_id", sa.String(32)),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_audit_memory", "audit_events", ["memory_id"])

    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(16), primary_key=True),
        sa.Column("owner", sa.String(256), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_idempotency_expires", "idempotency_keys", ["expires_at"])

    op.create_table(
        "tombstones",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        _ts("created_at", nullable=False),
        sa.Column("reason", sa.Text),
        sa.UniqueConstraint("scope", "owner", "content_hash", name="uq_tombstone_identity"),
    )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("pass", sa.String(32), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("run_after", sa.Float, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.String(128)),
        sa.Column("lease_until", sa.Float),
        sa.Column("lease_token", sa.String(32)),
        sa.Column("last_error", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
    )
    live = sa.text("state IN ('ready', 'leased')")
    op.create_index(
        "uq_jobs_live", "jobs", ["pass", "target"], unique=True,
        sqlite_where=live, postgresql_where=live,
    )
    op.create_index("ix_jobs_claim", "jobs", ["pass", "state", "run_after"])
    op.create_index("ix_jobs_target", "jobs", ["target"])

    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )

    if op.get_bind().dialect.name == "sqlite":
        for statement in FTS_SQLITE:
            op.execute(statement)
