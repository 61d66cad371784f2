"""The daemon's tantivy shards over its socket, on each backend: kill -9 while building and while
updating, then restart (nothing lost, nothing doubled, searches scoped), and a forget that leaves
no trace of the text in any lexical index file."""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tantivy
from sqlalchemy import insert, text

from memoryd.clock import to_rfc3339, utcnow
from memoryd.privatefs import make_dirs
from memoryd.store import migrate
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.ids import new_memory_id
from memoryd.store.lexindex.changelog import Position
from memoryd.store.lexindex.logs import log_for
from memoryd.store.lexindex.shard import Shard, analyzer
from memoryd.store.schema import memories
from tests.search._daemon import DaemonFolder, SearchDaemon, stop_cleanly

pytestmark = pytest.mark.slow

OWNERS = {"agent:a1": 1500, "agent:a2": 1000, "user:u1": 500}
READERS: dict[str, dict[str, str]] = {"agent:a1": {"agent_id": "a1"}, "agent:a2": {"agent_id": "a2"},
                                      "user:u1": {"user_id": "u1"}}
SHARD_ROWS = 500
CONFIG: dict[str, Any] = {"lexical_index_min_rows": 1000, "lexical_index_shard_rows": SHARD_ROWS,
                          "vector_index": False, "tick_interval_s": 1.0}
COMMON = ("deploy", "staging", "database", "review", "cache", "queue", "billing", "invoice", "running")
MARKER = "zqxjmarkerword"
WORD = re.compile(r"tok\d{5}x")


@pytest.fixture
def root() -> Iterator[DaemonFolder]:
    folder = DaemonFolder("lex-")
    yield folder
    folder.close()


def new_daemon(root: DaemonFolder, label: str, config: dict[str, Any], db_url: str | None) -> SearchDaemon:
    return root.daemon(label, "none", config, db_url=db_url)  # lexical searches need no embedder


def word(i: int) -> str:
    return f"tok{i:05d}x"


def content(i: int, extra: str = "") -> str:
    return f"{COMMON[i % 9]} {COMMON[(i * 7) % 9]} the {word(i)} note {extra}".strip()


def make_store(daemon: SearchDaemon, marker_at: int | None = None) -> None:
    """Rows of distinct words (``word(i)``) and shared ones over three owners, before any start."""
    make_dirs(daemon.data_dir)
    engine = create_store_engine(daemon.db_url)
    migrate.upgrade(engine)
    stamp, i = to_rfc3339(utcnow()), 0
    rows: list[dict[str, Any]] = []
    for key, n in OWNERS.items():
        scope, owner = key.split(":", 1)
        for _ in range(n):
            body = content(i, MARKER if i == marker_at else "")
            rows.append({"id": new_memory_id(), "content": body,
                         "content_hash": hashlib.sha256(body.encode()).hexdigest(), "kind": "fact",
                         "scope": scope, "owner": owner, "status": "active", "importance": 0.5,
                         "importance_raw": 0.5, "valid_from": stamp, "recorded_at": stamp, "metadata": {},
                         "derived": False, "agent_id": owner if scope == "agent" else None,
                         "user_id": owner if scope == "user" else None})
            i += 1
    with engine.begin() as conn:
        conn.execute(insert(memories), rows)
    engine.dispose()


def kill9(daemon: SearchDaemon) -> None:
    assert daemon.proc is not None
    daemon._drop_client()
    daemon.proc.kill()
    daemon.proc.wait()


def wait_lex(daemon: SearchDaemon, timeout_s: float = 120.0) -> dict[str, Any]:
    """The lexical index's status once it is ready, caught up and rebuilt."""
    deadline = time.monotonic() + timeout_s
    while True:
        lx = daemon.status().get("lexical_index", {})
        if lx.get("ready") and lx.get("behind") == 0 and lx.get("rebuilding") == 0:
            return lx
        assert time.monotonic() < deadline, (lx, daemon.log_tail())
        time.sleep(0.2)


def rows_by_status(daemon: SearchDaemon) -> dict[int, tuple[str, str, str, str]]:
    """Every row still holding its distinct word: seq -> (id, scope key, word, status)."""
    with daemon.engine().connect() as conn:
        found = conn.execute(text("SELECT seq, id, scope || ':' || owner, content, status FROM memories "
                                  "WHERE content IS NOT NULL")).all()
    out: dict[int, tuple[str, str, str, str]] = {}
    for seq, mid, key, body, status in found:
        if m := WORD.search(body):
            out[int(seq)] = (str(mid), str(key), m.group(0), str(status))
    return out


def lex_dir(daemon: SearchDaemon) -> Path:
    return daemon.data_dir / "index" / "lexical"


def manifest_shards(daemon: SearchDaemon) -> dict[int, Shard]:
    manifest = json.loads((lex_dir(daemon) / "manifest.json").read_text())
    return {int(n): Shard(int(n), lex_dir(daemon) / name) for n, name in manifest["shards"].items()}


def shard_seqs(shard: Shard) -> list[int]:
    """Every live document's seq (duplicates kept)."""
    searcher = shard.index.searcher()
    hits = searcher.search(tantivy.Query.all_query(), limit=max(1, searcher.num_docs) + 10).hits
    values: list[Any] = searcher.fast_field_values("seq", [a for _, a in hits]) if hits else []
    return [int(s) for s in values]


def all_index_bytes(daemon: SearchDaemon) -> bytes:
    return b"".join(p.read_bytes() for p in lex_dir(daemon).rglob("*") if p.is_file())


def lex_ids(daemon: SearchDaemon, query: str, reader: dict[str, str]) -> list[str]:
    return daemon.search_ids(query, mode="lexical", k=100, **reader)


def test_kill_9_while_building_and_while_updating_then_restart(root: DaemonFolder, new_db_url: Any) -> None:
    daemon = new_daemon(root, "lex", CONFIG, new_db_url())
    make_store(daemon)
    daemon.start()
    kill9(daemon)  # at once: the shards are being built (or not even started)
    daemon.start()
    wait_lex(daemon)
    initial = rows_by_status(daemon)
    for seq in random.Random(5).sample(sorted(initial), 50):
        mid, key, w, _ = initial[seq]
        assert lex_ids(daemon, w, READERS[key]) == [mid], (seq, key)
        other = next(k for k in READERS if k != key)
        assert lex_ids(daemon, w, READERS[other]) == [], (seq, other)

    # Erasures: rows deleted behind the daemon's back, their shards rebuilt (and the manifest saved).
    deleted = sorted(initial)[7::97]
    with daemon.engine().begin() as conn:
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({','.join(map(str, deleted))})"))
    wait_lex(daemon)
    # Updating within SAVE_EVERY_S of that save: new rows over the socket, rows superseded behind
    # its back, applied and committed by the shards but not in the manifest; then kill -9.
    daemon.write_many([{"content": content(3000 + j), "agent_id": "a1"} for j in range(100)])
    daemon.write_many([{"content": content(3100 + j), "scope": "user", "user_id": "u1"} for j in range(50)])
    superseded = sorted(initial)[11::151]
    with daemon.engine().begin() as conn:
        conn.execute(text(f"UPDATE memories SET status = 'superseded' "
                          f"WHERE seq IN ({','.join(map(str, superseded))})"))
    lex_ids(daemon, word(3000), READERS["agent:a1"])  # applies the log inline or wakes the thread
    wait_lex(daemon)
    kill9(daemon)
    manifest = json.loads((lex_dir(daemon) / "manifest.json").read_text())
    new = {s for s, r in rows_by_status(daemon).items() if int(r[2][3:8]) >= 3000}
    on_disk = set().union(*(shard_seqs(s) for s in manifest_shards(daemon).values()))
    engine = daemon.engine()
    with read_only(engine) as conn:
        logged = log_for(engine).behind(conn, Position.from_json(manifest["position"]), 10**6)
    assert logged > 0 and new & on_disk, "the kill did not land between a shard commit and a save"

    daemon.start()
    status = wait_lex(daemon)
    rows = rows_by_status(daemon)
    active = {s: r for s, r in rows.items() if r[3] == "active"}
    dead = set(deleted) | set(superseded)
    assert not dead & set(active) and len(new) == 150
    assert status["docs"] == len(active), (status, len(active))
    for key, reader in READERS.items():
        mine = sorted((s, r) for s, r in active.items() if r[1] == key)
        for start in range(0, len(mine), 50):
            chunk = mine[start:start + 50]
            ids = lex_ids(daemon, " ".join(r[2] for _, r in chunk), reader)
            assert len(ids) == len(set(ids)) and set(ids) == {r[0] for _, r in chunk}, (key, start)
    gone = " ".join(initial[s][2] for s in dead)
    for reader in READERS.values():
        assert lex_ids(daemon, gone, reader) == [], reader
    stop_cleanly(daemon)

    seqs = {n: shard_seqs(s) for n, s in manifest_shards(daemon).items()}
    every = [s for found in seqs.values() for s in found]
    assert len(every) == len(set(every)), "a document is in the shards twice"
    assert set(every) == set(active)
    assert all(s // SHARD_ROWS == n for n, found in seqs.items() for s in found)


def test_forget_leaves_no_text_in_any_lexical_index_file(root: DaemonFolder, new_db_url: Any) -> None:
    daemon = new_daemon(root, "lexf", {**CONFIG, "retention_interval_s": 1.0}, new_db_url())
    make_store(daemon, marker_at=1734)  # an a2 row
    daemon.start()
    wait_lex(daemon)
    stop_cleanly(daemon)
    (token,) = analyzer().analyze(MARKER)
    holders = [s for s in manifest_shards(daemon).values()
               if s.index.searcher().doc_freq("content", token) > 0]
    assert len(holders) == 1  # positive control: the term is in the term dictionary
    held = holders[0].path
    # tantivy's term dictionary is an FST: a word need not be there as contiguous bytes.
    raw_control = token.encode() in all_index_bytes(daemon)
    with daemon.engine().connect() as conn:
        victim_id, victim_seq = conn.execute(text("SELECT id, seq FROM memories WHERE content LIKE :m"),
                                             {"m": f"%{MARKER}%"}).one()
    assert lex_ids(daemon.start(), MARKER, READERS["agent:a2"]) == [victim_id]

    daemon.call("memory.forget", {"id": victim_id, "reason": "test"})
    deadline = time.monotonic() + 60
    while True:
        with daemon.engine().connect() as conn:
            left = conn.execute(text("SELECT content FROM memories WHERE seq = :s"),
                                {"s": victim_seq}).first()
        if left is None or left[0] is None:
            break
        assert time.monotonic() < deadline, daemon.log_tail()
        time.sleep(0.3)
    wait_lex(daemon)
    deadline = time.monotonic() + 20  # the old directory is wiped just after the swap
    while held.exists():
        assert time.monotonic() < deadline, (held, daemon.log_tail())
        time.sleep(0.1)

    def no_trace() -> None:
        shards = manifest_shards(daemon)
        assert held.name not in {s.path.name for s in shards.values()}
        for shard in shards.values():
            assert shard.index.searcher().doc_freq("content", token) == 0, shard.path
        if raw_control:
            assert token.encode() not in all_index_bytes(daemon)
        assert not held.exists()

    no_trace()
    for reader in READERS.values():
        assert lex_ids(daemon, MARKER, reader) == []
    stop_cleanly(daemon)
    no_trace()
