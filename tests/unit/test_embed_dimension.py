"""The embedder's dimension: read from the model's files, recorded in the store, checked at start.

models.embedder.model_dimension reads modules.json and the module configs as
sentence-transformers would (test_embed_dimension_model.py checks it against
loaded models); vectors.check_dimension lets a store without vectors adopt
the embedder's dimension and refuses one whose vectors have another, naming
``memoryd reembed``. A daemon started with such an embedder exits with that
message before it serves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, text

from memoryd.models.embedder import model_dimension
from memoryd.store import vectors
from memoryd.store.engine import read_only
from tests.integration.harness import DaemonHandle

TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
NORMALIZE = {"idx": 9, "name": "9", "path": "9_Normalize", "type": "sentence_transformers.models.Normalize"}


def model_dir(root: Path, modules: list[dict[str, Any]] | None, files: dict[str, Any]) -> str:
    """A model directory with ``modules.json`` (None: none) and JSON files at relative paths."""
    root.mkdir(parents=True, exist_ok=True)
    if modules is not None:
        (root / "modules.json").write_text(json.dumps(modules))
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(root)


def pooling(path: str = "1_Pooling") -> dict[str, Any]:
    return {"idx": 1, "name": "1", "path": path, "type": "sentence_transformers.models.Pooling"}


CASES: dict[str, tuple[list[dict[str, Any]] | None, dict[str, Any], int | None]] = {
    # sentence-transformers < 5 writes one boolean per pooling mode.
    "legacy mean pooling": ([TRANSFORMER, pooling(), NORMALIZE], {
        "config.json": {"hidden_size": 384},
        "1_Pooling/config.json": {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True,
                                  "pooling_mode_max_tokens": False, "pooling_mode_cls_token": False}}, 384),
    "legacy mean and max pooling": ([TRANSFORMER, pooling(), NORMALIZE], {
        "config.json": {"hidden_size": 384},
        "1_Pooling/config.json": {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True,
                                  "pooling_mode_max_tokens": True}}, 768),
    "new pooling_mode list": ([TRANSFORMER, pooling()], {
        "config.json": {"hidden_size": 256},
        "1_Pooling/config.json": {"embedding_dimension": 256, "pooling_mode": ["mean", "cls", "max"]}}, 768),
    "a Dense module last": ([TRANSFORMER, pooling(), {"path": "2_Dense", "type":
                                                      "sentence_transformers.models.Dense"}, NORMALIZE], {
        "config.json": {"hidden_size": 768},
        "1_Pooling/config.json": {"embedding_dimension": 768, "pooling_mode": "mean"},
        "2_Dense/config.json": {"in_features": 768, "out_features": 256}}, 256),
    "no modules.json (a plain transformers model)": (None, {"config.json": {"d_model": 512}}, 512),
    "a module this reader does not know": ([TRANSFORMER, {"path": "1_X", "type": "acme.Router"}], {
        "config.json": {"hidden_size": 384}}, None),
    "a broken pooling config": ([TRANSFORMER, pooling()], {
        "config.json": {"hidden_size": 384}, "1_Pooling/config.json": "{not json"}, None),
    "no pooling config": ([TRANSFORMER, pooling()], {"config.json": {"hidden_size": 384}}, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_model_dimension_reads_the_model_files(tmp_path: Path, case: str) -> None:
    modules, files, expected = CASES[case]
    assert model_dimension(model_dir(tmp_path / "m", modules, files)) == expected


def test_model_dimension_of_the_bundled_model_and_of_none() -> None:
    assert model_dimension("bundled") == 384
    assert model_dimension("none") is None


# -- the store's recorded dimension ----------------------------------------------------------
def _add_vector(engine: Engine, dim: int) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO memories (id, content, content_hash, kind, scope, owner, agent_id, status, "
            "importance, importance_raw, valid_from, recorded_at, metadata, derived) VALUES "
            "('m1', 'a note', 'h', 'fact', 'agent', 'a', 'a', 'active', 0.5, 0.5, :t, :t, '{}', 0)"),
            {"t": "2026-03-01T12:00:00.000000Z"})
        seq = conn.execute(text("SELECT seq FROM memories WHERE id = 'm1'")).scalar_one()
        vec = (np.ones(dim) / np.sqrt(dim)).astype("<f4")
        vectors.upsert(conn, [{"memory_seq": seq, "model": "m", "dim": dim, "vector": vec.tobytes(),
                               "content_hash": "h", "embedded_at": "2026-03-01T12:00:00.000000Z"}])


def _state(engine: Engine) -> tuple[int | None, int, str]:
    with read_only(engine) as conn:
        ddl = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'memory_vec'")).scalar_one()
        return vectors.index_dim(conn), vectors.stored_count(conn), ddl


def test_a_new_store_records_384_and_adopts_the_first_embedders_dimension(engine: Engine) -> None:
    assert _state(engine)[:2] == (384, 0)
    vectors.check_dimension(engine, 768, "wide-model", "/models/wide")
    dim, count, ddl = _state(engine)
    assert (dim, count) == (768, 0) and "float[768]" in ddl
    _add_vector(engine, 768)  # the rebuilt index takes 768-d vectors
    assert _state(engine)[:2] == (768, 1)


def test_an_emptied_store_whose_embedder_was_chosen_keeps_its_dimension(engine: Engine) -> None:
    # What `memoryd reembed` leaves: no vectors yet, the new model recorded. Starting with the
    # old embedder by mistake must not quietly undo the choice.
    with engine.begin() as conn:
        vectors.rebuild_index(conn, 768, "wide-model")
    with pytest.raises(vectors.DimensionMismatch) as info:
        vectors.check_dimension(engine, 384, "all-MiniLM-L6-v2", "bundled")
    assert "holds 768-dimensional ones (0 stored, made by 'wide-model')" in info.value.message
    assert _state(engine)[:2] == (768, 0)


def test_a_store_with_vectors_refuses_another_dimension_and_changes_nothing(engine: Engine) -> None:
    _add_vector(engine, 384)
    before = _state(engine)
    with pytest.raises(vectors.DimensionMismatch) as info:
        vectors.check_dimension(engine, 768, "wide-model", "/models/wide")
    message = info.value.message
    assert message.startswith("the embedder 'wide-model' makes 768-dimensional vectors, but this "
                              "store's vector index holds 384-dimensional ones (1 stored, made by 'm')")
    assert "memoryd reembed --embedder /models/wide" in message
    assert _state(engine) == before


@pytest.mark.parametrize("dim", [384, None])
def test_the_same_or_an_unknown_dimension_passes(engine: Engine, dim: int | None) -> None:
    _add_vector(engine, 384)
    before = _state(engine)
    vectors.check_dimension(engine, dim, "bundled", "bundled")
    assert _state(engine) == before


def test_the_daemon_refuses_to_start_with_an_embedder_of_another_dimension(
        start_daemon: Callable[..., DaemonHandle], tmp_path: Path) -> None:
    # A store with one 384-d vector, then a daemon whose embedder's files say 768.
    first = start_daemon(name="d384")
    first.write("Staging's Postgres listens on 5433", agent_id="a")
    first.stop()
    from memoryd.store.engine import create_store_engine

    engine = create_store_engine(first.store_url)
    with engine.begin() as conn:
        seq = conn.execute(text("SELECT seq FROM memories")).scalar_one()
        vec = (np.ones(384) / np.sqrt(384)).astype("<f4")
        vectors.upsert(conn, [{"memory_seq": seq, "model": "all-MiniLM-L6-v2", "dim": 384,
                               "vector": vec.tobytes(), "content_hash": "h",
                               "embedded_at": "2026-03-01T12:00:00.000000Z"}])
    engine.dispose()
    wide = model_dir(tmp_path / "wide", [TRANSFORMER, pooling(), NORMALIZE], {
        "config.json": {"hidden_size": 384},
        "1_Pooling/config.json": {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True,
                                  "pooling_mode_max_tokens": True}})
    second = start_daemon(name="d768", embedder=wide, data_dir=first.data_dir, db_url=first.db_url,
                          start=False)
    assert second.run_to_exit() == 2
    err = second.stderr_text()
    assert "Error: the embedder 'wide' makes 768-dimensional vectors" in err
    assert f"memoryd reembed --embedder {wide}" in err
