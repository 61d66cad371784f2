"""The HNSW index on PostgreSQL: built with the daemon's parameters, migrated to them, and built
again by `memoryd store reindex` while the store stays usable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import Engine, text

from memoryd.store import vectors
from memoryd.store.engine import create_store_engine, read_only
from memoryd.store.migrate import _alembic_config, upgrade
from tests.postgres_store.test_pg_search_legs import _embed, _unit, _write

pytestmark = pytest.mark.postgres

INDEX = "ix_memory_vectors_hnsw"


def index_state(engine: Engine) -> tuple[list[str] | None, int]:
    """The index's reloptions and its relfilenode (a rebuild gives it a new file)."""
    with engine.connect() as conn:
        row = conn.execute(text("SELECT reloptions, relfilenode FROM pg_class WHERE relname = :n"),
                           {"n": INDEX}).one()
    return row[0], int(row[1])


def test_a_new_store_builds_its_hnsw_index_with_ef_construction_200(pg_engine: Engine) -> None:
    options, _ = index_state(pg_engine)
    assert options is not None and sorted(options) == ["ef_construction=200", "m=16"]


def test_the_migration_sets_the_build_parameter_and_rebuilds_a_small_index(pg_url: str) -> None:
    engine = create_store_engine(pg_url)
    try:
        cfg = _alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0010_audit_lanes")
        before, node_before = index_state(engine)
        assert before is None  # pgvector's defaults (m 16, ef_construction 64)
        _embed(engine, {mid: _unit(i) for i, mid in enumerate(_write(engine, ["a", "b", "c"], "me"))})
        upgrade(engine)
        after, node_after = index_state(engine)
        assert after is not None and sorted(after) == ["ef_construction=200", "m=16"]
        assert node_after != node_before  # built again, with it
    finally:
        engine.dispose()


def test_store_reindex_rebuilds_the_index_and_searches_still_answer(pg_engine: Engine, pg_url: str,
                                                                      tmp_path: Path) -> None:
    ids = _write(pg_engine, [f"note {i}" for i in range(300)], owner="me")
    vecs = {mid: _unit(1000 + i) for i, mid in enumerate(ids)}
    _embed(pg_engine, vecs)
    _, node_before = index_state(pg_engine)
    env = {**os.environ, "MEMORYD_DB_URL": pg_url}
    config = tmp_path / "memoryd.toml"
    # This daemon's lexical index and HNSW graphs, built too.
    config.write_text("lexical_index_min_rows = 1\nvector_index_min_rows = 100\n"
                      "vector_index_part_rows = 200\n")
    cmd = [sys.executable, "-m", "memoryd", "store", "reindex", "--data-dir", str(tmp_path / "data"),
           "--config", str(config), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["backend"], summary["index"], summary["vectors"]) == ("postgresql", INDEX, 300)
    assert summary["lexical"]["built"] and summary["lexical"]["docs"] == 300, summary
    assert (tmp_path / "data" / "index" / "lexical" / "manifest.json").exists()
    graphs = summary["graphs"]
    assert (graphs["graphs"], graphs["parts"], graphs["vectors_in_graphs"]) == (1, 2, 300)
    assert (tmp_path / "data" / "index" / "vectors" / "manifest.json").exists()
    options, node_after = index_state(pg_engine)
    assert node_after != node_before
    assert options is not None and sorted(options) == ["ef_construction=200", "m=16"]
    query = vecs[ids[7]]
    with read_only(pg_engine) as conn:
        hits = vectors.knn(conn, query, k=5, scope_keys=["agent:me"], statuses=["active"], kind=None)
        seq7 = conn.execute(text("SELECT seq FROM memories WHERE id = :i"), {"i": ids[7]}).scalar_one()
    assert hits[0][0] == seq7 and np.isclose(hits[0][1], 0.0, atol=1e-5)
