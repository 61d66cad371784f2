"""The store the parts and flat-owner tests share: a large owner, a middling one and a small one,
with every fourth row a decision."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine

from memoryd.store.annindex import index_set as ann_set
from tests.ann._store import make_store

#: The owners of ``owners_store``, and their rows (the large owner's come first, from seq 1).
BIG = "agent:big"
OTHER = "agent:other"
SMALL = "user:u1"


@pytest.fixture
def owners_store(tmp_path: Path) -> Iterator[tuple[Engine, dict[str, list[int]], np.ndarray, Path]]:
    """(engine, each owner's seqs, the vectors in seq order, the index folder)."""
    engine, seqs, vecs = make_store(tmp_path / "memoryd.db", {BIG: 6000, OTHER: 3000, SMALL: 300},
                                    kinds=("fact", "fact", "fact", "decision"))
    yield engine, seqs, vecs, tmp_path / "index"
    ann_set.detach(engine)
    engine.dispose()
