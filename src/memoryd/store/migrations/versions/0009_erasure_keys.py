"""Erasure reaches copies of any length, and owner identifiers outlive a forget only as keyed hashes.

* ``memories.loose_hash``: sha256 of the loosely normalised content
  (store/memories.py ``loose_hash``). Forget
  finds a row's copies by it; until now it looked only at rows within 16
  characters of the row's length, so ``text!!!!!!!!!!!!!!!!!!`` or a copy
  with runs of spaces stayed searchable. Filled here for every row that still
  holds its text.
* Owner values become keyed hashes (store/keyed.py: HMAC-SHA256 under a
  per-store secret in ``meta``) where they must outlive a forget: in
  ``tombstones.owner`` (the write path hashes the writer's owner the same
  way, so a tombstone still refuses it) and in the ``owner`` of past
  ``memory.write``/``memory.derive``/``memory.import`` audit events. The
  audit chain is then chained again from the first event that changed
  (audit.py's digest over the stored values): ``audit.verify`` passes on the
  rewritten log. A chain is a check against a partial or accidental change,
  not against a writer of the file, who could always re-chain it, so
  re-chaining once here takes nothing from it.
* ``forget_requests.subject`` of a forget by subject keeps the field, not the
  value (``{"user_id": null}``): nothing matches on it.

The secret is made here only when there is something to hash: a freshly
migrated store stays empty (``memoryd store copy`` refuses a target holding
rows, and carries the source's secret over with its ``meta`` rows).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import sqlalchemy as sa
from alembic import op

from memoryd.store import audit, keyed
from memoryd.store.memories import loose_hash
from memoryd.store.schema import audit_events, forget_requests, memories, meta, tombstones

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

#: Rows read and written per round trip while filling a column.
BATCH = 1000


def upgrade() -> None:
    bind = op.get_bind()
    # Plain ADD COLUMN: a batch rebuild would drop the FTS and vector triggers.
    op.add_column("memories", sa.Column("loose_hash", sa.String(64)))
    _fill_loose_hashes(bind)
    key = _secret(bind)
    if key is not None:
        _key_tombstones(bind, key)
        _key_audit_owners(bind, key)
    _clear_subjects(bind)


def _fill_loose_hashes(bind: sa.Connection) -> None:
    after = 0
    while True:
        rows = bind.execute(sa.select(memories.c.seq, memories.c.content)
                            .where(memories.c.seq > after, memories.c.content.is_not(None))
                            .order_by(memories.c.seq).limit(BATCH)).all()
        if not rows:
            return
        bind.execute(sa.update(memories).where(memories.c.seq == sa.bindparam("s"))
                     .values(loose_hash=sa.bindparam("h")),
                     [{"s": seq, "h": loose_hash(content)} for seq, content in rows])
        after = rows[-1].seq


def _secret(bind: sa.Connection) -> bytes | None:
    """The store's secret, made when a tombstone or an audit event needs one (None otherwise)."""
    found = bind.execute(sa.select(meta.c.value).where(meta.c.key == keyed.SECRET_KEY)).scalar()
    if found is not None:
        return bytes.fromhex(found)
    has_rows = any(bind.execute(sa.select(t.c[col]).limit(1)).first() is not None
                   for t, col in ((tombstones, "id"), (audit_events, "seq")))
    if not has_rows:
        return None
    value = secrets.token_hex(32)
    bind.execute(sa.insert(meta).values(key=keyed.SECRET_KEY, value=value))
    return bytes.fromhex(value)


def _key_tombstones(bind: sa.Connection, key: bytes) -> None:
    rows = bind.execute(sa.select(tombstones.c.id, tombstones.c.owner)).all()
    changed = [{"i": r.id, "o": keyed.keyed_with(key, r.owner)} for r in rows
               if not r.owner.startswith(keyed.PREFIX)]
    if changed:
        bind.execute(sa.update(tombstones).where(tombstones.c.id == sa.bindparam("i"))
                     .values(owner=sa.bindparam("o")), changed)


def _detail(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


def _key_audit_owners(bind: sa.Connection, key: bytes) -> None:
    """Key every event's clear ``owner``, and chain again from the first changed event."""
    prev: str | None = None  # None until the first changed event: the chain before it stands
    after = 0
    while True:
        # Columns named: the table gains columns in later revisions (0010's lane).
        cols = [audit_events.c[name] for name in ("seq", "at", "actor", "action", "memory_id", "detail",
                                                   "prev_hash")]
        rows = bind.execute(sa.select(*cols).where(audit_events.c.seq > after)
                            .order_by(audit_events.c.seq).limit(BATCH)).all()
        if not rows:
            return
        updates = []
        for r in rows:
            detail = _detail(r.detail)
            owner = detail.get("owner")
            changed = isinstance(owner, str) and not owner.startswith(keyed.PREFIX)
            if isinstance(owner, str) and changed:
                detail["owner"] = keyed.keyed_with(key, owner)
            if changed or prev is not None:
                start = r.prev_hash if prev is None else prev
                digest = audit.digest(start, r.at, r.actor, r.action, r.memory_id, detail)
                updates.append({"s": r.seq, "d": detail, "p": start, "h": digest})
                prev = digest
        if updates:
            bind.execute(sa.update(audit_events).where(audit_events.c.seq == sa.bindparam("s"))
                         .values(detail=sa.bindparam("d", type_=sa.JSON), prev_hash=sa.bindparam("p"),
                                 hash=sa.bindparam("h")), updates)
        after = rows[-1].seq


def _clear_subjects(bind: sa.Connection) -> None:
    rows = bind.execute(sa.select(forget_requests.c.id, forget_requests.c.subject)).all()
    changed = []
    for r in rows:
        subject = _detail(r.subject)
        if "id" not in subject and any(v is not None for v in subject.values()):
            changed.append({"i": r.id, "v": dict.fromkeys(subject)})
    if changed:
        bind.execute(sa.update(forget_requests).where(forget_requests.c.id == sa.bindparam("i"))
                     .values(subject=sa.bindparam("v", type_=sa.JSON)), changed)
