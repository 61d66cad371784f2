"""The embedder's dimension with real models: files against loaded models, and ``memoryd reembed``.

The second model is real and cheap: the bundled all-MiniLM-L6-v2 directory
with its pooling set to mean and max tokens (files linked, one config
rewritten), so sentence-transformers builds a 768-dimensional embedder from
the same weights. Slow: each test loads a model (and the reembed test runs
two daemons and the CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from memoryd.config import Config
from memoryd.models.embedder import LocalEmbedder, bundled_model_path, model_dimension
from memoryd.passes.base import PassContext
from memoryd.passes.embed import EmbedPass
from memoryd.queue import jobs as jobq
from memoryd.store import failures, vectors
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.memories import WriteContext
from memoryd.store.migrate import upgrade
from memoryd.store.writes import WriteUnit, commit_units
from tests.integration.harness import DaemonHandle, vector_bytes_sql, wait_until

from .helpers import NOW, build_memory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The bundled model's files, linked, with mean + max pooling: 2 x 384 = 768 dimensions."""
    src = Path(bundled_model_path())
    dst = tmp_path_factory.mktemp("models") / "minilm-meanmax-768"
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        if path.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
        elif rel != Path("1_Pooling/config.json"):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, dst / rel)
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text())
    pooling["pooling_mode_max_tokens"] = True
    (dst / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return str(dst)


def test_the_dimension_read_from_files_is_the_loaded_models(wide_model: str) -> None:
    from sentence_transformers import SentenceTransformer

    for spec, expected in (("bundled", 384), (wide_model, 768)):
        path = bundled_model_path() if spec == "bundled" else spec
        model = SentenceTransformer(path, device="cpu")
        said = model.get_embedding_dimension()
        made = model.encode(["which port does staging's Postgres use"], convert_to_numpy=True).shape[1]
        assert model_dimension(spec) == said == made == expected


def test_the_embed_pass_refuses_vectors_of_another_dimension(wide_model: str, tmp_path: Path) -> None:
    # The start check reads the files; this is the pass's own guard for a model whose files
    # do not say: no vector is written and the failure counts as permanent (it ends dead).
    engine = create_store_engine(f"sqlite:///{tmp_path / 'memoryd.db'}")
    upgrade(engine)
    ctx_w = WriteContext(actor="test", passes=["embed"], max_attempts=5, idempotency_ttl_s=86400.0)
    commit_units(engine, [WriteUnit([build_memory("staging's Postgres listens on 5433")], actor="t")],
                 ctx_w, NOW)
    with engine.begin() as conn:
        batch = jobq.claim(conn, "embed", owner="t", now=time.time(), lease_s=60, limit=10)
    assert len(batch) == 1
    embedder = LocalEmbedder(wide_model, batch_size=4)
    ctx = PassContext(engine=engine, config=Config(), embedder=embedder, now=time.time)
    with pytest.raises(vectors.DimensionMismatch) as info:
        EmbedPass().run(batch, ctx)
    assert failures.kind_of(info.value) == "permanent"
    assert "made 768-dimensional vectors" in str(info.value) and "memoryd reembed" in str(info.value)
    with read_only(engine) as conn:
        assert vectors.stored_count(conn) == 0
    embedder.release()
    engine.dispose()


def _reembed(handle: DaemonHandle, embedder: str) -> subprocess.CompletedProcess[str]:
    store = ["--db-url", handle.db_url] if handle.db_url else []
    return subprocess.run(
        [sys.executable, "-m", "memoryd", "reembed", "--embedder", embedder, "--data-dir",
         str(handle.data_dir), *store, "--yes"], env=handle.env, capture_output=True, text=True,
        timeout=900)


NOTES = ["Staging's Postgres listens on 5433", "The CI cache lives in the ci-cache bucket",
         "Deploys freeze on Fridays after 3pm", "The billing API retries webhooks three times",
         "Redis in staging is redis-02.internal"]


def test_reembed_moves_a_store_to_a_768_model_and_the_daemon_drains_it(
        start_daemon: Callable[..., DaemonHandle], wide_model: str) -> None:
    first = start_daemon(name="mini", embedder="bundled")
    for note in NOTES:
        first.write(note, agent_id="a")
    wait_until(lambda: first.scalar("SELECT count(*) FROM memory_vectors") == len(NOTES), timeout_s=600,
               message="the bundled embedder embeds the notes")
    first.stop()

    done = _reembed(first, wide_model)
    assert done.returncode == 0, done.stderr
    assert f"dropped {len(NOTES)} vectors of 384 dimensions; the index now takes 768" in done.stdout
    assert f"{len(NOTES)} memories queued for the embed pass" in done.stdout
    assert first.scalar("SELECT value FROM vector_settings WHERE key = 'dim'") == "768"
    assert first.scalar("SELECT count(*) FROM memory_vectors") == 0
    assert first.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state = 'ready'") == len(NOTES)

    # The old embedder no longer fits the store: refused before it serves.
    old = start_daemon(name="mini-again", embedder="bundled", data_dir=first.data_dir, db_url=first.db_url,
                       start=False)
    assert old.run_to_exit() == 2
    assert "memoryd reembed --embedder bundled" in old.stderr_text()

    wide = start_daemon(name="wide", embedder=wide_model, data_dir=first.data_dir, db_url=first.db_url)
    refused = _reembed(wide, wide_model)  # not while a daemon owns the data directory
    assert refused.returncode == 2 and "Stop the daemon" in refused.stderr
    wide_rows = f"SELECT count(*) FROM memory_vectors WHERE {vector_bytes_sql(wide)} = 3072"
    wait_until(lambda: wide.scalar(wide_rows) == len(NOTES), timeout_s=900,
               message="the 768-d embedder embeds every memory")
    result = wide.call("memory.search", {"query": "which port does the staging database use",
                                         "mode": "vector", "k": 3, "agent_id": "a"})
    assert result["mode_used"] == "vector"
    assert result["results"][0]["content"] == NOTES[0]
    status = wide.call("daemon.status")
    assert status["passes"]["embed"]["errors_total"] == 0
    assert wide.scalar("SELECT count(*) FROM jobs WHERE pass = 'embed' AND state IN "
                       "('ready', 'leased', 'failed', 'dead')") == 0
    # SQLite: the vectors' own rows (memory_vectors is a view over them and the vec0 index);
    # PostgreSQL: memory_vectors is the table.
    rows = "memory_vectors" if wide.db_url else "memory_vectors_meta"
    assert np.isclose(wide.scalar(f"SELECT count(*) FROM {rows} WHERE dim = 768"), len(NOTES))
