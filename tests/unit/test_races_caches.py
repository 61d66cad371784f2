"""Bounded caches that two threads fill at once never evict the same key twice.

Both caches evict their oldest entry once they are full. Evicting is two
steps (find the oldest key, pop it); without a lock two threads can find the
same key, and then one pop fails (prepared.py) or the cache ends up one entry
over its bound (the query-embedding cache). Each test forces that
interleaving: the cache dict's ``pop`` makes the first two evictions wait for
each other at a barrier. With the eviction under a lock the second thread
cannot reach ``pop`` while the first holds it, the barrier times out, and
the evictions run one after the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, select

from memoryd.models import embedder as emb
from memoryd.store import prepared
from memoryd.store.schema import memories

#: How long the first eviction waits for a second one to reach ``pop`` beside it.
MEET_S = 0.5


class MeetingDict(dict[Any, Any]):
    """A dict whose first two ``pop`` calls wait for each other (or ``MEET_S``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.barrier = threading.Barrier(2, timeout=MEET_S)
        self.pops = 0
        self.met = False

    def pop(self, key: Any, *default: Any) -> Any:
        self.pops += 1
        if self.pops <= 2:
            try:
                self.barrier.wait()
                self.met = True
            except threading.BrokenBarrierError:
                pass  # the other thread could not get here at the same time: the lock held it
        return super().pop(key, *default)


def run_together(*targets: Callable[[], None]) -> list[BaseException]:
    """Run each target on its own thread; return what they raised."""
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_two_threads_filling_the_full_statement_cache_both_get_their_statement(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepared, "CACHE_MAX", 2)
    cache = MeetingDict()
    monkeypatch.setattr(prepared, "_cache", cache)
    with engine.connect() as conn:
        for key in ("old-1", "old-2"):
            prepared.prepare(conn, key, lambda: select(memories.c.id))
    assert len(cache) == 2  # full: the next insert evicts "old-1"

    got: dict[str, prepared.Prepared] = {}

    def prepare(key: str) -> Callable[[], None]:
        def run() -> None:
            with engine.connect() as conn:
                got[key] = prepared.prepare(conn, key, lambda: select(memories.c.seq))
        return run

    errors = run_together(prepare("new-a"), prepare("new-b"))
    assert errors == []
    assert set(got) == {"new-a", "new-b"} and all("seq" in p.sql for p in got.values())
    assert len(cache) <= 2
    assert not cache.met  # the evictions never overlapped


class CountingEmbedder(emb.EmbedderBase):
    """The shared query cache on a loaded embedder that encodes by counting characters."""

    def __init__(self) -> None:
        super().__init__("test")

    @property
    def loaded(self) -> bool:
        return True

    def encode(self, texts: Sequence[str], threads: int | None = None) -> np.ndarray:
        return np.asarray([[float(len(t))] * 4 for t in texts], dtype=np.float32)


def test_two_threads_filling_the_full_query_cache_keep_it_within_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb, "QUERY_CACHE_SIZE", 2)
    embedder = CountingEmbedder()
    embedder._query_cache = cache = MeetingDict()
    for text in ("first query", "second query"):
        embedder.encode_query(text)
    assert list(cache) == ["first query", "second query"]

    vectors: dict[str, Any] = {}

    def query(text: str) -> Callable[[], None]:
        return lambda: vectors.__setitem__(text, embedder.encode_query(text))

    errors = run_together(query("third"), query("fourth query"))
    assert errors == []
    assert vectors["third"].tolist() == [5.0] * 4 and vectors["fourth query"].tolist() == [12.0] * 4
    # Two inserts into a full cache of two: both old entries are gone, the bound holds.
    assert sorted(cache) == ["fourth query", "third"]
    assert not cache.met
