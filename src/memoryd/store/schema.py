"""SQLAlchemy Core tables. Migrations (store/migrations) create exactly these.

Timestamps on memories are RFC 3339 strings of fixed width (see clock.py), so
they compare correctly as text on every backend; queue times are epoch
seconds because the queue does arithmetic on them.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from memoryd.store.postgres.vector_type import VectorBytes

metadata = MetaData()

#: Statuses a memory can have (PROTOCOL.md memory.get).
STATUSES = ("active", "candidate", "superseded", "rejected", "archived", "deleting", "forgotten")
#: Statuses that count as live for duplicate detection.
LIVE_STATUSES = ("active", "candidate")
SCOPES = ("agent", "user", "session", "project", "org")
#: The owner field that keys each scope; org rows are visible to everyone.
SCOPE_KEY = {"agent": "agent_id", "user": "user_id", "session": "session_id", "project": "project"}
OWNER_FIELDS = ("agent_id", "user_id", "project", "session_id")

memories = Table(
    "memories",
    metadata,
    # Integer key for FTS5's external-content rowid; `id` is the public capability.
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(32), nullable=False, unique=True),
    Column("content", Text, nullable=True),  # NULL once forgotten
    Column("content_hash", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("scope", String(16), nullable=False),
    # The value of the scope's key field ('' for org): the unit of ownership for
    # duplicates, tombstones and idempotency keys.
    Column("owner", String(256), nullable=False),
    Column("agent_id", String(256)),
    Column("user_id", String(256)),
    Column("project", String(256)),
    Column("session_id", String(256)),
    Column("status", String(16), nullable=False),
    Column("importance", Float, nullable=False),
    Column("importance_raw", Float, nullable=False),
    Column("access_count", Integer, nullable=False, server_default=text("0")),
    Column("last_accessed_at", String(32)),
    Column("valid_from", String(32), nullable=False),
    Column("valid_to", String(32)),
    Column("recorded_at", String(32), nullable=False),
    Column("retired_at", String(32)),
    Column("expires_at", String(32)),
    Column("derived", Boolean, nullable=False, server_default=false()),
    Column("metadata", JSON, nullable=False),
    # Independent writes of the same content in the same scope (duplicates collapse into it).
    Column("corroboration", Integer, nullable=False, server_default=text("1")),
    # How kind 'auto' was resolved (embedding | llm) and with what confidence.
    Column("kind_method", String(16)),
    Column("kind_confidence", Float),
    # When the remembered thing happened or was said (protocol 1.1); NULL when unknown.
    Column("occurred_at", String(32)),
    # sha256 of the loosely normalised content (store/memories.py loose_hash): forget finds a
    # row's copies by it, whatever their length (migration 0009). NULL once forgotten. Not
    # indexed: forget reads it over the owner's rows (ix_memories_identity's scope, owner
    # prefix, as the length window before it did), and every write would pay for an index.
    Column("loose_hash", String(64)),
    Index("ix_memories_identity", "scope", "owner", "content_hash"),
    Index("ix_memories_status", "status"),
    Index("ix_memories_recorded_at", "recorded_at"),
    Index("ix_memories_occurred_at", "occurred_at"),
)

memory_vectors = Table(
    "memory_vectors",
    metadata,
    Column("memory_seq", Integer, ForeignKey("memories.seq", ondelete="CASCADE"), primary_key=True),
    Column("model", String(128), nullable=False),
    Column("dim", Integer, nullable=False),
    # float32 little-endian, L2-normalised; a pgvector column on PostgreSQL (migration 0008)
    Column("vector", VectorBytes, nullable=False),
    # The hash of the content the vector describes: a vector never outlives it.
    Column("content_hash", String(64), nullable=False),
    Column("embedded_at", String(32), nullable=False),
)

audit_events = Table(
    "audit_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", String(32), nullable=False),
    Column("actor", String(256), nullable=False),
    Column("action", String(64), nullable=False),
    Column("memory_id", String(32)),
    Column("detail", JSON, nullable=False),  # ids, hashes and changed fields; never content
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    # The chain ("lane") the event is linked into (store/audit.py; migration 0010).
    Column("lane", Integer, nullable=False, server_default=text("0")),
    Index("ix_audit_memory", "memory_id"),
)

#: One row per audit lane: its event count and newest hash (a truncated lane no longer
#: matches it), held FOR UPDATE by the transaction appending to the lane.
audit_lanes = Table(
    "audit_lanes",
    metadata,
    Column("lane", Integer, primary_key=True, autoincrement=False),
    Column("n", Integer, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("opened_at", String(32), nullable=False),
    Column("opened_by", String(128), nullable=False),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(16), primary_key=True),
    Column("owner", String(256), primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("result", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_idempotency_expires", "expires_at"),
)

tombstones = Table(
    "tombstones",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(16), nullable=False),
    # The owner's keyed hash (store/keyed.py), never the owner itself (migration 0009).
    Column("owner", String(256), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("created_at", String(32), nullable=False),
    Column("reason", Text),
    UniqueConstraint("scope", "owner", "content_hash", name="uq_tombstone_identity"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pass", String(32), nullable=False),
    Column("target", String(64), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("state", String(8), nullable=False),  # ready | leased | done | dead
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("run_after", Float, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_until", Float),
    Column("lease_token", String(32)),
    Column("last_error", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    # At most one live job per (pass, target): enqueue is idempotent.
    Index(
        "uq_jobs_live",
        "pass",
        "target",
        unique=True,
        sqlite_where=text("state IN ('ready', 'leased')"),
        postgresql_where=text("state IN ('ready', 'leased')"),
    ),
    Index("ix_jobs_claim", "pass", "state", "run_after"),
    Index("ix_jobs_target", "target"),
)

meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

#: Directed links between memories: supersedes (new -> old), merged_into
#: (old -> merged), cites (derived -> source).
memory_links = Table(
    "memory_links",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("src_id", String(32), nullable=False),
    Column("dst_id", String(32), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("created_at", String(32), nullable=False),
    UniqueConstraint("src_id", "dst_id", "kind", name="uq_link"),
    Index("ix_links_src", "src_id", "kind"),
    Index("ix_links_dst", "dst_id", "kind"),
)

#: Changes a pass proposes and an operator decides (review.list / review.decide).
proposals = Table(
    "proposals",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(16), nullable=False),  # supersede | merge | promote
    Column("memory_ids", JSON, nullable=False),
    # Identity of the proposal (kind + the rows involved): a decided pair is never raised again.
    Column("pair_key", String(64), nullable=False, unique=True),
    Column("reason", Text, nullable=False),
    Column("payload", JSON, nullable=False),
    Column("status", String(16), nullable=False),  # open | approved | rejected | stale | withdrawn
    Column("created_at", String(32), nullable=False),
    Column("created_by", String(64), nullable=False),
    Column("decided_at", String(32)),
    Column("decided_by", String(256)),
    Column("note", Text),
    Index("ix_proposals_status", "status"),
)

#: memory.forget requests: durably queued before the reply, erased by the retention pass.
forget_requests = Table(
    "forget_requests",
    metadata,
    Column("id", String(32), primary_key=True),
    # {"id": memory id}, or {field: null} for a forget by subject: the owner value is not kept.
    Column("subject", JSON, nullable=False),
    Column("memory_ids", JSON, nullable=False),
    Column("reason", Text),
    Column("tombstone", Boolean, nullable=False),
    Column("matched", Integer, nullable=False),
    Column("status", String(16), nullable=False),  # pending | done
    Column("created_at", String(32), nullable=False),
    Column("finished_at", String(32)),
)

entities = Table(
    "entities",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(16), nullable=False),
    Column("owner", String(256), nullable=False),
    Column("name", String(256), nullable=False),  # canonical display name (first seen)
    Column("norm", String(256), nullable=False),  # normalised key
    Column("type", String(32), nullable=False),
    Column("vector", LargeBinary),  # embedding of the name, for fuzzy canonicalisation
    Column("created_at", String(32), nullable=False),
    UniqueConstraint("scope", "owner", "norm", "type", name="uq_entity"),
)

entity_aliases = Table(
    "entity_aliases",
    metadata,
    Column("entity_id", Integer, ForeignKey("entities.id", ondelete="CASCADE"), primary_key=True),
    Column("alias", String(256), primary_key=True),  # normalised surface form
    Index("ix_alias", "alias"),
)

entity_mentions = Table(
    "entity_mentions",
    metadata,
    Column("entity_id", Integer, ForeignKey("entities.id", ondelete="CASCADE"), primary_key=True),
    Column("memory_id", String(32), primary_key=True),
    Column("surface", String(256), primary_key=True),
    Index("ix_mentions_memory", "memory_id"),
)

#: One row per extracted source: re-running extract on the same content is a no-op.
extractions = Table(
    "extractions",
    metadata,
    Column("memory_id", String(32), primary_key=True),
    Column("content_hash", String(64), nullable=False),
    Column("extracted_at", String(32), nullable=False),
    Column("method", String(32), nullable=False),
    Column("entities_kept", Integer, nullable=False),
    Column("facts_kept", Integer, nullable=False),
    Column("dropped_ungrounded", Integer, nullable=False),
    Column("dropped_vocabulary", Integer, nullable=False),
)
