"""Migration 0009 on a store written before it, on both backends: copies found by their
loose hash, owners in tombstones and audit events keyed (the chain still verifies), and
forget requests' subjects cleared."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, insert, select, text

from memoryd.errors import Tombstoned
from memoryd.store import audit, lifecycle, migrate
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import write_memory
from memoryd.store.schema import meta
from tests.lifecycle.helpers import STORE_CTX, new_memory

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
STAMP = "2026-05-01T12:00:00.000000Z"
EMAIL = "old.owner@example.org"
TEXT = "the safe combination is 12-34-56"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A store at revision 0008 (before 0009), empty."""
    url = (f"sqlite:///{tmp_path / 'memoryd.db'}" if request.param == "sqlite"
           else request.getfixturevalue("pg_url"))
    engine = create_store_engine(url)
    cfg = migrate._alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0008")
    yield engine
    engine.dispose()


def _seed_0008(engine: Engine) -> tuple[str, str]:
    """Rows as memoryd wrote them before 0009: owners in clear everywhere."""
    ids = ("mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AA", "mem_01JD3Z8W6KQ2V7N4X9R5T1Y0AB")
    with engine.begin() as conn:
        for memory_id, content in zip(ids, (TEXT, TEXT + "!" * 40), strict=True):
            conn.execute(text(
                "INSERT INTO memories (id, content, content_hash, kind, scope, owner, user_id, status, "
                "importance, importance_raw, valid_from, recorded_at, derived, metadata) VALUES "
                "(:id, :c, :h, 'fact', 'user', :o, :o, 'active', 0.5, 0.5, :t, :t, false, '{}')"),
                {"id": memory_id, "c": content, "h": hashlib.sha256(content.strip().encode()).hexdigest(),
                 "o": EMAIL, "t": STAMP})
        events = [("memory.promote", ids[0],
                   {"before": {"status": "candidate"}, "after": {"status": "active"}})]
        events += [("memory.write", memory_id, {"content_hash": "h", "scope": "user", "owner": EMAIL,
                                                "status": "active"}) for memory_id in ids]
        events.append(("memory.forget", ids[1], {"before": {"status": "active"}}))
        prev = audit.GENESIS
        for action, memory_id, detail in events:  # one chain, as memoryd appended before 0010's lanes
            digest = audit.digest(prev, STAMP, "test", action, memory_id, detail)
            conn.execute(text("INSERT INTO audit_events (at, actor, action, memory_id, detail, prev_hash, "
                              "hash) VALUES (:at, 'test', :a, :m, :d, :p, :h)"),
                         {"at": STAMP, "a": action, "m": memory_id, "d": json.dumps(detail), "p": prev,
                          "h": digest})
            prev = digest
        conn.execute(text("INSERT INTO tombstones (scope, owner, content_hash, created_at) "
                          "VALUES ('user', :o, :h, :t)"),
                     {"o": EMAIL, "h": hashlib.sha256(b"an old forgotten text").hexdigest(), "t": STAMP})
        conn.execute(text("INSERT INTO forget_requests (id, subject, memory_ids, tombstone, matched, status, "
                          "created_at) VALUES ('fgt_old', :s, '[]', true, 0, 'done', :t)"),
                     {"s": json.dumps({"user_id": EMAIL}), "t": STAMP})
        first_hash = conn.execute(text("SELECT hash FROM audit_events ORDER BY seq LIMIT 1")).scalar_one()
    return ids[0], first_hash


def test_upgrade_keys_old_owners_fills_loose_hashes_and_the_chain_verifies(old_store: Engine) -> None:
    original, first_hash = _seed_0008(old_store)
    migrate.upgrade(old_store)
    with old_store.connect() as conn:
        tables = {"audit_events": "SELECT CAST(detail AS TEXT) FROM audit_events",
                  "tombstones": "SELECT owner FROM tombstones",
                  "forget_requests": "SELECT CAST(subject AS TEXT) FROM forget_requests"}
        held = {name: [v for (v,) in conn.execute(text(sql)) if EMAIL in str(v)]
                for name, sql in tables.items()}
        checked, broken = audit.verify(conn)
        # The event before the first keyed one keeps its hash: only what changed is chained again.
        head = conn.execute(text("SELECT hash FROM audit_events ORDER BY seq LIMIT 1")).scalar_one()
        subject = conn.execute(text("SELECT subject FROM forget_requests")).scalar_one()
    assert head == first_hash
    assert held == {"audit_events": [], "tombstones": [], "forget_requests": []}
    assert (checked, broken) == (4, None)
    assert (json.loads(subject) if isinstance(subject, str) else subject) == {"user_id": None}
    # The old tombstone still refuses its owner's rewrite, and only its owner's.
    with pytest.raises(Tombstoned), old_store.begin() as conn:
        write_memory(conn, new_memory("an old forgotten text", scope="user", owner=EMAIL), NOW, STORE_CTX)
    with old_store.begin() as conn:
        assert write_memory(conn, new_memory("an old forgotten text", scope="user", owner="x@example.org"),
                            NOW, STORE_CTX)["id"]
    # The copy 40 characters longer is found by the hash 0009 filled in.
    with old_store.begin() as conn:
        out = lifecycle.forget(conn, memory_id=original, subject=None, reason=None, tombstone=True,
                               now=NOW, actor="test", max_attempts=5)
    assert out["matched"] == 2


def test_upgrade_of_an_empty_store_makes_no_secret(old_store: Engine) -> None:
    # A fresh store must stay empty (store copy refuses a target holding rows).
    migrate.upgrade(old_store)
    with old_store.connect() as conn:
        assert conn.execute(select(meta.c.key)).all() == []
    with old_store.begin() as conn:  # the first write makes it
        conn.execute(insert(meta).values(key="probe", value="x"))
        write_memory(conn, new_memory("a first memory"), NOW, STORE_CTX)
        assert conn.execute(select(meta.c.key).order_by(meta.c.key)).scalars().all() == ["owner_key", "probe"]
