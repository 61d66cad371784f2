"""store/restore.py writes an import's batch with the outcomes the per-write path gives each item.

The reference is store/memories.py write_memory, run item after item on a second store built
the same way: every result (new row or duplicate, queued passes, vector kept), every count
(rows, corroboration, jobs by pass, audit events by action, keys, links, vectors) and every
refusal (a key reused with other params, a tombstone, a link to a missing row) must agree.
tests/integration/test_export_import.py and test_import_vectors.py run the same path through
real daemons on both backends.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine

from memoryd.config import Config
from memoryd.errors import Conflict, MemorydError, NotFound, Tombstoned
from memoryd.exchange.importer import idempotency_key
from memoryd.service.validation import parse_write_many
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import NewMemory, WriteContext, add_tombstone, content_hash, write_memory
from memoryd.store.migrate import upgrade
from memoryd.store.restore import is_restore_unit, write_restored
from memoryd.store.vectors import check_dimension

NOW = datetime(2026, 3, 1, tzinfo=UTC)
CTX = WriteContext(actor="operator", passes=["embed", "classify", "consolidate", "reflect", "extract"],
                   max_attempts=5, idempotency_ttl_s=86400.0)
Writer = Callable[[Connection, list[NewMemory]], list[dict[str, Any]]]


def _sequential(conn: Connection, items: list[NewMemory]) -> list[dict[str, Any]]:
    return [write_memory(conn, item, NOW, CTX) for item in items]


def _batched(conn: Connection, items: list[NewMemory]) -> list[dict[str, Any]]:
    assert is_restore_unit(items)
    return write_restored(conn, items, NOW, CTX)


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    model = tmp_path / "probe-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 4}))
    return Config(embedder=str(model))


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[[str], Engine]]:
    opened: list[Engine] = []

    def make(name: str) -> Engine:
        engine = create_store_engine(f"sqlite:///{tmp_path / name}.db", busy_timeout_ms=5000)
        upgrade(engine)
        # As the daemon does at start for its embedder (a new store's index takes its dimension).
        check_dimension(engine, 4, "probe-model", "probe-model")
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.dispose()


def _vector(text: str, model: str = "probe-model") -> dict[str, Any]:
    return {"model": model, "dim": 4, "encoding": "f32le-base64", "content_hash": content_hash(text),
            "data": base64.b64encode(struct.pack("<4f", 1.0, 0.5, -0.25, float(len(text)))).decode()}


def _item(source_id: str, text: str, *, status: str = "active", links: list[dict[str, Any]] | None = None,
          vector: dict[str, Any] | None = None, scope_owner: str = "a1") -> dict[str, Any]:
    restore: dict[str, Any] = {"recorded_at": "2025-05-01T00:00:00Z", "source_id": source_id,
                               "status": status}
    if links:
        restore["links"] = links
    if vector:
        restore["vector"] = vector
    return {"content": text, "kind": "fact", "agent_id": scope_owner,
            "idempotency_key": idempotency_key(source_id, text), "restore": restore}


def _counts(engine: Engine) -> dict[str, Any]:
    queries = {
        "rows": "SELECT count(*) FROM memories",
        "by_status": "SELECT status, count(*) FROM memories GROUP BY status ORDER BY status",
        "corroboration": "SELECT content, corroboration FROM memories ORDER BY content, status",
        "jobs": "SELECT pass, count(*) FROM jobs GROUP BY pass ORDER BY pass",
        "audit": "SELECT action, count(*) FROM audit_events GROUP BY action ORDER BY action",
        "keys": "SELECT count(*) FROM idempotency_keys",
        "links": "SELECT count(*) FROM memory_links",
        "vectors": "SELECT m.content, v.model, v.dim, hex(v.vector), v.content_hash = m.content_hash "
                   "FROM memory_vectors v JOIN memories m ON m.seq = v.memory_seq ORDER BY m.content",
    }
    with engine.connect() as conn:
        return {name: [tuple(r) for r in conn.exec_driver_sql(sql).all()] for name, sql in queries.items()}


def _shape(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [("duplicate" if r.get("duplicate_of") else "new", tuple(r["queued"]), r.get("vector_kept"))
            for r in results]


def _run(engine: Engine, writer: Writer, batches: list[list[NewMemory]]) -> list[Any]:
    """Each batch in its own transaction; a refused batch's error instead of its results."""
    outcomes: list[Any] = []
    for items in batches:
        try:
            with engine.begin() as conn:
                outcomes.append(_shape(writer(conn, items)))
        except MemorydError as exc:
            outcomes.append((type(exc).__name__, exc.data.get("field")))
    return outcomes


def _ids_by_content(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {c: i for c, i in conn.exec_driver_sql("SELECT content, id FROM memories").all()}


def test_an_import_batch_matches_the_per_write_path_item_for_item(
        cfg: Config, stores: Callable[[str], Engine]) -> None:
    first = [
        _item("s1", "Staging runs Postgres 15", vector=_vector("Staging runs Postgres 15")),
        _item("s2", "Service A listens on 8080", status="superseded"),
        _item("s3", "Deploys happen on Tuesdays", vector=_vector("Deploys happen on Tuesdays", "other")),
        _item("s4", "Staging runs Postgres 15"),  # a duplicate of s1 in the same batch: corroborates it
        _item("s5", "Service A listens on 8080", status="superseded"),  # history: kept beside s2
        _item("s1", "Staging runs Postgres 15", vector=_vector("Staging runs Postgres 15")),  # s1 again
        _item("s6", "Alice prefers tabs", scope_owner="a2"),
    ]
    results = {}
    for name, writer in (("sequential", _sequential), ("batched", _batched)):
        engine = stores(name)
        outcomes = _run(engine, writer, [parse_write_many({"items": first}, cfg, admin=True)])
        ids = _ids_by_content(engine)
        # Links to rows of the first batch, a second batch with a replay and a new row linked to it.
        second = [
            _item("s1", "Staging runs Postgres 15", vector=_vector("Staging runs Postgres 15")),  # replay
            _item("s7", "Service A listens on 9090",
                  links=[{"kind": "supersedes", "to": ids["Service A listens on 8080"]}]),
            _item("s8", "Staging runs Postgres 15 on db1",
                  links=[{"kind": "cites", "to": ids["Staging runs Postgres 15"]}],
                  vector=_vector("Staging runs Postgres 15 on db1")),
        ]
        outcomes += _run(engine, writer, [parse_write_many({"items": second}, cfg, admin=True)])
        # Refusals: a key reused with other params; a tombstoned text; a link to a missing row.
        with engine.begin() as conn:
            add_tombstone(conn, "agent", "a1", content_hash("The VPN password is hunter2"), NOW)
        refused = [
            [_item("n1", "a fresh row"),
             {**_item("s6", "Alice prefers tabs", scope_owner="a2"), "importance": 0.9}],
            [_item("n2", "another fresh row"), _item("n3", "The VPN password is hunter2")],
            [_item("n4", "a third fresh row"),
             _item("n5", "a linked row", links=[{"kind": "cites", "from": "mem_01J0000000000000000000000"}])],
        ]
        outcomes += _run(engine, writer, [parse_write_many({"items": b}, cfg, admin=True) for b in refused])
        results[name] = (outcomes, _counts(engine))

    assert results["batched"] == results["sequential"]
    outcomes, counts = results["batched"]
    # What the reference path does, spelled out for the cases this test is about.
    assert outcomes[0] == [("new", ("consolidate", "reflect"), True), ("new", ("embed",), None),
                           ("new", ("embed",), None), ("duplicate", (), None), ("new", ("embed",), None),
                           ("new", ("consolidate", "reflect"), True), ("new", ("embed",), None)]
    assert outcomes[2:] == [("Conflict", "idempotency_key"), ("Tombstoned", "content"),
                            ("NotFound", "restore.links[0].from")]
    assert counts["rows"] == [(7,)] and counts["links"] == [(2,)]
    assert [v[0] for v in counts["vectors"]] == ["Staging runs Postgres 15",
                                                 "Staging runs Postgres 15 on db1"]
    assert all(v[1:3] == ("probe-model", 4) and v[4] == 1 for v in counts["vectors"])


def test_the_refusals_are_the_per_write_paths_errors(cfg: Config, stores: Callable[[str], Engine]) -> None:
    engine = stores("refusals")
    items = parse_write_many({"items": [_item("x1", "one"), _item("x2", "two", links=[
        {"kind": "cites", "to": "mem_01J0000000000000000000000"}])]}, cfg, admin=True)
    with pytest.raises(NotFound), engine.begin() as conn:
        write_restored(conn, items, NOW, CTX)
    with engine.begin() as conn:
        add_tombstone(conn, "agent", "a1", content_hash("two"), NOW)
    items = parse_write_many({"items": [_item("x1", "one"), _item("x2", "two")]}, cfg, admin=True)
    with pytest.raises(Tombstoned), engine.begin() as conn:
        write_restored(conn, items, NOW, CTX)
    with engine.begin() as conn:
        write_restored(conn, parse_write_many({"items": [_item("y1", "y"), _item("y2", "z")]}, cfg,
                                              admin=True), NOW, CTX)
    changed = {**_item("y1", "y"), "importance": 0.1}
    with pytest.raises(Conflict), engine.begin() as conn:
        write_restored(conn, parse_write_many({"items": [_item("y3", "w"), changed]}, cfg, admin=True),
                       NOW, CTX)
    assert _counts(engine)["rows"] == [(2,)]  # nothing of a refused batch was written


def test_a_replay_after_its_keys_expired_matches_the_per_write_path(
        cfg: Config, stores: Callable[[str], Engine]) -> None:
    later = NOW + timedelta(seconds=CTX.idempotency_ttl_s + 60)
    batch = [_item("e1", "Staging runs Postgres 15", vector=_vector("Staging runs Postgres 15")),
             _item("e2", "Service A listens on 8080", status="superseded"),
             _item("e3", "Deploys on Tuesdays")]
    results = {}
    for name, write in (("sequential", write_memory), ("batched", None)):
        engine = stores(f"expired-{name}")
        outcomes = []
        for when in (NOW, NOW, later):
            items = parse_write_many({"items": batch}, cfg, admin=True)
            with engine.begin() as conn:
                got = (write_restored(conn, items, when, CTX) if write is None
                       else [write(conn, item, when, CTX) for item in items])
            outcomes.append(_shape(got))
        with engine.connect() as conn:
            expiries = sorted(r[0] for r in conn.exec_driver_sql("SELECT expires_at FROM idempotency_keys"))
        results[name] = (outcomes, _counts(engine), expiries)
    assert results["batched"] == results["sequential"]
    outcomes, counts, expiries = results["batched"]
    # Within the window a replay answers the stored results; past it, each key is written anew
    # (one row per key), a live row's replay is a duplicate, and history is kept as it came.
    assert outcomes[1] == outcomes[0]
    assert [o[0] for o in outcomes[2]] == ["duplicate", "new", "duplicate"]
    assert counts["keys"] == [(3,)] and expiries == [later.timestamp() + CTX.idempotency_ttl_s] * 3


def test_a_replayed_item_says_so_and_a_new_one_does_not(cfg: Config, stores: Callable[[str], Engine]) -> None:
    engine = stores("replayed")
    batch = [_item("r1", "first text"), _item("r2", "second text")]
    with engine.begin() as conn:
        first = write_restored(conn, parse_write_many({"items": batch}, cfg, admin=True), NOW, CTX)
    with engine.begin() as conn:
        again = write_restored(conn, parse_write_many({"items": [*batch, _item("r3", "third text")]}, cfg,
                                                      admin=True), NOW, CTX)
    assert [r.get("replayed") for r in first] == [None, None]
    assert [r.get("replayed") for r in again] == [True, True, None]
    assert [r["id"] for r in again[:2]] == [r["id"] for r in first]  # the stored answers
    assert _counts(engine)["rows"] == [(3,)]
