"""`memoryd export --with-vectors | memoryd import`: a vector is kept when it is the target
embedder's and was made from the record's content; every other record is embedded again.

The target daemon's embedder is a model directory that states its name and dimension
(``probe-model``, 384, read from its config.json as for any model) and is never loaded: the
kept vectors must be stored at import, with no embed job and no model. A kept vector is
found by the store's own nearest-neighbour search (the vector leg of memory.search); the
slow test beside it runs the bundled model on both daemons and searches in vector mode.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.service.client import ClientError
from memoryd.store import vectors as store_vectors
from memoryd.store.memories import content_hash
from memoryd.store.schema import memories, memory_vectors
from tests.integration.harness import DaemonHandle, run_cli, wait_until
from tests.lifecycle.helpers import engine_on

DIM = 384
MODEL = "probe-model"
QUIET = {"governor_enabled": False}
TEXTS = {
    "kept": "The staging database listens on port 5433",
    "other_model": "Deploys happen on Tuesdays",
    "other_dim": "Alice prefers tabs over spaces",
    "edited": "CI runs on GitHub Actions",
    "no_hash": "Logs are kept for thirty days",
    "malformed": "The cache is flushed at midnight",
}


def _unit(i: int) -> list[float]:
    """A vector that points mostly along axis ``i`` (exact in float32): each row's own direction."""
    values = [((j * 7 + i) % 5 - 2) / 64.0 for j in range(DIM)]
    values[i] = 4.0
    return values


def _fake_model(root: Path) -> str:
    """A model directory memoryd reads a name (its folder) and a dimension from, never loaded here."""
    path = root / MODEL
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"hidden_size": DIM}))
    return str(path)


def _seed_vectors(daemon: DaemonHandle) -> dict[str, tuple[str, bytes]]:
    """Rows with a stored vector each (written through the store's own vector writer)."""
    out: dict[str, tuple[str, bytes]] = {}
    for i, (name, text) in enumerate(TEXTS.items()):
        memory_id = daemon.call("memory.write", {"content": text, "agent_id": "a1"})["id"]
        out[name] = (memory_id, struct.pack(f"<{DIM}f", *_unit(i)))
    with engine_on(daemon) as engine, engine.begin() as conn:
        for memory_id, blob in out.values():
            seq, chash = conn.execute(select(memories.c.seq, memories.c.content_hash)
                                      .where(memories.c.id == memory_id)).one()
            store_vectors.upsert(conn, [{"memory_seq": seq, "model": MODEL, "dim": DIM, "vector": blob,
                                         "content_hash": chash,
                                         "embedded_at": "2025-01-01T00:00:00.000000Z"}])
    return out


def _export(daemon: DaemonHandle, out: Path) -> list[dict[str, Any]]:
    done = run_cli(["export", "--with-vectors", "-o", str(out)],
                   {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)})
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _import(daemon: DaemonHandle, path: Path) -> tuple[int, dict[str, Any]]:
    done = run_cli(["import", "--json", str(path)], {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)})
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def _stored(daemon: DaemonHandle, content: str) -> tuple[str, int, Any]:
    """(id, seq, the row's vector row or None) of the imported row holding ``content``."""
    with engine_on(daemon) as engine, engine.connect() as conn:
        memory_id, seq, chash = conn.execute(select(memories.c.id, memories.c.seq, memories.c.content_hash)
                                             .where(memories.c.content == content)).one()
        vec = conn.execute(select(memory_vectors.c.model, memory_vectors.c.dim, memory_vectors.c.vector,
                                  memory_vectors.c.content_hash)
                           .where(memory_vectors.c.memory_seq == seq)).first()
        assert vec is None or vec.content_hash == chash
    return memory_id, seq, vec


def _embed_jobs(daemon: DaemonHandle, memory_id: str) -> int:
    return int(daemon.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND target = ?", (memory_id,)))


def test_import_keeps_a_matching_vector_byte_for_byte_and_embeds_every_other_record_again(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    source = start_daemon("src", config=QUIET)
    seeded = _seed_vectors(source)
    exported = _export(source, source.home / "with-vectors.jsonl")
    body = {r["content"]: r for r in exported if r["record"] == "memory"}
    kept = body[TEXTS["kept"]]["vector"]
    assert kept["content_hash"] == content_hash(TEXTS["kept"])
    assert base64.b64decode(kept["data"]) == seeded["kept"][1]

    # The file, changed the ways a file from elsewhere can differ from the target.
    body[TEXTS["other_model"]]["vector"]["model"] = "another-model"
    body[TEXTS["other_dim"]]["vector"].update(
        dim=8, data=base64.b64encode(struct.pack("<8f", *range(8))).decode())
    body[TEXTS["edited"]]["content"] = "CI runs on GitLab"  # the vector still describes the old text
    del body[TEXTS["no_hash"]]["vector"]["content_hash"]  # an export made before the hash was written
    body[TEXTS["malformed"]]["vector"]["data"] = body[TEXTS["malformed"]]["vector"]["data"][:-8]
    path = short_tmp / "edited.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in exported))
    malformed_line = 2 + list(body).index(TEXTS["malformed"])

    target = start_daemon("dst", config=QUIET, embedder=_fake_model(short_tmp / "models"))
    code, summary = _import(target, path)
    assert code == 1, summary
    assert (summary["written"], summary["vectors_kept"]) == (5, 1), summary
    assert [(r["line"], r["field"]) for r in summary["refused"]] == [(malformed_line, "vector.data")]
    assert target.count_content(TEXTS["malformed"]) == 0  # refused whole: no row, no vector

    memory_id, seq, vec = _stored(target, TEXTS["kept"])
    assert (vec.model, vec.dim) == (MODEL, DIM)
    assert bytes(store_vectors.to_blob(store_vectors.from_blob(bytes(vec.vector)))) == seeded["kept"][1]
    assert _embed_jobs(target, memory_id) == 0
    assert "embed" not in target.call("memory.get", {"id": memory_id})["pending"]
    # Searchable at once: the store's nearest-neighbour search (memory.search's vector leg) finds it.
    with engine_on(target) as engine, engine.begin() as conn:
        hits = store_vectors.knn(conn, store_vectors.from_blob(seeded["kept"][1]), k=3,
                                 scope_keys=["agent:a1"], statuses=["active"], kind=None)
    assert hits[0][0] == seq and hits[0][1] < 1e-5

    for name in ("other_model", "other_dim", "no_hash"):
        memory_id, _, vec = _stored(target, TEXTS[name])
        assert vec is None, name
        assert _embed_jobs(target, memory_id) == 1, name
    memory_id, _, vec = _stored(target, "CI runs on GitLab")
    assert vec is None and _embed_jobs(target, memory_id) == 1


def test_a_malformed_restore_vector_is_refused_naming_its_field_and_writes_nothing(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    target = start_daemon("dst", config=QUIET, embedder=_fake_model(short_tmp / "models"))
    text = "The build cache lives on the NFS share"
    good = {"model": MODEL, "dim": DIM, "encoding": "f32le-base64", "content_hash": content_hash(text),
            "data": base64.b64encode(struct.pack(f"<{DIM}f", *_unit(1))).decode()}
    nan = struct.pack(f"<{DIM}f", *_unit(2))[:-4] + struct.pack("<f", float("nan"))
    cases = [
        ({**good, "data": "!" * len(good["data"])}, "data"),
        ({**good, "data": good["data"][:-4]}, "data"),
        ({**good, "data": base64.b64encode(nan).decode()}, "data"),
        ({**good, "dim": 0}, "dim"),
        ({**good, "encoding": "f16"}, "encoding"),
        ({**good, "model": 7}, "model"),
        ({**good, "content_hash": "abc"}, "content_hash"),
        ([1.0, 2.0], None),
    ]
    for vector, field in cases:
        item = {"content": text, "agent_id": "a1", "idempotency_key": "k1",
                "restore": {"recorded_at": "2025-01-01T00:00:00Z", "vector": vector}}
        with pytest.raises(ClientError) as err:
            target.call("memory.write_many", {"items": [{"content": "a row beside it", "agent_id": "a1"},
                                                        item]}, admin=True)
        assert err.value.code == -32602
        want = "items[1].restore.vector" + (f".{field}" if field else "")
        assert err.value.data["field"] == want, (vector, err.value.data)
    assert target.scalar("SELECT count(*) FROM memories") == 0
    # The same write with the well-formed vector is stored with it.
    item = {"content": text, "agent_id": "a1", "idempotency_key": "k1",
            "restore": {"recorded_at": "2025-01-01T00:00:00Z", "vector": good}}
    result = target.call("memory.write_many", {"items": [item]}, admin=True)["results"][0]
    assert result["vector_kept"] is True and "embed" not in result["queued"]
    assert _stored(target, text)[2] is not None


@pytest.mark.slow
def test_a_store_moved_with_its_vectors_between_bundled_daemons_is_searchable_by_vector_at_once(
        start_daemon: Callable[..., DaemonHandle], short_tmp: Path) -> None:
    source = start_daemon("src", embedder="bundled", config=QUIET)
    texts = list(TEXTS.values())
    for text in texts:  # of a kind already decided: no classify pass holds the daemon's stop
        source.call("memory.write", {"content": text, "agent_id": "a1", "kind": "fact"})
    wait_until(lambda: queue_open(source) == 0, timeout_s=300, interval_s=0.25,
               message="the source's embed queue to drain")
    exported = _export(source, short_tmp / "moved.jsonl")
    sent = {r["content"]: base64.b64decode(r["vector"]["data"]) for r in exported if r["record"] == "memory"}
    assert sorted(sent) == sorted(texts)

    target = start_daemon("dst", embedder="bundled", config=QUIET)
    code, summary = _import(target, short_tmp / "moved.jsonl")
    assert code == 0 and summary["vectors_kept"] == len(texts), summary
    # No embed job was ever queued: what the search finds is the file's vectors, byte for byte.
    assert target.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed'") == 0

    def query_embedder_ready() -> bool:  # the query's own embedding needs the model loaded
        return target.call("memory.search", {"query": "warm-up", "mode": "vector",
                                             "agent_id": "a1"})["mode_used"] == "vector"

    wait_until(query_embedder_ready, timeout_s=180, interval_s=0.5, message="the query embedder to load")
    for text in texts:
        _, _, vec = _stored(target, text)
        assert store_vectors.to_blob(store_vectors.from_blob(bytes(vec.vector))) == sent[text]
        answer = target.call("memory.search", {"query": text, "mode": "vector", "k": 2, "agent_id": "a1"})
        assert answer["mode_used"] == "vector", answer
        top = answer["results"]
        assert top[0]["content"] == text and top[0]["score"] > 0.999 > top[1]["score"], (text, top)
    assert target.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed'") == 0


def queue_open(daemon: DaemonHandle) -> int:
    queue = daemon.call("daemon.status")["queues"]["embed"]
    return int(queue["ready"]) + int(queue["leased"])
